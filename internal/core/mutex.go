package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/watchdog"
	"github.com/fairlock-go/fairlock/lua"
)

// Engine is what differs between the reentrant and the fair lock: which
// scripts run, and which channel a waiter listens on.
type Engine interface {
	// Try makes one attempt. With queue set it may join a wait queue (the
	// fair lock); ttlMs then says how long to wait before the next attempt.
	// When acquired, ttlMs carries the acquisition's fencing token instead
	// (0 for an engine without tokens); see AcquireOpts.Token.
	Try(ctx context.Context, a lua.Args, queue bool) (acquired bool, ttlMs int64, err error)
	// GiveUp leaves the wait queue after attempts made with queue set.
	GiveUp(ctx context.Context, a lua.Args) error
	Unlock(ctx context.Context, a lua.Args) (lua.UnlockResult, error)
	ForceUnlock(ctx context.Context, a lua.Args) (bool, error)
	// WakeChannel is the channel on which the owner is woken.
	WakeChannel(owner string) string
}

// Mutex is the client side of one lock handle: one owner id, its local view
// of its holds, and the loops that acquire, wait and release.
type Mutex struct {
	S     *Session
	E     Engine
	Keys  lua.Keys
	Owner string
	// ThreadID is the thread part of Owner.
	ThreadID int64
	// WatchKind is the watchdog renewal a hold of this handle gets:
	// watchdog.KindLock (renew.lua), or KindRW (the read-write lock's).
	WatchKind watchdog.Kind
	// Queue: Lock and TryLockFor join the fair queue (the fair lock's
	// engines say so through a method Queued() bool).
	Queue bool
	// Slot is the fair lock's default wait slot; 0: the session's.
	Slot time.Duration

	mu       sync.Mutex
	settling []<-chan struct{} // give-backs of abandoned requests still running
	holds    int               // holds this handle has taken and not released
	cur      *hold             // the current hold; nil when not held
	last     *hold             // the hold that ended most recently
}

// hold is one period of holding the lock, from the first acquisition to the
// release of the last hold or the loss of the lock.
//
// Its validity is kept on the local monotonic clock (Redlock's rule): an
// acquisition or renewal sent at t makes the hold valid until
// t + lease - drift, since Redis starts the lease no earlier than it
// receives the request. When validity runs out with no renewal confirmed,
// the hold ends as lost, whatever Redis calls are still in flight: so the
// holder's believed-valid window never outlasts Redis's own lease.
type hold struct {
	m          *Mutex
	done       chan struct{} // made on the first call to Done
	ended      bool
	err        error
	leaseMs    int64 // lease set by the latest acquisition (Redisson's internalLockLeaseTime)
	watchdog   bool  // kept by the watchdog
	wd         *watchdog.Entry
	validUntil time.Time
	timer      *time.Timer // fires at validUntil
}

// Drift is the margin taken off every lease when computing a hold's
// validity: Redlock's clock-drift allowance, 1% of the lease plus 2 ms.
func Drift(lease time.Duration) time.Duration { return lease/100 + 2*time.Millisecond }

func validity(sent time.Time, leaseMs int64) time.Time {
	l := time.Duration(leaseMs) * time.Millisecond
	return sent.Add(l - Drift(l))
}

// NewMutex validates name and builds a handle with a fresh owner id, or
// with threadID when it is positive.
func NewMutex(s *Session, e func(lua.Keys) Engine, name string, threadID int64) (*Mutex, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidValue)
	}
	if err := lua.ValidateName(name); err != nil {
		return nil, fmt.Errorf("fairlock: %w", err)
	}
	if threadID < 0 {
		return nil, fmt.Errorf("%w: negative thread id %d", ErrInvalidValue, threadID)
	}
	if threadID == 0 {
		threadID = s.NewThreadID()
	}
	k := lua.KeysFor(name)
	return &Mutex{S: s, E: e(k), Keys: k, Owner: lua.Owner(s.ID, threadID), ThreadID: threadID}, nil
}

