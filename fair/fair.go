// Package fair is a distributed fair (FIFO) lock on Redis, Redisson's
// RFairLock: the reentrant lock's hash plus a queue of waiters
// (redisson_lock_queue:{name}) and their deadlines
// (redisson_lock_timeout:{name}). Waiters take the lock in the order they
// queued; the waiters at the front of the queue are woken, each on its own
// channel, when it is their turn.
//
// Each queued waiter holds a wait slot: if it has not taken the lock by its
// deadline (one slot after the waiter ahead of it), it is treated as dead and
// pruned, so a crashed client cannot block the queue for ever. When the head
// takes the lock every remaining deadline moves one slot earlier; when a
// waiter gives up, those behind it move one slot earlier.
//
// Beyond Redisson (see docs/design.md, "Fair lock" and "Fair-lock
// liveness"): a head that does not take a free lock within the head grace
// (default 5 s, on the Redis server's clock, kept apart from the deadlines
// Java clients read) is pruned, so a dead head stalls its followers for
// about a grace, not its whole slot; every waiter sleeps at most until the
// next event that can change its place or free the lock, and the waiters
// that must act next are woken (the new head after a take, the waiter
// behind the head on a release); a caller is never pruned by its own call;
// a head with no deadline is pruned instead of blocking the lock for ever
// (H1); a waiter never polls in a loop (H2); unlocking a lock you do not hold
// returns ErrNotHeld (H4).
package fair

import (
	"context"
	"fmt"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/lua"
)

// Errors, the same values as package fairlock's.
var (
	ErrNotHeld      = fairlock.ErrNotHeld
	ErrCanceled     = fairlock.ErrCanceled
	ErrLost         = fairlock.ErrLost
	ErrClosed       = fairlock.ErrClosed
	ErrInvalidName  = fairlock.ErrInvalidName
	ErrInvalidValue = fairlock.ErrInvalidValue
)

// NoExpiry is what RemainingLease reports for a lock with no lease.
const NoExpiry = core.NoExpiry

// Forever, as AcquireOptions.Wait, waits until the lock is acquired or the
// context ends.
const Forever = core.Forever

// Mutex is a handle on a distributed fair lock.
//
// An owner is what Redisson calls a thread: the id "<client-uuid>:<thread-id>"
// written into the lock and into the queue. Go has no goroutine ids, so each
// handle is its own owner with a fresh thread id. Holding is per owner:
// locking again through the same handle re-enters. A Mutex is safe for
// concurrent use, but goroutines sharing one handle are one owner: they do not
// exclude each other and hold one place in the queue. Give each goroutine that
// must be excluded its own handle (New is cheap: it talks to nobody).
//
// A Mutex must not be copied after first use. Make one with New: on a zero
// Mutex every call returns an error matching ErrInvalidValue.
type Mutex struct {
	m    *core.Mutex
	slot time.Duration
}

// Option configures a Mutex.
type Option func(*options)

type options struct {
	threadID int64
	slot     time.Duration
	slotSet  bool
	engine   Engine
}

// WithThreadID fixes the thread part of the owner id. It must be positive.
// By default each handle gets a fresh id.
func WithThreadID(id int64) Option { return func(o *options) { o.threadID = id } }

// WithWaitSlot sets this handle's wait slot for Lock and LockWithLease
// (TryLockFor uses its wait as the slot, as Redisson does). Default: the
// client's (fairlock.WithWaitSlot, 5 minutes). It must be positive.
func WithWaitSlot(d time.Duration) Option {
	return func(o *options) { o.slot, o.slotSet = d, true }
}

// New returns a handle on the fair lock called name. The name must be
// non-empty; it may carry a Redis hash tag. New does not talk to Redis.
func New(c *fairlock.Client, name string, opts ...Option) (*Mutex, error) {
	var o options
	for i, f := range opts {
		if f == nil {
			return nil, fmt.Errorf("%w: option %d is nil", ErrInvalidValue, i)
		}
		f(&o)
	}
	if o.slotSet && o.slot < time.Millisecond {
		return nil, fmt.Errorf("%w: wait slot %v (must be at least 1ms)", ErrInvalidValue, o.slot)
	}
	if o.threadID < 0 {
		return nil, fmt.Errorf("%w: thread id %d", ErrInvalidValue, o.threadID)
	}
	s := core.Of(c)
	if s == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidValue)
	}
	if o.engine != Redisson && o.engine != Scalable {
		return nil, fmt.Errorf("%w: engine %d", ErrInvalidValue, o.engine)
	}
	set := func() lua.FairSet { return s.Scripts.Fair() } // read at each call: tests may swap s.Scripts
	if o.engine == Scalable {
		set = lua.ScalableDefault.Fair
	}
	m, err := core.NewMutex(s, func(k lua.Keys) core.Engine { return engine{s: s, k: k, set: set} }, name, o.threadID)
	if err != nil {
		return nil, err
	}
	return &Mutex{m: m, slot: o.slot}, nil
}

