package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fairlock-go/fairlock"
)

// Forever is the wait of an acquisition that waits until its ctx ends.
const Forever time.Duration = -1

// minLease is the shortest explicit lease accepted (as the Redis locks).
const minLease = 10 * time.Millisecond

// Mutex is a fair lock on etcd: waiters are granted the lock in the order
// they joined its queue (etcd's create revision). It has the calls of the
// Redis locks' handles (fairlock.Handle and fairlock.FencedHandle), so it is
// a multi.Member and can replace a *fair.Mutex in code written against
// those calls.
//
// Each handle is its own owner: locking again through the same handle
// re-enters (a count kept by the handle; the lock is free after as many
// Unlocks). Concurrent acquisitions through one handle take turns. Give each
// goroutine that must be excluded its own handle (NewMutex talks to nobody).
type Mutex struct {
	c     *Client
	name  string
	dir   string // <prefix>/m/<escaped name>/: the queue
	kdir  string // where this handle's keys go (dir, or a read-write lock's r/ or w/)
	block string // the range this handle waits for (dir; a read waits for w/ only)
	id    int64
	owner string

	acq chan struct{} // one acquisition at a time
	// gen counts the unfenced deletes of this handle that got no reply
	// (one may still reach etcd later): part of the key name once above 0,
	// so such a delete cannot find a later hold's key (see release).
	gen atomic.Uint64

	weight, capacity int64 // a semaphore request (capacity 0: a lock)

	// headOp reads the queue's head (the oldest key in block); built once.
	headOp clientv3.Op
	// enq is the Txn that joins the queue under the key enq.key (see
	// waiter.enqueue), used only by an acquisition (in its turn).
	enq enqueueTxn
	// first bounds an acquisition's first attempt (see waiter.start),
	// used only by an acquisition (in its turn).
	first callBound
	// The handle's key on the last session it acquired on (see keyOf),
	// used only by an acquisition (in its turn).
	keySess clientv3.LeaseID
	keyGen  uint64
	key     string

	mu      sync.Mutex
	last    *hold         // the latest hold (nil: never held)
	pending chan struct{} // a cleanup in the background; closed when done
	// grace opens the current hold's loss watch lossWatchDelay after its
	// grant (see arm): one timer per handle, reset for each hold.
	grace *time.Timer
	// rel bounds an Unlock's release (one at a time: a hold has one
	// release, and the next hold begins after it ended).
	rel callBound
}

// hold is one acquisition that took the lock.
type hold struct {
	key   string
	rev   int64 // create revision of key: the fencing token
	sess  *session
	own   bool      // sess is this hold's own (explicit lease)
	end   time.Time // explicit lease: when the hold ends (zero: watchdog)
	count int

	releasing bool
	ended     bool
	err       error
	done      chan struct{}
	stop      context.CancelFunc // stops the monitor
	// The loss watch (see monitor) opens when the hold is observed (Done,
	// Err, ValidUntil, Key, HoldCount, a re-entry) or lossWatchDelay after
	// the grant, whichever is first.
	from int64 // the loss watch starts at this revision (after the grant's read)
	// An explicit lease's end (a timer; endHold stops it). The session's
	// end is told by the loss watch once it runs, and before that by
	// checkLive (Done, Err) and Unlock, which look at the session.
	leaseTimer *time.Timer
	graceAt    time.Time // when the handle's grace timer is due for this hold
	watching   bool
}

// lossWatchDelay is how long after its grant a hold that nobody observes
// opens the watch on its key that tells a deletion at once (the hold's
// loss watch). A hold released sooner never opens it: an uncontended
// Lock+Unlock then costs its two writes and nothing else (the watch's
// create, its DELETE event and its cancel made a cycle 1.2-1.5x
// concurrency.Mutex's). The watch starts from the revision of the grant,
// so a deletion in the meantime is not missed, only told up to this much
// later. A variable for the tests.
var lossWatchDelay = 20 * time.Millisecond