// Forever, as AcquireOpts.Wait, waits until the lock is acquired or ctx ends.
const Forever time.Duration = -1

// AcquireOpts says how to acquire.
type AcquireOpts struct {
	Lease time.Duration // explicit lease; 0: the watchdog keeps the lock
	Wait  time.Duration // how long to wait; 0: one attempt; Forever: until ctx ends
	Slot  time.Duration // fair lock wait slot; 0: the session's
	Queue bool          // attempts may join the fair queue
	// Token, when not nil, receives the fencing token of the acquisition
	// that succeeded (Engine.Try's ttlMs when acquired; 0: none).
	Token *int64
}

func canceled(err error) error { return fmt.Errorf("%w: %w", ErrCanceled, err) }

var errNilCtx = fmt.Errorf("%w: nil context", ErrInvalidValue)

// settle waits until the give-backs of this handle's abandoned requests are
// done (see cleanup), or ctx ends (its error), or the session closes
// (ErrClosed).
func (m *Mutex) settle(ctx context.Context) error {
	for {
		m.mu.Lock()
		for len(m.settling) > 0 {
			select {
			case <-m.settling[0]:
				m.settling = m.settling[1:]
				continue
			default:
			}
			break
		}
		var next <-chan struct{}
		if len(m.settling) > 0 {
			next = m.settling[0]
		}
		m.mu.Unlock()
		if next == nil {
			return nil
		}
		select {
		case <-next:
		case <-ctx.Done():
			return ctx.Err()
		case <-m.S.closeCtx.Done():
			// Close waits for the calls in progress before it stops
			// the give-backs: waiting for one here would hold Close up
			// until ctx ends.
			return ErrClosed
		}
	}
}

// leaseFor is the lease to send with an acquisition asked with lease
// (0: the watchdog's), and whether the watchdog keeps the hold. A re-entry
// of a watchdog-kept hold sends the watchdog lease whatever lease it asks
// for: the watchdog keeps the hold until its last release anyway, and its
// next renewal would set the watchdog lease again, so a longer lease would
// only make the holder believe in a validity the key does not have, and a
// shorter one would cut the key's TTL under the watchdog.
func (m *Mutex) leaseFor(lease time.Duration) (int64, bool) {
	wd := m.S.Config.Lease.Milliseconds()
	if lease == 0 {
		return wd, true
	}
	m.mu.Lock()
	kept := m.cur != nil && m.cur.watchdog
	m.mu.Unlock()
	if kept {
		return wd, false
	}
	return lease.Milliseconds(), false
}

// bound is told that an acquisition with lease leaseMs is being sent at
// sent: if it re-enters the current hold, Redis sets the key's TTL to that
// lease, whether or not the reply comes back, so the hold is valid no
// longer than sent + lease (less the drift) from now on. A reply that comes
// back sets the validity anew (granted).
func (m *Mutex) bound(sent time.Time, leaseMs int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.cur
	if h == nil {
		return
	}
	if v := validity(sent, leaseMs); v.Before(h.validUntil) {
		h.validUntil = v
		if h.timer != nil {
			h.timer.Reset(time.Until(v))
		}
	}
}