// errZero is what every call on a zero fair.Mutex returns.
var errZero = fmt.Errorf("%w: a zero fair.Mutex (make one with fair.New)", ErrInvalidValue)

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// zero reports a Mutex not made by New (a zero value, or nil).
func (m *Mutex) zero() bool { return m == nil || m.m == nil }

// Name is the lock's name.
func (m *Mutex) Name() string {
	if m.zero() {
		return ""
	}
	return m.m.Keys.Name
}

// Owner is the owner id this handle writes into the lock and the queue.
func (m *Mutex) Owner() string {
	if m.zero() {
		return ""
	}
	return m.m.Owner
}

// Lock acquires the lock, queueing behind earlier waiters and waiting as
// long as ctx allows. The watchdog keeps the lock until Unlock. A Redis that
// times out, refuses connections, is loading, paused or failing over does
// not end the wait, nor cost the waiter its place: the attempt is sent again
// with the same request id until ctx ends. If ctx ends first, Lock returns
// at once an error matching both ErrCanceled and ctx.Err() (wrapping the
// last Redis error, if any), and leaves the queue in the background (the
// waiters behind move up one slot) before this handle acquires or unlocks
// again.
//
// A waiter that waits longer than its wait slot while queued may be pruned
// as dead by another client; it then joins again at the tail on its next
// attempt (as in Redisson), losing its place. Its own attempts never prune
// it.
func (m *Mutex) Lock(ctx context.Context) error {
	if m.zero() {
		return errZero
	}
	_, err := m.Acquire(ctx, AcquireOptions{Wait: Forever})
	return err
}

// LockWithLease is Lock with an explicit lease: the lock frees itself after
// lease unless unlocked first, and no watchdog renews it.
// A lease under 10 ms is refused (ErrInvalidValue): no reply could come back
// within it. A re-entry of a hold the watchdog keeps sets the watchdog lease
// instead (the watchdog keeps the hold until its last Unlock anyway).
func (m *Mutex) LockWithLease(ctx context.Context, lease time.Duration) error {
	if m.zero() {
		return errZero
	}
	if lease <= 0 {
		return fmt.Errorf("%w: lease %v", ErrInvalidValue, lease)
	}
	_, err := m.Acquire(ctx, AcquireOptions{Wait: Forever, Lease: lease})
	return err
}

// TryLock makes one attempt and never queues (Redisson's tryLock()). It
// fails while anyone is queued, even if the lock is free: the queue goes
// first.
func (m *Mutex) TryLock(ctx context.Context) (bool, error) {
	if m.zero() {
		return false, errZero
	}
	return m.m.Acquire(ctx, core.AcquireOpts{})
}

// TryLockFor queues for up to wait, using wait as the wait slot (as
// Redisson's tryLock(wait, lease)); a wait of 0 uses the default slot and
// makes one queued attempt. A lease of 0 means the watchdog keeps the lock.
// When the wait runs out it leaves the queue and reports false, nil.
func (m *Mutex) TryLockFor(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if m.zero() {
		return false, errZero
	}
	if wait < 0 {
		return false, fmt.Errorf("%w: wait %v", ErrInvalidValue, wait)
	}
	return m.Acquire(ctx, AcquireOptions{Wait: wait, Lease: lease, Slot: wait})
}

// AcquireOptions are the general form of an acquisition.
type AcquireOptions struct {
	// Lease is the explicit lease; 0 lets the watchdog keep the lock.
	Lease time.Duration
	// Wait bounds the wait; Forever waits until ctx ends; 0 makes one
	// queued attempt.
	Wait time.Duration
	// Slot is this waiter's wait slot; 0 takes the handle's default.
	Slot time.Duration
}

// Acquire queues for the lock as o says. It reports false with a nil error
// when o.Wait ran out; it has then left the queue. Every way out without the
// lock (wait exhausted, ctx ended, an error) leaves the queue with the same
// slot it joined with.
func (m *Mutex) Acquire(ctx context.Context, o AcquireOptions) (bool, error) {
	if m.zero() {
		return false, errZero
	}
	if o.Slot < 0 {
		return false, fmt.Errorf("%w: wait slot %v", ErrInvalidValue, o.Slot)
	}
	slot := o.Slot
	if slot == 0 {
		slot = m.slot
	}
	return m.m.Acquire(ctx, core.AcquireOpts{Lease: o.Lease, Wait: o.Wait, Slot: slot, Queue: true})
}

