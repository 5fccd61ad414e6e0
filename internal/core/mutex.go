package core

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fairlock-go/fairlock/internal/watchdog"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Engine is what differs between the reentrant and the fair lock: which
// scripts run, and which channel a waiter listens on.
type Engine interface {
	// Try makes one attempt. With queue set it may join a wait queue (the
	// fair lock); ttlMs then says how long to wait before the next attempt.
	// When acquired, ttlMs carries the acquisition's fencing token instead
	// (0 for an engine without tokens); see AcquireOpts.Token.
	Try(ctx context.Context, a wire.Args, queue bool) (acquired bool, ttlMs int64, err error)
	// GiveUp leaves the wait queue after attempts made with queue set.
	GiveUp(ctx context.Context, a wire.Args) error
	Unlock(ctx context.Context, a wire.Args) (wire.UnlockResult, error)
	ForceUnlock(ctx context.Context, a wire.Args) (bool, error)
	// WakeChannel is the channel on which the owner is woken.
	WakeChannel(owner string) string
}

// Mutex is the client side of one lock handle: one owner id, its local view
// of its holds, and the loops that acquire, wait and release.
type Mutex struct {
	S     *Session
	E     Engine
	Keys  wire.Keys
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
	// Label is the name the user gave, when it is not Keys.Name (a
	// primitive whose hold is named by an internal key); errors name it.
	Label string
	// ReentryKeepsLonger: this kind's re-entry sets the key's TTL to
	// max(TTL, lease) (the read-write lock's halves), so a re-entry with a
	// shorter lease never shortens the hold: its validity stays the longer
	// one, and an acquisition in flight does not bound it. Otherwise (the
	// reentrant, fair and fenced locks: TTL = the new lease) the validity
	// follows the latest lease.
	ReentryKeepsLonger bool

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
	leaseMs    int64 // lease set by the latest acquisition (Redisson's internalLockLeaseTime); with ReentryKeepsLonger, the lease of the acquisition the validity is reckoned from
	watchdog   bool  // kept by the watchdog
	rechecking bool  // a Keeper's KeptMs is in flight (hold.go, recheck)
	wd         *watchdog.Entry
	validUntil time.Time
	timer      *time.Timer // fires at validUntil
	start      time.Time   // the first grant (set only with an observer)
	long       *time.Timer // the long-hold alert; nil: none
	// With an observer: unlocks of this hold in flight, and a loss not yet
	// reported because one was (Unlock reports it, or a Released instead
	// when the release is confirmed).
	unlocking   int
	lostPending bool
	heldFor     time.Duration // the hold's length when its loss was held back
}

// Drift is the margin taken off every lease when computing a hold's
// validity: Redlock's clock-drift allowance, 1% of the lease plus 2 ms.
func Drift(lease time.Duration) time.Duration { return lease/100 + 2*time.Millisecond }

func validity(sent time.Time, leaseMs int64) time.Time {
	l := time.Duration(leaseMs) * time.Millisecond
	return sent.Add(l - Drift(l))
}

// newMutex validates name and builds a handle (no engine yet: NewLock sets
// it) with a fresh owner id, or with threadID when it is positive.
func newMutex(s *Session, name string, threadID int64) (*Mutex, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidValue)
	}
	if err := wire.ValidateName(name); err != nil {
		return nil, Errorf(err, "")
	}
	if threadID < 0 {
		return nil, fmt.Errorf("%w: negative thread id %d", ErrInvalidValue, threadID)
	}
	if threadID == 0 {
		threadID = s.NewThreadID()
	}
	k := wire.KeysFor(name)
	return &Mutex{S: s, Keys: k, Owner: wire.Owner(s.ID, threadID), ThreadID: threadID}, nil
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
	// Position, when not nil and Queue is set, is called on the waiting
	// goroutine after every attempt that leaves the caller queued, with its
	// place (engines that are AheadTriers; see Position).
	Position func(Position)
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
	if h == nil || m.ReentryKeepsLonger {
		return
	}
	if v := validity(sent, leaseMs); v.Before(h.validUntil) {
		h.validUntil = v
		if h.timer != nil {
			h.timer.Reset(time.Until(v))
		}
	}
}

// Bound caps the current hold's validity at sent + leaseMs (less the
// drift): Redis was told at sent to end the hold by then (the
// permit-expirable semaphore's UpdateLease with a shorter lease). A later
// validity is never extended by it.
func (m *Mutex) Bound(sent time.Time, leaseMs int64) { m.bound(sent, leaseMs) }