// cleanup runs after a failed acquisition, on a fresh context bounded by
// CleanupTime (ctx may be dead). When the request may have reached Redis in
// a copy the caller never heard back from (suspect), it voids the request
// so later copies do nothing, and gives back a hold a copy took; when the
// owner may be queued, it leaves the queue. What cannot be done now (Redis
// unreachable) is retried in the background until it is done, or until the
// waiter's slot has run out and it would be pruned anyway.
func (m *Mutex) cleanup(ctx context.Context, a lua.Args, queued, suspect bool, slot time.Duration) {
	if !queued && !suspect {
		return
	}
	cfg := &m.S.Config
	needUnlock := false
	undone := !suspect
	left := !queued
	// The give-back unlock has a request id of its own, fixed across
	// retries: its latch makes a retry whose first reply was lost return the
	// first outcome instead of releasing a second hold.
	unlockArgs := m.unlockArgs(a.LeaseMs)
	unlockArgs.RequestID = a.AcquireID + "g"
	work := func(ctx context.Context) error {
		if !undone {
			held, err := call(ctx, func(ctx context.Context) (bool, error) {
				return m.S.Scripts().Abandon(ctx, m.S.RDB, m.Keys, a)
			})
			if err != nil && !permanent(err) {
				return err
			}
			// A permanent error (a key of another type) is not retried:
			// no try could do better.
			undone, needUnlock = true, held && err == nil
		}
		if needUnlock {
			unlockArgs.NowMs = m.S.WallMs()
			ua := unlockArgs
			if _, err := call(ctx, func(ctx context.Context) (lua.UnlockResult, error) {
				return m.E.Unlock(ctx, ua)
			}); err != nil && !permanent(err) {
				return err
			}
			needUnlock = false
		}
		if !left {
			if err := callErr(ctx, ctx.Done() == nil, nil, func(ctx context.Context) error { return m.E.GiveUp(ctx, a) }); err != nil && !permanent(err) {
				return err
			}
			left = true
		}
		return nil
	}
	if slot == 0 {
		slot = cfg.WaitSlot
	}
	// The work runs in the background and the caller waits for it at most
	// CleanupTime: a call still in flight then is not abandoned and sent
	// again, it goes on (a slow network costs its round trips once).
	done := m.S.runCleanup(time.Now().Add(max(slot, cfg.Lease, cfg.LatchTTL)), !queued, work)
	// Until it is settled, this handle's next acquisitions wait: a hold a
	// copy took must be given back before the handle can hold anew, or the
	// give-back could release the new hold instead; and a queue place left
	// late would be the new wait's, of the same owner.
	m.mu.Lock()
	m.settling = append(m.settling, done)
	m.mu.Unlock()
	// The caller waits for it at most CleanupTime, and not past its ctx:
	// a call returns when its ctx ends, the give-back goes on.
	var ended <-chan struct{}
	if ctx != nil {
		ended = ctx.Done()
	}
	t := time.NewTimer(cfg.CleanupTime)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ended:
		// With a healthy Redis the give-back is a round trip: wait for it
		// a moment, so that what the caller sees next is already clean.
		t.Reset(ctxEndSlack)
		select {
		case <-done:
		case <-t.C:
		}
	}
}

// ctxEndSlack is how long a call whose ctx ended may still wait for its
// give-back: the "returns when its ctx ends" promise, within scheduling
// slack.
const ctxEndSlack = 25 * time.Millisecond

// undo gives back a hold the request a took (it holds the lock now, or may):
// the request is voided and one hold released, bounded by CleanupTime.
func (m *Mutex) undo(a lua.Args) { m.cleanup(nil, a, false, true, 0) }

func (m *Mutex) unlockArgs(leaseMs int64) lua.Args {
	return lua.Args{
		Owner: m.Owner, LeaseMs: leaseMs, RequestID: RequestID(),
		LatchMs: m.S.Config.LatchTTL.Milliseconds(), GraceMs: m.S.GraceMs(), PubCmd: m.S.PubCmd(),
	}
}

// granted records an acquisition sent at sent: the first starts a hold
// (watchdog or lease timer), a re-entry adds to it. It reports false,
// recording nothing, when the session was closed meanwhile.
func (m *Mutex) granted(sent time.Time, leaseMs int64, watchdogKept bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.cur
	if h == nil {
		if !m.S.track(m) {
			return false
		}
		h = &hold{m: m}
		m.cur = h
	}
	m.holds++
	h.leaseMs = leaseMs
	// The key's TTL was set to leaseMs when Redis ran this acquisition:
	// its validity replaces the earlier one (a re-entry can shorten an
	// explicit lease).
	h.validUntil = validity(sent, leaseMs)
	if watchdogKept && !h.watchdog {
		h.watchdog = true
		h.wd = m.S.Watchdog.AddKind(m.Keys.Name, m.Owner, m.WatchKind, h)
	}
	if h.timer == nil {
		h.timer = time.AfterFunc(time.Until(h.validUntil), h.expire)
	} else {
		h.timer.Reset(time.Until(h.validUntil))
	}
	return true
}

