// Package reentrant is a distributed reentrant lock on Redis, Redisson's
// RLock: a hash "owner -> hold count" with a lease, owner-checked unlock, a
// watchdog that renews the lease while the holder lives, and waiters woken
// by pub/sub rather than polling.
//
// It is not fair: when the lock is released, any waiter may get it. Use
// package fair when first come must be first served.
package reentrant

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

// Mutex is a handle on a distributed reentrant lock.
//
// An owner is what Redisson calls a thread: the id "<client-uuid>:<thread-id>"
// written into the lock. Go has no goroutine ids, so each handle is its own
// owner: New gives it a fresh thread id from its Client. Holding is per
// owner: locking again through the same handle re-enters (the hold count goes
// up, and the lock is free only after as many Unlocks). A Mutex is safe for
// concurrent use, but goroutines sharing one handle are one owner and do not
// exclude each other; give each goroutine that must be excluded its own
// handle (New is cheap: it talks to nobody).
//
// A Mutex must not be copied after first use. Make one with New: on a zero
// Mutex every call returns an error matching ErrInvalidValue.
type Mutex struct {
	m *core.Mutex
}

// Option configures a Mutex.
type Option func(*options)

type options struct{ threadID int64 }

// WithThreadID fixes the thread part of the owner id, for example to act as
// the same owner as another process (as a Java thread id does). It must be
// positive. By default each handle gets a fresh id.
func WithThreadID(id int64) Option { return func(o *options) { o.threadID = id } }

// New returns a handle on the lock called name. The name must be non-empty;
// it may carry a Redis hash tag ("{tag}rest"). New does not talk to Redis.
func New(c *fairlock.Client, name string, opts ...Option) (*Mutex, error) {
	var o options
	for i, f := range opts {
		if f == nil {
			return nil, fmt.Errorf("%w: option %d is nil", ErrInvalidValue, i)
		}
		f(&o)
	}
	// core.NewMutex refuses a nil client and a negative thread id.
	s := core.Of(c)
	m, err := core.NewMutex(s, func(k lua.Keys) core.Engine { return core.ReentrantEngine{S: s, K: k} }, name, o.threadID)
	if err != nil {
		return nil, err
	}
	return &Mutex{m: m}, nil
}

// errZero is what every call on a zero Mutex returns.
var errZero = fmt.Errorf("%w: a zero reentrant.Mutex (make one with reentrant.New)", ErrInvalidValue)

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

// Owner is the owner id this handle writes into the lock.
func (m *Mutex) Owner() string {
	if m.zero() {
		return ""
	}
	return m.m.Owner
}

// Lock acquires the lock, waiting as long as ctx allows. The watchdog keeps
// the lock until Unlock (see fairlock.WithLease). A Redis that times out,
// refuses connections, is loading or failing over does not end the wait:
// the attempt is sent again until ctx ends. If ctx ends first, Lock returns
// at once an error matching both ErrCanceled and ctx.Err() (wrapping the
// last Redis error, if any), and what it may have left is given back in the
// background before this handle acquires or unlocks again.
func (m *Mutex) Lock(ctx context.Context) error {
	if m.zero() {
		return errZero
	}
	_, err := m.m.Acquire(ctx, core.AcquireOpts{Wait: core.Forever})
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
	_, err := m.m.Acquire(ctx, core.AcquireOpts{Wait: core.Forever, Lease: lease})
	return err
}

// TryLock makes one attempt and does not wait. Contention is reported as
// false with a nil error.
func (m *Mutex) TryLock(ctx context.Context) (bool, error) {
	if m.zero() {
		return false, errZero
	}
	return m.m.Acquire(ctx, core.AcquireOpts{})
}

// TryLockFor waits up to wait for the lock. A lease of 0 means the watchdog
// keeps the lock; a positive lease frees it after that long. It reports
// false with a nil error when the wait ran out.
func (m *Mutex) TryLockFor(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if m.zero() {
		return false, errZero
	}
	if wait < 0 {
		return false, fmt.Errorf("%w: wait %v", ErrInvalidValue, wait)
	}
	return m.m.Acquire(ctx, core.AcquireOpts{Wait: wait, Lease: lease})
}

// Unlock releases one hold. It returns ErrNotHeld, changing nothing, when
// this owner does not hold the lock. When ctx ends, before or during the
// call, it still runs to completion on a fresh context bounded by the
// client's cleanup timeout (fairlock.WithCleanupTimeout). A retry
// after a lost reply returns the first outcome (Redisson's unlock latch).
func (m *Mutex) Unlock(ctx context.Context) error {
	if m.zero() {
		return errZero
	}
	return m.m.Unlock(ctx)
}

// ForceUnlock deletes the lock whoever holds it and wakes a waiter. It
// reports whether a lock was deleted. Other holders learn of the loss
// through their Done channels at their next watchdog renewal.
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
// the lock (the watchdog found it gone or could not renew it in time, or an
// explicit lease ran out). Err then says which. When the handle holds
// nothing the channel is already closed.
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
