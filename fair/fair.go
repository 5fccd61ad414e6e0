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
// a head with no deadline is pruned instead of blocking the lock for ever;
// a waiter never polls in a loop; unlocking a lock you do not hold returns
// ErrNotHeld (Redisson's fair lock does none of these three: docs/design.md
// lists its hazards).
//
// A waiter can follow its place in the queue: Acquire with
// AcquireOptions.Position reports, after each of its attempts, how many
// waiters are ahead of it and an estimate of its wait (fairlock.Position);
// Mutex.State reads the holder, the lease, the token, the queue length and
// the first waiters, for anyone. Both cost no write, and the position no
// extra round trip (docs/design.md, "Queue position and ETA").
package fair

import (
	"context"
	"fmt"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/positionhook"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Forever, as AcquireOptions.Wait, waits until the lock is acquired or the
// context ends.
const Forever = core.Forever

// Mutex is a handle on a distributed fair lock. Its calls are
// fairlock.Handle's (Lock, LockWithLease, TryLock, TryLockFor, Unlock,
// ForceUnlock, IsLocked, IsHeld, HoldCount, RemainingLease, Done, Err,
// ValidUntil, Name, Owner) and fairlock.FencedHandle's (LockAndGetToken,
// LockAndGetTokenWithLease, TryLockAndGetToken, Token, TokenKey), which say
// what each does and leaves behind, and Acquire, its own. Lock and LockWithLease queue behind earlier waiters
// with the handle's wait slot (WithWaitSlot); TryLock never queues and
// fails while anyone is queued; TryLockFor queues with its wait as the slot.
// Each handle is its own owner ("<client-uuid>:<thread-id>"), with one
// place in the queue.
//
// Fencing tokens are not in Redisson's RFairLock (see docs/design.md,
// "Fencing tokens"). The key is Redisson's fenced-lock token key,
// "redisson_lock_token:{name}": the acquisition that takes the lock (free
// -> held) INCRs it, and a re-entry returns the holder's current token. A
// fenced lock (package fenced) and a fair lock on the same name share one
// strictly increasing sequence; Redisson's own RFairLock never touches the
// key. Every acquisition of a fair lock maintains the token, whichever
// method made it.
//
// A Mutex must not be copied after first use. Make one with New: on a zero
// Mutex every call returns an error matching ErrInvalidValue.
type Mutex struct {
	fairlock.FencedHandle
	m *core.Mutex
}

// WithWaitSlot sets this handle's wait slot for Lock and LockWithLease
// (TryLockFor uses its wait as the slot, as Redisson does). Default: the
// client's (fairlock.WithWaitSlot, 5 minutes). It must be at least 1 ms.
func WithWaitSlot(d time.Duration) fairlock.LockOption {
	return func(o *core.LockConfig) { o.Slot, o.SlotSet = d, true }
}

// New returns a handle on the fair lock called name. The name must be
// non-empty; it may carry a Redis hash tag. New does not talk to Redis.
func New(c *fairlock.Client, name string, opts ...fairlock.LockOption) (*Mutex, error) {
	return core.New(c, name, opts, makeEngine, func(h fairlock.FencedHandle, m *core.Mutex) *Mutex {
		return &Mutex{FencedHandle: h, m: m}
	})
}

// makeEngine builds the engine WithEngine chose.
func makeEngine(s *core.Session, k wire.Keys, cfg core.LockConfig) (core.Engine, error) {
	switch Engine(cfg.Engine) {
	case Redisson:
		return engine{s: s, k: k, set: s.Scripts().Fair()}, nil
	case Scalable:
		return engine{s: s, k: k, set: wire.ScalableDefault().Fair()}, nil
	}
	return nil, fmt.Errorf("%w: engine %d", fairlock.ErrInvalidValue, cfg.Engine)
}

// AcquireOptions are the general form of an acquisition.
type AcquireOptions struct {
	// Lease is the explicit lease (at least 10 ms); 0 lets the watchdog
	// keep the lock. A negative lease is refused with ErrInvalidValue.
	Lease time.Duration
	// Wait bounds the wait; Forever waits until ctx ends; 0 makes one
	// queued attempt.
	Wait time.Duration
	// Slot is this waiter's wait slot; 0 takes the handle's default.
	Slot time.Duration
	// Position, when not nil, is called after every attempt of this
	// acquisition that leaves the caller queued, with its place: how many
	// waiters are ahead (exact on the Redisson engine; on the scalable
	// engine an upper bound when waiters ahead of it gave up), whether it
	// (re)joined the tail, and an estimate of its wait. It is called on the
	// waiting goroutine, between attempts, so it must return quickly; it is
	// not called when the first attempt takes the lock. Asking costs no
	// extra round trip: the attempt's script reads the position too (one
	// LPOS on the Redisson engine, O(number ahead); one HMGET on the
	// scalable engine). Updates come when the waiter attempts: at once for
	// the first two waiters on every change at the front, and for waiters
	// further back when their sleep ends (at most the lease or the grace).
	// On the scalable engine a waiter that moves to the front while the
	// lock is held is sent its reply instead of attempting, and reports
	// the place that message carries (At: when it arrived).
	// See fairlock.Position and docs/design.md ("Queue position and ETA").
	Position func(fairlock.Position)
}

// Acquire queues for the lock as o says. It reports false with a nil error
// when o.Wait ran out; it has then left the queue. Its bounds are
// TryLockFor's (o.Wait >= 0: within o.Wait + one attempt timeout) and
// Lock's (Forever: the client's outage budget), see fairlock.Handle. Every way out without the
// lock (wait exhausted, ctx ended, an error) leaves the queue with the same
// slot it joined with.
func (m *Mutex) Acquire(ctx context.Context, o AcquireOptions) (bool, error) {
	if m.m == nil {
		return m.TryLock(ctx) // the zero Mutex's error
	}
	switch name := m.m.Keys.Name; {
	case o.Slot < 0:
		return false, fmt.Errorf("%w: Acquire on %q: wait slot %v is negative (0 takes the handle's)", fairlock.ErrInvalidValue, name, o.Slot)
	case o.Wait < 0 && o.Wait != Forever:
		return false, fmt.Errorf("%w: Acquire on %q: wait %v is negative (0 makes one attempt, Forever waits until ctx ends)", fairlock.ErrInvalidValue, name, o.Wait)
	case o.Lease < 0 || (o.Lease > 0 && o.Lease < core.MinLease):
		return false, fmt.Errorf("%w: Acquire on %q: lease %v (a lease of 0 lets the watchdog keep the lock; an explicit lease is at least %v)",
			fairlock.ErrInvalidValue, name, o.Lease, core.MinLease)
	}
	slot := o.Slot
	if slot == 0 {
		slot = m.m.Slot
	}
	return m.m.Acquire(ctx, core.AcquireOpts{Lease: o.Lease, Wait: o.Wait, Slot: slot, Queue: true, Position: positionhook.ToCore(o.Position)})
}

// engine is either fair engine: the same script bodies and wrappers, over
// the engine's own queue representation (set).
type engine struct {
	s   *core.Session
	k   wire.Keys
	set wire.FairSet
}

// Try replies the fencing token in place of the ttl when acquired
// (core.Engine).
func (e engine) Try(ctx context.Context, a wire.Args, queue bool) (bool, int64, error) {
	if queue {
		ok, ttl, token, err := e.set.TryLockWaitToken(ctx, e.s.RDB, e.k, a)
		if ok {
			return true, token, err
		}
		return false, ttl, err
	}
	ok, token, err := e.set.TryLockToken(ctx, e.s.RDB, e.k, a)
	return ok, token, err
}

func (e engine) GiveUp(ctx context.Context, a wire.Args) error {
	return e.set.AcquireFailed(ctx, e.s.RDB, e.k, a)
}

func (e engine) Unlock(ctx context.Context, a wire.Args) (wire.UnlockResult, error) {
	return e.set.Unlock(ctx, e.s.RDB, e.k, a)
}

func (e engine) ForceUnlock(ctx context.Context, a wire.Args) (bool, error) {
	return e.set.ForceUnlock(ctx, e.s.RDB, e.k, a)
}

func (e engine) WakeChannel(owner string) string { return e.k.WaiterChannel(owner) }

// Handoff: a release may grant the lock to the live head directly (both
// engines; on the Redisson engine only to a head of this library's clients:
// issue 33).
func (e engine) Handoff() bool { return e.set.Handoff() }

// Queued says that the fair lock's acquisitions join the queue (core).
func (engine) Queued() bool { return true }

// Errors, the same values as package fairlock's.
//
// Deprecated: use package fairlock's errors; these forwarders are kept for
// one release.
var ErrNotHeld, ErrCanceled, ErrLost, ErrClosed, ErrInvalidName, ErrInvalidValue = fairlock.ErrNotHeld, fairlock.ErrCanceled, fairlock.ErrLost, fairlock.ErrClosed, fairlock.ErrInvalidName, fairlock.ErrInvalidValue

// Deprecated: use fairlock.NoExpiry.
const NoExpiry = fairlock.NoExpiry

// Deprecated: use fairlock.WithThreadID.
func WithThreadID(id int64) Option { return fairlock.WithThreadID(id) }

// Option is fairlock.LockOption.
//
// Deprecated: use fairlock.LockOption; kept for one release.
type Option = fairlock.LockOption