// expire runs when the validity timer fires: the hold ends as lost unless a
// renewal moved its validity on.
func (h *hold) expire() {
	m := h.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur != h {
		return
	}
	if d := time.Until(h.validUntil); d > 0 {
		h.timer.Reset(d)
		return
	}
	why := "its lease ran out"
	if h.watchdog {
		why = "no renewal was confirmed before its lease ran out"
	}
	m.endLocked(h, fmt.Errorf("%w: %q: %s", ErrLost, m.Keys.Name, why))
	m.giveBackLocked(h.leaseMs, h.validUntil.Add(Drift(time.Duration(h.leaseMs)*time.Millisecond)))
}

// giveBackLocked runs after a hold ended as lost on the local clock while
// its owner's field may still be in Redis (a renewal whose reply came late
// kept it): the owner gave the hold up, so its field is released in the
// background, every count of it, or the handle's next acquisition would
// re-enter it (Redis count 2, local count 1) and its one Unlock would leave
// the lock held. That next acquisition waits for the give-back (settle).
// A renewal that lands later finds no field and does nothing.
//
// The give-back starts at from, when the lease last sent has run out on
// the local clock (the validity, which takes the drift off, ended before):
// a hold whose lease simply ran out is not released before its lease, as
// Redis would not have expired it sooner.
func (m *Mutex) giveBackLocked(leaseMs int64, from time.Time) {
	cfg := &m.S.Config
	a := m.unlockArgs(leaseMs)
	const most = 1 << 16 // counts released at most: a bound, not a limit met in practice
	n := 0
	work := func(ctx context.Context) error {
		if d := time.Until(from); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		for ; n < most; n++ {
			a.NowMs = m.S.WallMs()
			ua := a
			res, err := call(ctx, func(ctx context.Context) (lua.UnlockResult, error) { return m.E.Unlock(ctx, ua) })
			if err != nil && !permanent(err) {
				return err // sent again with the same request id: its latch makes it count once
			}
			if err != nil || res != lua.StillHeld {
				return nil
			}
			a.RequestID = RequestID()
		}
		return nil
	}
	done := m.S.runCleanup(time.Now().Add(max(cfg.Lease, cfg.LatchTTL)), false, work)
	m.settling = append(m.settling, done)
}

// Renewed is the watchdog's report that a renewal sent at sent was confirmed.
func (h *hold) Renewed(sent time.Time) {
	m := h.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur != h {
		return
	}
	if v := validity(sent, m.S.Config.Lease.Milliseconds()); v.After(h.validUntil) {
		h.validUntil = v
	}
}

// ValidUntil is the local instant until which the hold is valid.
func (h *hold) ValidUntil() time.Time {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	return h.validUntil
}

// Lost is the watchdog's report that h's lock is gone.
func (h *hold) Lost(reason error) {
	h.m.end(h, fmt.Errorf("%w: %q: %w", ErrLost, h.m.Keys.Name, reason))
}

// end finishes hold h (if still current) with err: nil for a release.
func (m *Mutex) end(h *hold, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.endLocked(h, err)
}

func (m *Mutex) endLocked(h *hold, err error) {
	if m.cur != h || h == nil {
		return
	}
	m.cur = nil
	m.last = h
	m.holds = 0
	if h.wd != nil {
		m.S.Watchdog.Remove(h.wd)
	}
	if h.timer != nil {
		h.timer.Stop()
	}
	h.err = err
	h.ended = true
	if h.done != nil {
		close(h.done)
	}
	m.S.untrack(m)
}