// Unlock releases one hold; releasing the last wakes the head of the queue
// and the waiter behind it (and reentrant waiters of the same name). It
// returns ErrNotHeld, changing nothing, when this owner does not hold the
// lock (Redisson replies success when the lock is gone: H4). It is never
// refused, whichever fair engine queued waiters on the name.
// When ctx ends, before or during the call, it still runs to completion on a
// fresh context bounded by the client's cleanup timeout.
func (m *Mutex) Unlock(ctx context.Context) error {
	if m.zero() {
		return errZero
	}
	return m.m.Unlock(ctx)
}

// ForceUnlock deletes the lock whoever holds it and wakes the head of the
// queue and the waiter behind it. It reports whether a lock was deleted.
func (m *Mutex) ForceUnlock(ctx context.Context) (bool, error) {
	if m.zero() {
		return false, errZero
	}
	return m.m.ForceUnlock(ctx)
}

// IsLocked reports whether anyone holds the lock.
func (m *Mutex) IsLocked(ctx context.Context) (bool, error) {
	if m.zero() {
		return false, errZero
	}
	return m.m.IsLocked(ctx)
}

// IsHeld reports whether this handle's owner holds the lock.
func (m *Mutex) IsHeld(ctx context.Context) (bool, error) {
	if m.zero() {
		return false, errZero
	}
	return m.m.IsHeld(ctx)
}

// HoldCount is this owner's hold count in Redis; 0 when it does not hold it.
func (m *Mutex) HoldCount(ctx context.Context) (int, error) {
	if m.zero() {
		return 0, errZero
	}
	return m.m.HoldCount(ctx)
}

// RemainingLease is the lock's remaining lease: 0 when nobody holds it,
// NoExpiry when it has no lease.
func (m *Mutex) RemainingLease(ctx context.Context) (time.Duration, error) {
	if m.zero() {
		return 0, errZero
	}
	return m.m.RemainingLease(ctx)
}

// Done returns a channel that is closed when this handle's current hold
// ends: the last Unlock, a ForceUnlock through this handle, or the loss of
// the lock. Err then says which. When the handle holds nothing the channel is
// already closed.
func (m *Mutex) Done() <-chan struct{} {
	if m.zero() {
		return closedChan
	}
	return m.m.Done()
}

// Err is nil while the lock is held and after a release; after a loss it
// is an error matching ErrLost that says why; after the client was closed
// with the lock held, one matching ErrClosed.
func (m *Mutex) Err() error {
	if m.zero() {
		return errZero
	}
	return m.m.Err()
}

// ValidUntil is the local instant until which this handle's current hold is
// known to be valid: the send time of its latest acquisition or confirmed
// renewal plus the lease, less a drift margin (1% of the lease plus 2 ms).
// Redis cannot expire the lock before then; Done closes when it passes with
// no renewal confirmed. Check it before a write that must happen under the
// lock (or, better, use a fencing token). Zero when nothing is held.
func (m *Mutex) ValidUntil() time.Time {
	if m.zero() {
		return time.Time{}
	}
	return m.m.ValidUntil()
}

// engine is either fair engine: the same script bodies and wrappers, over
// the engine's own queue representation (set).
type engine struct {
	s   *core.Session
	k   lua.Keys
	set func() lua.FairSet
}

// Try replies the fencing token in place of the ttl when acquired
// (core.Engine).
func (e engine) Try(ctx context.Context, a lua.Args, queue bool) (bool, int64, error) {
	if queue {
		ok, ttl, token, err := e.set().TryLockWaitToken(ctx, e.s.RDB, e.k, a)
		if ok {
			return true, token, err
		}
		return false, ttl, err
	}
	ok, token, err := e.set().TryLockToken(ctx, e.s.RDB, e.k, a)
	return ok, token, err
}

func (e engine) GiveUp(ctx context.Context, a lua.Args) error {
	return e.set().AcquireFailed(ctx, e.s.RDB, e.k, a)
}

func (e engine) Unlock(ctx context.Context, a lua.Args) (lua.UnlockResult, error) {
	return e.set().Unlock(ctx, e.s.RDB, e.k, a)
}

func (e engine) ForceUnlock(ctx context.Context, a lua.Args) (bool, error) {
	return e.set().ForceUnlock(ctx, e.s.RDB, e.k, a)
}

func (e engine) WakeChannel(owner string) string { return e.k.WaiterChannel(owner) }