// cleanup runs after a failed acquisition, on a fresh context bounded by
// CleanupTime (ctx may be dead). When the request may have reached Redis in
// a copy the caller never heard back from (suspect), it voids the request
// so later copies do nothing, and gives back a hold a copy took; when the
// owner may be queued, it leaves the queue. What cannot be done now (Redis
// unreachable) is retried in the background until it is done, or until the
// waiter's slot has run out and it would be pruned anyway.
//
// The caller waits for it at most CleanupTime, and not past until (a timed
// call's bound; zero: none) by more than ctxEndSlack.
func (m *Mutex) cleanup(ctx context.Context, a wire.Args, queued, suspect bool, slot time.Duration, until time.Time) {
	if !queued && !suspect {
		return
	}
	cfg := &m.S.Config
	g := &giveBack{m: m, a: a, undone: !suspect, left: !queued}
	// The give-back unlock has a request id of its own, fixed across
	// retries: its latch makes a retry whose first reply was lost return the
	// first outcome instead of releasing a second hold.
	g.unlockArgs = m.unlockArgs(a.LeaseMs)
	g.unlockArgs.RequestID = a.AcquireID + "g"
	if slot == 0 {
		slot = cfg.WaitSlot
	}
	// The work runs in the background and the caller waits for it at most
	// CleanupTime: a call still in flight then is not abandoned and sent
	// again, it goes on (a slow network costs its round trips once).
	done := m.S.runCleanup(time.Now().Add(max(slot, cfg.Lease, cfg.LatchTTL)), !queued, g.run)
	// Until it is settled, this handle's next acquisitions wait: a hold a
	// copy took must be given back before the handle can hold anew, or the
	// give-back could release the new hold instead; and a queue place left
	// late would be the new wait's, of the same owner.
	m.mu.Lock()
	m.settling = append(m.settling, done)
	m.mu.Unlock()
	bound := cfg.CleanupTime
	if !until.IsZero() {
		bound = min(bound, max(time.Until(until), ctxEndSlack))
	}
	awaitCleanup(ctx, done, bound)
}

// awaitCleanup waits for a cleanup (done) at most bound, and not past ctx
// (nil: no ctx): a call returns when its ctx ends, the give-back goes on.
func awaitCleanup(ctx context.Context, done <-chan struct{}, bound time.Duration) {
	var ended <-chan struct{}
	if ctx != nil {
		ended = ctx.Done()
	}
	t := time.NewTimer(bound)
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

// giveBack is the work of one cleanup, in three steps each done once
// however often run is retried: void the request (when a copy may have
// reached Redis), give back the hold a copy took, leave the queue.
type giveBack struct {
	m                        *Mutex
	a, unlockArgs            wire.Args
	undone, needUnlock, left bool
}

func (g *giveBack) run(ctx context.Context) error {
	for _, step := range []func(context.Context) error{g.void, g.unlock, g.leave} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// void voids the request (abandon.lua) and learns whether a copy took the
// lock. A permanent error (a key of another type) is not retried: no try
// could do better.
func (g *giveBack) void(ctx context.Context) error {
	if g.undone {
		return nil
	}
	m := g.m
	held, err := call(ctx, func(ctx context.Context) (bool, error) {
		if v, ok := m.E.(Voider); ok {
			return v.Abandon(ctx, g.a)
		}
		return m.S.Scripts().Abandon(ctx, m.S.RDB, m.Keys, g.a)
	})
	if err != nil && !permanent(err) {
		return err
	}
	g.undone, g.needUnlock = true, held && err == nil
	return nil
}

// unlock gives back the hold a copy of the request took.
func (g *giveBack) unlock(ctx context.Context) error {
	if !g.needUnlock {
		return nil
	}
	m := g.m
	g.unlockArgs.NowMs = m.S.WallMs()
	ua := g.unlockArgs
	if _, err := call(ctx, func(ctx context.Context) (wire.UnlockResult, error) {
		return m.E.Unlock(ctx, ua)
	}); err != nil && !permanent(err) {
		return err
	}
	g.needUnlock = false
	return nil
}

// leave takes the waiter out of the queue (the engine's GiveUp).
func (g *giveBack) leave(ctx context.Context) error {
	if g.left {
		return nil
	}
	if err := callErr(ctx, how{inline: ctx.Done() == nil, w: g.m.S.work}, nil, func(ctx context.Context) error { return g.m.E.GiveUp(ctx, g.a) }); err != nil && !permanent(err) {
		return err
	}
	g.left = true
	return nil
}

// ctxEndSlack is how long a call whose ctx ended may still wait for its
// give-back: the "returns when its ctx ends" promise, within scheduling
// slack.
const ctxEndSlack = 25 * time.Millisecond

// undo gives back a hold the request a took (it holds the lock now, or may):
// the request is voided and one hold released, bounded by CleanupTime.
func (m *Mutex) undo(a wire.Args) { m.cleanup(nil, a, false, true, 0, time.Time{}) }

func (m *Mutex) unlockArgs(leaseMs int64) wire.Args {
	return wire.Args{
		Owner: m.Owner, LeaseMs: leaseMs, RequestID: RequestID(),
		LatchMs: m.S.Config.LatchTTL.Milliseconds(), GraceMs: m.S.GraceMs(), PubCmd: m.S.PubCmd(),
	}
}

// userName is the lock's name as the user gave it, for errors.
func (m *Mutex) userName() string {
	if m.Label != "" {
		return m.Label
	}
	return m.Keys.Name
}

// prefixedErr reads "fairlock: <context>: <err>" with err's own "fairlock: "
// prefix dropped, so that the whole reads as one sentence with one prefix,
// and matches err.
type prefixedErr struct {
	msg string
	err error
}

func (e *prefixedErr) Error() string { return e.msg }
func (e *prefixedErr) Unwrap() error { return e.err }

// Errorf wraps err as prefixedErr, after the context format (none when "").
func Errorf(err error, format string, args ...any) error {
	msg := "fairlock: "
	if format != "" {
		msg += fmt.Sprintf(format, args...) + ": "
	}
	return &prefixedErr{msg: msg + strings.TrimPrefix(err.Error(), "fairlock: "), err: err}
}

// closed names the lock in a bare ErrClosed (one that says only "client
// closed"); any other err is returned as it is.
func (m *Mutex) closed(op string, err error) error {
	if err == ErrClosed {
		return Errorf(err, "%s %q", op, m.userName())
	}
	return err
}