// ValidUntil is the local instant until which the current hold is valid:
// the latest acquisition's or confirmed renewal's send time plus the lease,
// less the drift margin. Zero when the handle holds nothing.
func (m *Mutex) ValidUntil() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil {
		return time.Time{}
	}
	return m.cur.validUntil
}

// unlockRetries is how many times an unlock is sent when Redis does not
// answer; the latch makes a repeat return the first outcome.
const unlockRetries = 3

// Unlock releases one hold. When ctx has ended, before or during the call,
// it still runs to completion on a fresh context bounded by CleanupTime. It
// returns ErrNotHeld when the owner does not hold the lock, and changes
// nothing then.
func (m *Mutex) Unlock(ctx context.Context) error {
	if ctx == nil {
		return errNilCtx
	}
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), m.S.Config.CleanupTime)
		defer cancel()
	}
	// A give-back still running (of an acquisition that returned without
	// the lock, or of a lost hold's field) is this handle's, not the
	// caller's hold: it is waited for, so that Unlock does not release what
	// the caller was told it does not hold (it then returns ErrNotHeld).
	// When ctx ends first, the unlock is sent anyway.
	_ = m.settle(ctx)
	m.mu.Lock()
	h := m.cur
	leaseMs := m.S.Config.Lease.Milliseconds()
	if h != nil {
		leaseMs = h.leaseMs
	}
	m.mu.Unlock()
	a := m.unlockArgs(leaseMs)
	var res lua.UnlockResult
	var err error
	fresh := false
	for try := 0; try < unlockRetries; try++ {
		a.NowMs = m.S.WallMs()
		args := a // the call may outlive this try: it gets its own copy
		res, err = callC(ctx, m.S.inline(ctx), nil, func(ctx context.Context) (lua.UnlockResult, error) { return m.E.Unlock(ctx, args) })
		if isTryAgain(err) && ctx.Err() == nil {
			// A slot migration: nothing ran. Wait for it, within ctx.
			try--
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
			continue
		}
		if err == nil || isScriptError(err) {
			break
		}
		if ctx.Err() != nil {
			if fresh {
				break
			}
			// ctx ended during the call: finish on a fresh context. The
			// same request id makes a repeat return the first outcome.
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), m.S.Config.CleanupTime)
			defer cancel()
			fresh = true
		}
	}
	if err != nil {
		return fmt.Errorf("fairlock: unlock %q: %w", m.Keys.Name, err)
	}
	switch res {
	case lua.StillHeld:
		m.mu.Lock()
		if m.holds > 1 {
			m.holds--
		}
		m.mu.Unlock()
		return nil
	case lua.Released:
		m.released(h)
		return nil
	}
	if h != nil {
		m.end(h, fmt.Errorf("%w: %q: not held at unlock", ErrLost, m.Keys.Name))
	}
	if m.S.Closed() {
		return ErrClosed
	}
	return fmt.Errorf("%w: %q by %s", ErrNotHeld, m.Keys.Name, m.Owner)
}

// released ends hold h after Redis confirmed its release. The lock was held
// until then, so a loss reported meanwhile (a renewal racing the unlock and
// finding the key already gone, or the validity timer firing during the
// call) is withdrawn: Err is nil after a clean unlock.
func (m *Mutex) released(h *hold) {
	if h == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == h {
		m.endLocked(h, nil)
		return
	}
	if m.last == h && errors.Is(h.err, ErrLost) {
		h.err = nil
	}
}

// closeHold ends the current hold because the session is closing (Done
// closed, Err matching ErrClosed) and releases every hold of it in Redis,
// best effort, within ctx.
func (m *Mutex) closeHold(ctx context.Context) {
	m.mu.Lock()
	h, n := m.cur, m.holds
	leaseMs := m.S.Config.Lease.Milliseconds()
	if h != nil {
		leaseMs = h.leaseMs
	}
	m.endLocked(h, fmt.Errorf("%w: %q: the client was closed while the lock was held", ErrClosed, m.Keys.Name))
	m.mu.Unlock()
	if h == nil {
		return
	}
	for range max(n, 1) {
		a := m.unlockArgs(leaseMs)
		a.NowMs = m.S.WallMs()
		res, err := call(ctx, func(ctx context.Context) (lua.UnlockResult, error) { return m.E.Unlock(ctx, a) })
		if err != nil || res != lua.StillHeld {
			return
		}
	}
}