// arm sets what ends h, or opens its loss watch, without a goroutine of
// its own: the explicit lease's end, lossWatchDelay (the handle's grace
// timer, reset for each hold). The session's end needs nothing per hold:
// the loss watch (monitor) watches it, and until it opens nobody has
// looked at the hold but through Done, Err and Unlock, which check the
// session first. m.mu is held.
func (m *Mutex) arm(h *hold) {
	if !h.end.IsZero() {
		h.leaseTimer = time.AfterFunc(time.Until(h.end), func() {
			m.endHold(h, fmt.Errorf("%w: etcd: %q: the explicit lease ran out", fairlock.ErrLost, m.name))
		})
	}
	h.graceAt = time.Now().Add(lossWatchDelay)
	if m.grace == nil {
		m.grace = time.AfterFunc(lossWatchDelay, m.graceDue)
	} else {
		m.grace.Reset(lossWatchDelay)
	}
}

// graceDue opens the current hold's loss watch when its lossWatchDelay has
// passed. A run of the timer meant for an earlier hold (it fired as that
// hold ended and the timer was reset for this one) is too early: ignored.
func (m *Mutex) graceDue() {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.last
	// A hold being released needs no watch: the release's fenced delete
	// tells whether its key was still there.
	if h == nil || h.ended || h.releasing || time.Now().Before(h.graceAt) {
		return
	}
	m.observe(h)
}

// sessionEnded ends h because its session ended, unless h is an explicit
// lease's hold being released (the release ends its session itself, and
// Unlock says how the hold ended).
func (m *Mutex) sessionEnded(h *hold) {
	m.mu.Lock()
	rel := h.releasing
	m.mu.Unlock()
	if !(h.own && rel) {
		m.endHold(h, h.sess.reason())
	}
}

// observe opens h's loss watch (the monitor) unless it is open or h has
// ended. m.mu is held.
func (m *Mutex) observe(h *hold) {
	if h.watching || h.ended {
		return
	}
	h.watching = true
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	go m.monitor(ctx, h, h.from)
}

// NewMutex returns a handle on the fair lock name. The name may be any
// non-empty string (it is escaped in the key).
func (c *Client) NewMutex(name string) (*Mutex, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: etcd: nil *Client", fairlock.ErrInvalidValue)
	}
	if name == "" {
		return nil, fmt.Errorf("%w: etcd: empty lock name", fairlock.ErrInvalidName)
	}
	dir := c.cfg.prefix + "/m/" + url.PathEscape(name) + "/"
	return c.newHandle(name, dir, dir, dir), nil
}

func (c *Client) newHandle(name, dir, kdir, block string) *Mutex {
	id := c.handles.Add(1)
	return &Mutex{c: c, name: name, dir: dir, kdir: kdir, block: block,
		id: id, owner: fmt.Sprintf("%s:%d", c.id, id), acq: make(chan struct{}, 1),
		headOp: clientv3.OpGet(block, clientv3.WithFirstCreate()...)}
}

var errZero = fmt.Errorf("%w: etcd: a zero lock handle (make one with Client.NewMutex)", fairlock.ErrInvalidValue)

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (m *Mutex) zero() bool { return m == nil || m.c == nil }

// Name is the lock's name.
func (m *Mutex) Name() string {
	if m.zero() {
		return ""
	}
	return m.name
}

// Owner is this handle's owner id, "<client id>:<handle id>".
func (m *Mutex) Owner() string {
	if m.zero() {
		return ""
	}
	return m.owner
}

// Prefix is the key prefix of the lock's queue.
func (m *Mutex) Prefix() string {
	if m.zero() {
		return ""
	}
	return m.dir
}

// AcquireOptions are the general form of an acquisition.
type AcquireOptions struct {
	// Lease is the explicit lease: the hold ends that long after it was
	// granted (the lease is revoked then; etcd frees the lock by itself at
	// most the lease rounded up to whole seconds, or etcd's minimum TTL,
	// after the grant if this client is gone). 0: the Client's lease, kept
	// alive until Unlock.
	Lease time.Duration
	// Wait bounds the wait; Forever waits until ctx ends; 0 makes one
	// attempt that never queues (TryLock).
	Wait time.Duration
	// Position, when not nil, is called each time the waiter (re)reads the
	// queue while it waits: Ahead is the number of keys with a smaller
	// create revision (exact at that revision: a revision-ranged, keys-only
	// read, O(number ahead)),
	// Joined is set on the first report, ETA is 0 (not estimated), At is
	// the local time of the read. Called on the waiting goroutine: it must
	// return quickly.
	Position func(fairlock.Position)
}