// notSent reports an error that proves a command never reached Redis (no
// connection could be made), so it cannot have changed anything.
func notSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return strings.Contains(err.Error(), "failed to dial")
}

// isTryAgain reports Redis's TRYAGAIN: a multi-key command during a slot
// migration, refused before anything ran.
func isTryAgain(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "TRYAGAIN")
}

func isScriptError(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	return errors.As(err, &re)
}

// ForceUnlock deletes the lock whoever holds it and wakes a waiter. It
// reports whether there was a lock to delete.
func (m *Mutex) ForceUnlock(ctx context.Context) (bool, error) {
	if ctx == nil {
		return false, errNilCtx
	}
	a := lua.Args{NowMs: m.S.WallMs(), GraceMs: m.S.GraceMs(), PubCmd: m.S.PubCmd()}
	ok, err := call(ctx, func(ctx context.Context) (bool, error) { return m.E.ForceUnlock(ctx, a) })
	if err != nil {
		return false, fmt.Errorf("fairlock: force unlock %q: %w", m.Keys.Name, err)
	}
	m.mu.Lock()
	h := m.cur
	m.mu.Unlock()
	m.released(h)
	return ok, nil
}

// Done returns a channel closed when the current hold ends: released by the
// last Unlock, deleted by ForceUnlock, lost, or ended by Close. When the
// handle holds nothing, the channel is already closed.
func (m *Mutex) Done() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil {
		return closedChan
	}
	if m.cur.done == nil {
		m.cur.done = make(chan struct{})
	}
	return m.cur.done
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Err reports why the most recent hold ended: nil while held or after a
// release, an error matching ErrLost when the lock was lost, ErrClosed when
// the client was closed while it was held.
func (m *Mutex) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur != nil || m.last == nil {
		return nil
	}
	return m.last.err
}

// IsLocked reports whether anyone holds the lock.
func (m *Mutex) IsLocked(ctx context.Context) (bool, error) {
	if ctx == nil {
		return false, errNilCtx
	}
	n, err := call(ctx, func(ctx context.Context) (int64, error) { return m.S.RDB.Exists(ctx, m.Keys.Name).Result() })
	return n == 1, err
}

// IsHeld reports whether this handle's owner holds the lock.
func (m *Mutex) IsHeld(ctx context.Context) (bool, error) {
	if ctx == nil {
		return false, errNilCtx
	}
	return call(ctx, func(ctx context.Context) (bool, error) { return m.S.RDB.HExists(ctx, m.Keys.Name, m.Owner).Result() })
}

// HoldCount is the owner's hold count in Redis, 0 when not held.
func (m *Mutex) HoldCount(ctx context.Context) (int, error) {
	if ctx == nil {
		return 0, errNilCtx
	}
	s, err := call(ctx, func(ctx context.Context) (string, error) { return m.S.RDB.HGet(ctx, m.Keys.Name, m.Owner).Result() })
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(s)
}

// NoExpiry is what RemainingLease reports for a lock without a lease.
const NoExpiry time.Duration = -1

// RemainingLease is the lock's remaining lease: 0 when nobody holds it,
// NoExpiry when it has no lease.
func (m *Mutex) RemainingLease(ctx context.Context) (time.Duration, error) {
	if ctx == nil {
		return 0, errNilCtx
	}
	ms, err := call(ctx, func(ctx context.Context) (int64, error) { return m.S.RDB.Do(ctx, "pttl", m.Keys.Name).Int64() })
	switch {
	case err != nil:
		return 0, err
	case ms == -2:
		return 0, nil
	case ms == -1:
		return NoExpiry, nil
	}
	return time.Duration(ms) * time.Millisecond, nil
}