// Lock acquires the lock, waiting in arrival order until ctx ends. The
// Client's lease keeps it until Unlock. If ctx ends first it returns an
// error matching fairlock.ErrCanceled and ctx.Err(); its queue key is
// deleted in the background before this handle acquires again. A waiter
// whose lease is lost (expired, or revoked by an operator) stops waiting at
// once with an error matching fairlock.ErrLost (its place is gone). The
// first attempt (one Txn, which takes a free lock) watches ctx, and
// Client.Close, only from 20 ms into its call: an attempt answered sooner
// makes no context of its own, and its grant stands even if ctx ended
// meanwhile; one still unanswered then (etcd out of reach) ends at most
// 20 ms after ctx ended.
func (m *Mutex) Lock(ctx context.Context) error {
	_, _, err := m.acquire(ctx, AcquireOptions{Wait: Forever})
	return err
}

// LockWithLease is Lock with an explicit lease (see AcquireOptions.Lease).
// A lease under 10 ms is refused with ErrInvalidValue. A re-entry keeps the
// hold's lease as it is.
func (m *Mutex) LockWithLease(ctx context.Context, lease time.Duration) error {
	if !m.zero() && lease <= 0 {
		return fmt.Errorf("%w: lease %v", fairlock.ErrInvalidValue, lease)
	}
	_, _, err := m.acquire(ctx, AcquireOptions{Wait: Forever, Lease: lease})
	return err
}

// TryLock makes one attempt and does not wait: it takes the lock only if
// nobody holds it or waits for it (the queue goes first). Contention is
// false with a nil error.
func (m *Mutex) TryLock(ctx context.Context) (bool, error) {
	ok, _, err := m.acquire(ctx, AcquireOptions{})
	return ok, err
}

// TryLockFor waits up to wait for the lock, in arrival order, and leaves
// the queue (its key deleted) when the wait runs out: false with a nil
// error. A lease of 0 means the Client's lease keeps the lock. A wait of 0
// is TryLock.
func (m *Mutex) TryLockFor(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if !m.zero() && wait < 0 {
		return false, fmt.Errorf("%w: wait %v", fairlock.ErrInvalidValue, wait)
	}
	ok, _, err := m.acquire(ctx, AcquireOptions{Wait: wait, Lease: lease})
	return ok, err
}

// Acquire is the general acquisition; see AcquireOptions. It returns
// whether it took the lock.
func (m *Mutex) Acquire(ctx context.Context, o AcquireOptions) (bool, error) {
	ok, _, err := m.acquire(ctx, o)
	return ok, err
}

// LockAndGetToken is Lock, returning the hold's fencing token: the create
// revision of its queue key. Tokens strictly increase from holder to holder
// of the lock (and across all locks of one etcd cluster); a re-entry returns
// the hold's token. Use it with package fence as a Redis lock's token, or
// in an etcd Txn that writes the protected data, compared with
// CreateRevision(Key()).
func (m *Mutex) LockAndGetToken(ctx context.Context) (int64, error) {
	_, tok, err := m.acquire(ctx, AcquireOptions{Wait: Forever})
	return tok, err
}

// LockAndGetTokenWithLease is LockAndGetToken with an explicit lease.
func (m *Mutex) LockAndGetTokenWithLease(ctx context.Context, lease time.Duration) (int64, error) {
	if !m.zero() && lease <= 0 {
		return 0, fmt.Errorf("%w: lease %v", fairlock.ErrInvalidValue, lease)
	}
	_, tok, err := m.acquire(ctx, AcquireOptions{Wait: Forever, Lease: lease})
	return tok, err
}

// TryLockAndGetToken is TryLockFor, returning the token when it acquired.
func (m *Mutex) TryLockAndGetToken(ctx context.Context, wait, lease time.Duration) (int64, bool, error) {
	if !m.zero() && wait < 0 {
		return 0, false, fmt.Errorf("%w: wait %v", fairlock.ErrInvalidValue, wait)
	}
	ok, tok, err := m.acquire(ctx, AcquireOptions{Wait: wait, Lease: lease})
	return tok, ok, err
}

// Token is the current holder's token (the smallest create revision in the
// queue, by any owner), read linearizably; 0 when nobody holds the lock. It
// is this handle's token while this handle holds the lock. (On a half of an
// RWMutex: the oldest key of either kind, a holder's.)
func (m *Mutex) Token(ctx context.Context) (int64, error) {
	if m.zero() {
		return 0, errZero
	}
	if m.c.isClosed() {
		return 0, errClosed
	}
	resp, err := m.c.cli.Get(ctx, m.dir, clientv3.WithFirstCreate()...)
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return resp.Kvs[0].CreateRevision, nil
}

// Key is the etcd key of this handle's current hold ("" when it holds
// nothing): compare its CreateRevision with the token in a Txn to fence an
// etcd write on the hold.
func (m *Mutex) Key() string {
	if m.zero() {
		return ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.last; h != nil && !h.ended {
		m.observe(h)
		if !h.sess.ended() { // else the loss watch is ending it
			return h.key
		}
	}
	return ""
}

// IsHeld reports whether this handle holds the lock, read linearizably
// from etcd (its key is there with the hold's create revision).
func (m *Mutex) IsHeld(ctx context.Context) (bool, error) {
	if m.zero() {
		return false, errZero
	}
	if m.c.isClosed() {
		return false, errClosed
	}
	m.mu.Lock()
	h := m.last
	live := h != nil && !h.ended
	m.mu.Unlock()
	if !live {
		return false, nil
	}
	resp, err := m.c.cli.Get(ctx, h.key)
	if err != nil {
		return false, err
	}
	return len(resp.Kvs) == 1 && resp.Kvs[0].CreateRevision == h.rev, nil
}

// HoldCount is this handle's hold count (0 when it holds nothing). It is
// kept by the handle: etcd holds one key per hold.
func (m *Mutex) HoldCount() int {
	if m.zero() {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.last; h != nil && !h.ended {
		m.observe(h)
		if !h.sess.ended() { // else the loss watch is ending it
			return h.count
		}
	}
	return 0
}

// checkLive ends the current hold at once when its validity has passed
// (the session's, or an explicit lease's end), so Done and Err never tell a
// hold valid after its validity, however late the monitor runs.
func (m *Mutex) checkLive() {
	m.mu.Lock()
	h := m.last
	live := h != nil && !h.ended
	m.mu.Unlock()
	if !live {
		return
	}
	h.sess.expireIfPast()
	if h.sess.ended() {
		m.endHold(h, h.sess.reason())
		return
	}
	if !h.end.IsZero() && !time.Now().Before(h.end) {
		m.endHold(h, fmt.Errorf("%w: etcd: %q: the explicit lease ran out", fairlock.ErrLost, m.name))
	}
}

// Done returns a channel closed when this handle's current hold ends: the
// last Unlock, or its loss (the key was deleted: the lease was revoked or
// expired; the lease's validity passed with no keep-alive confirmed; an
// explicit lease ran out), or Client.Close. Err says which. Already closed
// when the handle holds nothing. Done and Err check the validity at the
// call: once ValidUntil has passed they tell the loss even if the
// background keep-alive has not run since (a process resumed after a
// pause), so a check made before acting is never late. A deleted key is
// told by a watch on it, opened when the hold is first observed (Done,
// Err, ValidUntil, Key, HoldCount, a re-entry) or 20 ms after the grant,
// whichever is first; it watches from the grant's revision, so a deletion
// before it opened is told too.
func (m *Mutex) Done() <-chan struct{} {
	if m.zero() {
		return closedChan
	}
	m.checkLive()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last == nil {
		return closedChan
	}
	m.observe(m.last)
	return m.last.done
}

// Err is nil while the lock is held and after a release; after a loss an
// error matching fairlock.ErrLost that says why; after Client.Close with
// the lock held, one matching fairlock.ErrClosed.
func (m *Mutex) Err() error {
	if m.zero() {
		return errZero
	}
	m.checkLive()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last == nil {
		return nil
	}
	m.observe(m.last)
	return m.last.err
}

// ValidUntil is the local instant until which the current hold is known to
// be valid: the send time of the latest keep-alive of its lease that etcd
// confirmed (or of the grant) plus the TTL etcd confirmed, less a drift
// margin (1% of the TTL plus 2 ms), and for an explicit lease at most the
// grant plus the lease. etcd's leader cannot expire the lease before then.
// Done closes when it passes with no newer keep-alive confirmed. Zero when
// nothing is held.
func (m *Mutex) ValidUntil() time.Time {
	if m.zero() {
		return time.Time{}
	}
	m.mu.Lock()
	h := m.last
	if h == nil || h.ended {
		m.mu.Unlock()
		return time.Time{}
	}
	m.observe(h)
	end := h.end
	m.mu.Unlock()
	v := h.sess.validUntil()
	if !end.IsZero() && end.Before(v) {
		v = end
	}
	return v
}

// Unlock releases one hold; releasing the last deletes the hold's key,
// which lets the next waiter in. A retry of the delete is a Txn fenced on
// the key's create revision, so a retry whose first attempt committed
// never deletes a newer hold of the same handle, whose key has the same
// name (etcd #22082); the first attempt is a plain Delete, as no newer
// hold can exist yet (an acquisition through the handle waits for its
// release to end). It returns an error matching fairlock.ErrNotHeld, changing
// nothing, when this handle holds nothing (or its hold was lost: Err says
// why). When ctx has ended it still runs, on a context with ctx's values
// bounded by the cleanup timeout; a ctx that ends during the release ends
// it at most 20 ms into the call (a release answered sooner registers
// nothing on ctx). When etcd cannot be reached it returns the error, the
// hold ends (Err matching ErrLost) and the release is retried in the
// background until the lease's validity passes.
func (m *Mutex) Unlock(ctx context.Context) error {
	if m.zero() {
		return errZero
	}
	m.mu.Lock()
	h := m.last
	if h == nil || h.ended {
		m.mu.Unlock()
		if h != nil && h.err != nil {
			return fmt.Errorf("%w: %w", fairlock.ErrNotHeld, h.err)
		}
		return fmt.Errorf("%w: etcd: %q", fairlock.ErrNotHeld, m.name)
	}
	if h.releasing {
		m.mu.Unlock()
		return fmt.Errorf("%w: etcd: %q is being released", fairlock.ErrNotHeld, m.name)
	}
	if h.count > 1 {
		h.count--
		m.mu.Unlock()
		return nil
	}
	if h.sess.ended() {
		// The session ended (lost, or the Client closing) before the loss
		// watch told: the hold ended with it.
		m.mu.Unlock()
		m.endHold(h, h.sess.reason())
		return m.Unlock(ctx)
	}
	h.releasing = true
	m.mu.Unlock()

	// The release's context (see callBound): the caller's values, ended
	// at the cleanup timeout and, once the delete has run callWatchDelay,
	// when ctx ends; a ctx that already ended gives only its values.
	user := ctx
	if ctx == nil {
		user = context.Background()
	} else if ctx.Err() != nil {
		user = context.WithoutCancel(ctx)
	}
	released, err := m.release(m.rel.begin(user, nil, time.Now().Add(m.c.cfg.cleanup)), h, false)
	m.rel.endCall() // before endHold: the next release of the handle may reuse it
	switch {
	case err == nil && released:
		m.endHold(h, nil)
		return nil
	case err == nil:
		m.endHold(h, fmt.Errorf("%w: etcd: %q: the hold's key was gone at release (its lease expired or was revoked)", fairlock.ErrLost, m.name))
		return fmt.Errorf("%w: %w", fairlock.ErrNotHeld, m.Err())
	default:
		m.endHold(h, fmt.Errorf("%w: etcd: %q: release not confirmed: %w", fairlock.ErrLost, m.name, err))
		go m.releaseInBackground(h)
		return err
	}
}

// release deletes h's key or, for an explicit lease, revokes the lease.
// It retries transient errors until ctx ends. released is false when the
// key was already gone; a retry after an attempt whose outcome is unknown
// counts a missing key as released (the first attempt's outcome). The
// delete is fenced on the key's create revision (a Txn) when fenced is set
// and on every retry; unfenced (a plain Delete, cheaper for etcd to apply)
// only as the first attempt of Unlock, when no newer hold of the handle
// can exist.
func (m *Mutex) release(ctx context.Context, h *hold, fenced bool) (released bool, err error) {
	ambiguous := false
	for {
		if h.own {
			_, err = m.c.cli.Revoke(ctx, h.sess.id)
			if err == nil {
				h.sess.end(fmt.Errorf("%w: etcd: released", fairlock.ErrLost))
				return true, nil
			}
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				h.sess.end(fmt.Errorf("%w: etcd: lease gone", fairlock.ErrLost))
				return ambiguous, nil
			}
		} else if !fenced {
			var resp *clientv3.DeleteResponse
			resp, err = m.c.cli.Delete(ctx, h.key)
			if err == nil {
				return resp.Deleted == 1, nil
			}
			// No reply: the delete may still be applied later (held in a
			// stalled connection, proposed before the cancel), after this
			// handle took the lock again under the same name. The handle's
			// later keys get a new name, so it can only find this one.
			m.gen.Add(1)
		} else {
			var resp *clientv3.TxnResponse
			resp, err = m.c.cli.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)).
				Then(clientv3.OpDelete(h.key)).Commit()
			if err == nil {
				return resp.Succeeded || ambiguous, nil
			}
		}
		ambiguous, fenced = true, true
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return false, err
		}
	}
}

// releaseInBackground retries a release that could not be confirmed, until
// the lease's validity passes (etcd frees the lock by itself by then).
func (m *Mutex) releaseInBackground(h *hold) {
	until := h.sess.validUntil()
	if until.IsZero() {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), until)
	defer cancel()
	_, _ = m.release(ctx, h, true)
}

// endHold ends h with err (nil: released); the first end wins.
func (m *Mutex) endHold(h *hold, err error) {
	m.mu.Lock()
	if h.ended {
		m.mu.Unlock()
		return
	}
	h.ended, h.err = true, err
	close(h.done)
	stop, rel, lt := h.stop, h.releasing, h.leaseTimer
	if m.last == h && m.grace != nil {
		m.grace.Stop()
	}
	m.mu.Unlock()
	if stop != nil {
		stop()
	}
	if lt != nil {
		lt.Stop()
	}
	if h.own && err != nil && !rel {
		go h.sess.revoke() // a lost or closed explicit-lease hold: give the lease back
	}
	m.c.mu.Lock()
	delete(m.c.hold, m)
	m.c.mu.Unlock()
}

// closed is Client.Close's notice to this handle.
func (m *Mutex) closed() {
	m.mu.Lock()
	h := m.last
	m.mu.Unlock()
	if h != nil {
		m.endHold(h, errClosed)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// canceled is the error of a wait whose ctx ended.
func canceled(ctx context.Context) error {
	return fmt.Errorf("%w: %w", fairlock.ErrCanceled, context.Cause(ctx))
}

// enter takes the handle's acquisition turn and waits for a pending
// cleanup.
// errWaitedOut: the wait bound passed in enter.
var errWaitedOut = errors.New("etcd: the wait ran out")

func (m *Mutex) enter(ctx context.Context, deadline time.Time) error {
	select {
	case m.acq <- struct{}{}:
	case <-ctx.Done():
		return canceled(ctx)
	case <-m.c.closed:
		return errClosed
	}
	m.mu.Lock()
	var buf [2]<-chan struct{}
	waits := buf[:0]
	if m.pending != nil {
		waits = append(waits, m.pending)
	}
	if h := m.last; h != nil && h.releasing && !h.ended {
		// An Unlock of this handle is deleting the key a new acquisition
		// would write (the same name): let it end first.
		waits = append(waits, h.done)
	}
	m.mu.Unlock()
	for _, p := range waits {
		select {
		case <-p:
			continue
		default:
		}
		var timer <-chan time.Time
		if !deadline.IsZero() {
			t := time.NewTimer(time.Until(deadline))
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-p:
		case <-ctx.Done():
			<-m.acq
			return canceled(ctx)
		case <-timer:
			<-m.acq
			return errWaitedOut
		}
	}
	return nil
}

// acquire is every acquisition.
func (m *Mutex) acquire(ctx context.Context, o AcquireOptions) (bool, int64, error) {
	if m.zero() {
		return false, 0, errZero
	}
	if ctx == nil {
		return false, 0, fmt.Errorf("%w: nil context", fairlock.ErrInvalidValue)
	}
	if o.Lease < 0 || (o.Lease > 0 && o.Lease < minLease) {
		return false, 0, fmt.Errorf("%w: lease %v (0, or at least %v)", fairlock.ErrInvalidValue, o.Lease, minLease)
	}
	if o.Wait < 0 && o.Wait != Forever {
		return false, 0, fmt.Errorf("%w: wait %v", fairlock.ErrInvalidValue, o.Wait)
	}
	if m.c.isClosed() {
		return false, 0, errClosed
	}
	if ctx.Err() != nil {
		return false, 0, canceled(ctx)
	}
	var deadline time.Time
	if o.Wait > 0 {
		deadline = time.Now().Add(o.Wait)
	}
	if err := m.enter(ctx, deadline); err != nil {
		if errors.Is(err, errWaitedOut) {
			return false, 0, nil
		}
		return false, 0, err
	}
	defer func() { <-m.acq }()

	m.mu.Lock()
	if h := m.last; h != nil && !h.ended && !h.releasing && h.sess.ended() {
		// The session ended before the loss watch told: the hold is lost,
		// so this is a new acquisition.
		m.mu.Unlock()
		m.endHold(h, h.sess.reason())
		m.mu.Lock()
	}
	if h := m.last; h != nil && !h.ended && !h.releasing {
		m.observe(h)
		h.count++
		m.mu.Unlock()
		return true, h.rev, nil
	}
	m.mu.Unlock()

	// The session (lease) the key is attached to. A lease found gone when
	// the key is written (expired or revoked before the keep-alives told)
	// wrote nothing: start again on a new one.
	var (
		sess     *session
		key      string
		ok       bool
		rev, hdr int64
		err      error
		start    time.Time
	)
	for attempt := 0; ; attempt++ {
		// The grant is bounded by the wait too: with etcd out of reach it
		// would wait for a connection until ctx ends.
		gctx, gcancel := ctx, context.CancelFunc(func() {})
		if !deadline.IsZero() {
			gctx, gcancel = context.WithDeadline(ctx, deadline)
		}
		if o.Lease > 0 {
			sess, err = m.c.grant(gctx, o.Lease)
		} else {
			sess, err = m.c.shared(gctx)
		}
		gcancel()
		if err != nil {
			if ctx.Err() != nil {
				return false, 0, canceled(ctx)
			}
			if !deadline.IsZero() && !time.Now().Before(deadline) {
				return false, 0, nil // the wait ran out
			}
			return false, 0, err
		}
		m.c.mu.Lock()
		m.c.hold[m] = struct{}{}
		m.c.mu.Unlock()
		key = m.keyOf(sess)
		start = time.Now()
		w := &waiter{m: m, user: ctx, o: o, key: key, sess: sess, deadline: deadline}
		w.start()
		ok, rev, hdr, err = w.run()
		w.finish()
		if errors.Is(err, errLeaseGone) && attempt < 3 {
			continue
		}
		if errors.Is(err, errLeaseGone) {
			err = w.lostErr()
		}
		break
	}
	if !ok {
		m.cleanup(sess, o.Lease > 0, key, rev)
		m.c.mu.Lock()
		delete(m.c.hold, m)
		m.c.mu.Unlock()
		return false, 0, err
	}
	h := &hold{key: key, rev: rev, sess: sess, own: o.Lease > 0, count: 1, done: make(chan struct{})}
	if h.own {
		// From here the lease is not kept alive: refresh it once to a full
		// TTL, then let it run; the hold ends at start+lease.
		sess.stopKeepAlive()
		rctx, cancel := m.c.cleanupCtx(ctx)
		_, rerr := sess.refresh(rctx)
		cancel()
		if rerr != nil {
			m.cleanup(sess, true, key, rev)
			m.c.mu.Lock()
			delete(m.c.hold, m)
			m.c.mu.Unlock()
			return false, 0, rerr
		}
		h.end = start.Add(o.Lease - drift(o.Lease))
	}
	h.from = hdr + 1
	m.mu.Lock()
	m.last = h
	m.arm(h)
	m.mu.Unlock()
	if m.c.isClosed() {
		m.endHold(h, errClosed)
		return false, 0, errClosed
	}
	return true, rev, nil
}

// keyOf is this handle's key on sess: <queue><lease id, 16 hex
// digits>/<handle id>, the same for every acquisition of the handle on one
// lease (a new name per acquisition would leave a deleted key in etcd's
// index per cycle until compaction, and every read of the queue's head
// steps over them), with ".<gen>" after an unconfirmed unfenced delete.
// Kept for the next acquisition on the same lease and gen.
func (m *Mutex) keyOf(sess *session) string {
	g := m.gen.Load()
	if m.key != "" && m.keySess == sess.id && m.keyGen == g {
		return m.key
	}
	var b []byte
	b = append(b, m.kdir...)
	h := strconv.FormatUint(uint64(sess.id), 16)
	for range 16 - len(h) {
		b = append(b, '0')
	}
	b = append(b, h...)
	b = append(b, '/')
	b = strconv.AppendInt(b, m.id, 10)
	if g > 0 {
		b = append(b, '.')
		b = strconv.AppendUint(b, g, 10)
	}
	m.key, m.keySess, m.keyGen = string(b), sess.id, g
	return m.key
}

// cleanup gives back what a failed acquisition may have left: its explicit
// lease (revoked) or its key (deleted, fenced on its create revision when
// known), in the background; the handle's next acquisition waits for it.
func (m *Mutex) cleanup(sess *session, own bool, key string, rev int64) {
	p := make(chan struct{})
	m.mu.Lock()
	m.pending = p
	m.mu.Unlock()
	go func() {
		defer close(p)
		if own {
			sess.revoke()
			return
		}
		cctx, ccancel := m.c.cleanupCtx(nil)
		defer ccancel()
		// The key goes with the lease: stop when the session ends.
		ctx, cancel := bound(cctx, time.Time{}, sess)
		defer cancel()
		for ctx.Err() == nil {
			var err error
			if rev > 0 {
				_, err = m.c.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
					Then(clientv3.OpDelete(key)).Commit()
			} else {
				// Unknown revision (the enqueue's reply was lost): the key
				// is this handle's under this lease, and the handle is not
				// acquiring, so delete it by name.
				_, err = m.c.cli.Delete(ctx, key)
			}
			if err == nil || sess.ended() {
				return
			}
			sleepCtx(ctx, 100*time.Millisecond)
		}
	}()
}

// monitor is the loss watch: it ends h when its key is deleted by anyone
// but its release (an operator's Revoke, expiry). It watches h's key from
// rev (after the read that granted the hold), so no deletion is missed. It
// runs from when the hold is observed or lossWatchDelay after the grant,
// whichever is first, and not at all for a hold released before (see
// lossWatchDelay); the session's end and an explicit lease's end are told
// by arm's callbacks.
func (m *Mutex) monitor(parent context.Context, h *hold, rev int64) {
	// Every call below ends when the session does: with etcd out of reach
	// a Watch or a Get waits for a connection, and the loss must still be
	// told when the validity passes.
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	go func() {
		select {
		case <-h.sess.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	defer func() {
		if h.sess.ended() {
			m.sessionEnded(h)
		}
	}()
	for ctx.Err() == nil {
		m.c.keepWatchStream()
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := m.c.cli.Watch(wctx, h.key, clientv3.WithRev(rev), clientv3.WithFilterPut())
		gone := false
	watch:
		for {
			select {
			case <-ctx.Done():
				cancel()
				return
			case <-h.sess.done:
				cancel()
				m.sessionEnded(h)
				return
			case wr, ok := <-wch:
				if !ok || wr.Err() != nil {
					break watch
				}
				for _, ev := range wr.Events {
					if ev.Type == mvccpb.DELETE {
						gone = true
					}
				}
				if gone {
					break watch
				}
			}
		}
		cancel()
		if gone {
			m.mu.Lock()
			rel := h.releasing
			m.mu.Unlock()
			if !rel {
				m.endHold(h, fmt.Errorf("%w: etcd: %q: the hold's key was deleted (lease revoked or expired)", fairlock.ErrLost, m.name))
				// If the lease went with it, the session is lost too: ask
				// now rather than at the next keep-alive.
				go func() {
					ctx, cancel := m.c.cleanupCtx(nil)
					defer cancel()
					_, _ = h.sess.refresh(ctx)
				}()
			}
			return
		}
		// The watch ended (no leader, compaction, a broken stream): read
		// the key again and watch on from that read.
		for ctx.Err() == nil {
			resp, err := m.c.cli.Get(ctx, h.key)
			if err == nil {
				if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != h.rev {
					m.mu.Lock()
					rel := h.releasing
					m.mu.Unlock()
					if !rel {
						m.endHold(h, fmt.Errorf("%w: etcd: %q: the hold's key is gone", fairlock.ErrLost, m.name))
					}
					return
				}
				rev = resp.Header.Revision + 1
				break
			}
			if !sleepCtx(ctx, 100*time.Millisecond) {
				return
			}
		}
	}
}
