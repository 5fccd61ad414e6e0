package fairlock

import (
	"context"
	"fmt"
	"time"

	"github.com/fairlock-go/fairlock/internal/core"
)

// NoExpiry is what RemainingLease reports for a lock with no lease.
const NoExpiry = core.NoExpiry

// Handle is what every lock handle has: the reentrant, fair and fenced
// locks' Mutex and each half of a read-write lock embed a *Handle, so these
// calls are written (and documented) once. The lock packages add what is
// their own: fencing tokens (fenced, fair), queue options (fair), the two
// halves (rwlock).
//
// An owner is what Redisson calls a thread: the id "<client-uuid>:<thread-id>"
// written into the lock. Go has no goroutine ids, so each handle is its own
// owner: a lock's New gives it a fresh thread id from its Client (or the one
// of WithThreadID). Holding is per owner: locking again through the same
// handle re-enters (the hold count goes up, and the lock is free only after
// as many Unlocks). A handle is safe for concurrent use, but goroutines
// sharing one handle are one owner (and hold one place in a fair queue):
// they do not exclude each other. Give each goroutine that must be excluded
// its own handle (New is cheap: it talks to nobody).
//
// A handle must not be copied after first use. Make one with its package's
// New: on a zero lock every call returns an error matching ErrInvalidValue.
type Handle struct {
	m *core.Mutex
}

// zero reports a Handle not made by a lock package's New.
func (h *Handle) zero() bool { return h == nil || h.m == nil }

// LockOption configures a lock handle (the Option of each lock package).
type LockOption func(*core.LockConfig)

// WithThreadID fixes the thread part of the owner id, for example to act as
// the same owner as another process (as a Java thread id does). By
// default each handle gets a fresh id. It must be positive: any other value
// (0 included) makes New fail with ErrInvalidValue.
func WithThreadID(id int64) LockOption {
	return func(c *core.LockConfig) {
		if id <= 0 && c.Invalid == nil {
			c.Invalid = fmt.Errorf("%w: WithThreadID(%d): a thread id must be positive", ErrInvalidValue, id)
			return
		}
		c.ThreadID = id
	}
}

// checkArgs refuses a negative wait, a negative lease
// and an explicit lease under core.MinLease, naming the call, the lock and
// the value.
func (h *Handle) checkArgs(call string, wait, lease time.Duration) error {
	switch {
	case wait < 0:
		return fmt.Errorf("%w: %s on %q: wait %v is negative (a wait of 0 makes one attempt)",
			ErrInvalidValue, call, h.m.Keys.Name, wait)
	case lease < 0 || (lease > 0 && lease < core.MinLease):
		return fmt.Errorf("%w: %s on %q: lease %v (a lease of 0 lets the watchdog keep the lock; an explicit lease is at least %v)",
			ErrInvalidValue, call, h.m.Keys.Name, lease, core.MinLease)
	}
	return nil
}

func init() {
	core.RegisterHandles(
		func(m *core.Mutex) any { return Handle{m: m} },
		func(m *core.Mutex) any { return FencedHandle{Handle{m: m}} })
}

// errZero is what every call on a zero lock returns.
var errZero = fmt.Errorf("%w: a zero lock handle (make one with its package's New)", ErrInvalidValue)

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Name is the lock's name ("" for a zero lock).
func (h *Handle) Name() string {
	if h.zero() {
		return ""
	}
	return h.m.Keys.Name
}

// Owner is the owner id this handle writes into the lock (and a fair
// lock's queue); "" for a zero lock.
func (h *Handle) Owner() string {
	if h.zero() {
		return ""
	}
	return h.m.Owner
}

// Lock acquires the lock, waiting as long as ctx allows; a fair lock queues
// behind earlier waiters, with the handle's wait slot. The watchdog keeps
// the lock until Unlock (see WithLease). A Redis that times out, refuses
// connections, is loading, paused or failing over does not end the wait at
// once, nor cost a fair waiter its place: the attempt is sent again with
// the same request id. If ctx ends first, Lock returns at once an error
// matching both ErrCanceled and ctx.Err() (wrapping the last Redis error,
// if any), and what it may have left (a queue place, a grant that raced the
// end) is given back in the background before this handle acquires or
// unlocks again.
//
// Retrying has a budget: once Redis has not answered the wait's attempts
// for the client's outage budget (WithOutageBudget; by default the longer
// of two head graces and the watchdog lease, 30 s), Lock ends with an error
// matching ErrUnavailable that names the address and wraps the last Redis
// error, whatever ctx is (context.Background included). It ends at the
// first failed attempt past the budget: within the longer of the budget and
// one Redis call as the go-redis client bounds it. Waiting for a give-back
// of this handle's earlier call counts against the same budget.
//
// A fair waiter that waits longer than its wait slot while queued may be
// pruned as dead by another client; it then joins again at the tail on its
// next attempt (as in Redisson), losing its place. Its own attempts never
// prune it.
func (h *Handle) Lock(ctx context.Context) error {
	if h.zero() {
		return errZero
	}
	_, err := h.m.Acquire(ctx, h.opts(core.Forever, 0))
	return err
}

// LockWithLease is Lock with an explicit lease: the lock frees itself after
// lease unless unlocked first, and no watchdog renews it. A lease of 0 is
// Lock's (the watchdog keeps the lock), as in TryLockFor and Redisson's
// lock(leaseTime). A negative lease, or one under 10 ms (no reply could
// come back within it), is refused with ErrInvalidValue. A re-entry of a
// hold the watchdog keeps sets the watchdog lease instead (the watchdog
// keeps the hold until its last Unlock anyway). A re-entry of an
// explicit-lease hold sets the new lease, longer or shorter, except on a
// read-write lock (package rwlock), whose re-entry keeps the longer of the
// hold's remaining lease and the new one.
func (h *Handle) LockWithLease(ctx context.Context, lease time.Duration) error {
	if h.zero() {
		return errZero
	}
	if err := h.checkArgs("LockWithLease", 0, lease); err != nil {
		return err
	}
	_, err := h.m.Acquire(ctx, h.opts(core.Forever, lease))
	return err
}

// TryLock makes one attempt and does not wait (Redisson's tryLock()).
// Contention is reported as false with a nil error. A fair lock's TryLock
// never queues, and fails while anyone is queued, even if the lock is free:
// the queue goes first.
//
// It returns within one attempt timeout (the go-redis client's read
// timeout, at most 3 s), whatever ctx is: an attempt Redis does not answer
// by then, or a give-back of this handle's earlier call still pending then
// (none is attempted before it is done), ends it with an error matching
// ErrUnavailable. See TryLockFor.
func (h *Handle) TryLock(ctx context.Context) (bool, error) {
	if h.zero() {
		return false, errZero
	}
	return h.m.Acquire(ctx, core.AcquireOpts{})
}

// TryLockFor waits up to wait for the lock. A lease of 0 means the watchdog
// keeps the lock; a positive lease (at least 10 ms) frees it after that
// long. It reports false with a nil error when the wait ran out. A fair
// lock queues for up to wait, using wait as the wait slot (as Redisson's
// tryLock(wait, lease)); a wait of 0 uses the default slot and makes one
// queued attempt; when the wait runs out it leaves the queue. A negative
// wait or lease is refused with ErrInvalidValue.
//
// The call returns within wait + one attempt timeout, whatever ctx is
// (context.Background included). The attempt timeout is the go-redis
// client's read timeout (the longer of its read and write timeouts), at
// most 3 s, and 3 s when the client has none. Every Redis call of the wait
// ends by then, and so does the wait for its give-back after the wait (it
// goes on in the background). A wait that ends because Redis did not
// answer (an attempt cut at the bound, an attempt that failed when the wait
// ran out, an earlier give-back of this handle still pending) returns false
// with an error matching ErrUnavailable that wraps the last Redis error.
func (h *Handle) TryLockFor(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if h.zero() {
		return false, errZero
	}
	if err := h.checkArgs("TryLockFor", wait, lease); err != nil {
		return false, err
	}
	return h.m.Acquire(ctx, h.opts(wait, lease))
}

// opts are the acquisition options of a wait (core.Forever: until ctx
// ends) and a lease (0: the watchdog's). A fair lock queues, with its
// default slot when the wait is for ever or 0 and the wait as its slot
// otherwise (Redisson's tryLock(wait, lease)).
func (h *Handle) opts(wait, lease time.Duration) core.AcquireOpts {
	o := core.AcquireOpts{Wait: wait, Lease: lease}
	if h.m.Queue {
		o.Queue, o.Slot = true, wait
		if wait <= 0 {
			o.Slot = h.m.Slot
		}
	}
	return o
}

// Unlock releases one hold; releasing the last wakes a waiter (on a fair
// lock, the head of the queue and the waiter behind it, and reentrant
// waiters of the same name). It returns ErrNotHeld, changing nothing, when
// this owner does not hold the lock (Redisson's fair lock replies success
// when the lock is gone). When ctx ends, before or during the call, it
// still runs to completion on a fresh context bounded by the client's
// cleanup timeout (WithCleanupTimeout). A retry after a lost reply returns
// the first outcome (Redisson's unlock latch). When Redis cannot be reached
// it returns the error, and the hold it was to end is not renewed any more:
// the last one ends (Done closed, Err matching ErrLost until the release is
// confirmed, nil then) and the release is retried in the background until
// Redis confirms it or the lease runs out.
//
// After Done/Err reported the handle's hold lost (and until this handle
// acquires again), Unlock returns at once an error matching both ErrNotHeld
// and ErrLost (it wraps Err()), and sends nothing: what may be left of the
// hold in Redis is released by the background give-back the loss started
// (bounded by the lease and the latch). So defer m.Unlock(ctx) does not
// hang on a hold that is known to be gone.
func (h *Handle) Unlock(ctx context.Context) error {
	if h.zero() {
		return errZero
	}
	return h.m.Unlock(ctx)
}

// ForceUnlock deletes the lock whoever holds it and wakes a waiter (on a
// fair lock, the head of the queue and the waiter behind it). It reports
// whether a lock was deleted. Other holders learn of the loss through their
// Done channels at their next watchdog renewal.
func (h *Handle) ForceUnlock(ctx context.Context) (bool, error) {
	if h.zero() {
		return false, errZero
	}
	return h.m.ForceUnlock(ctx)
}

// IsLocked reports whether anyone holds the lock.
func (h *Handle) IsLocked(ctx context.Context) (bool, error) {
	if h.zero() {
		return false, errZero
	}
	return h.m.IsLocked(ctx)
}

// IsHeld reports whether this handle's owner holds the lock.
func (h *Handle) IsHeld(ctx context.Context) (bool, error) {
	if h.zero() {
		return false, errZero
	}
	return h.m.IsHeld(ctx)
}

// HoldCount is this owner's hold count in Redis; 0 when it does not hold it.
func (h *Handle) HoldCount(ctx context.Context) (int, error) {
	if h.zero() {
		return 0, errZero
	}
	return h.m.HoldCount(ctx)
}

// RemainingLease is the lock's remaining lease: 0 when nobody holds it,
// NoExpiry when it has no lease.
func (h *Handle) RemainingLease(ctx context.Context) (time.Duration, error) {
	if h.zero() {
		return 0, errZero
	}
	return h.m.RemainingLease(ctx)
}

// Done returns a channel that is closed when this handle's current hold
// ends: the last Unlock, a ForceUnlock through this handle, or the loss of
// the lock (the watchdog found it gone or could not renew it in time, or an
// explicit lease ran out). Err then says which. When the handle holds
// nothing the channel is already closed.
func (h *Handle) Done() <-chan struct{} {
	if h.zero() {
		return closedChan
	}
	return h.m.Done()
}

// Err is nil while the lock is held and after a release; after a loss it
// is an error matching ErrLost that says why; after the client was closed
// with the lock held, one matching ErrClosed.
func (h *Handle) Err() error {
	if h.zero() {
		return errZero
	}
	return h.m.Err()
}

// ValidUntil is the local instant until which this handle's current hold is
// known to be valid: the send time of its latest acquisition or confirmed
// renewal plus the lease, less a drift margin (1% of the lease plus 2 ms);
// on a read-write lock, a re-entry with a shorter lease keeps the longer
// validity, as Redis keeps the longer TTL.
// Redis cannot expire the lock before then; Done closes when it passes with
// no renewal confirmed. Check it before a write that must happen under the
// lock (or, better, use a fencing token). Zero when nothing is held.
func (h *Handle) ValidUntil() time.Time {
	if h.zero() {
		return time.Time{}
	}
	return h.m.ValidUntil()
}

// FencedHandle is a Handle whose acquisitions also return a fencing token
// (Redisson's RFencedLock): a number that grows with every acquisition of
// the lock by any owner, so that a resource can refuse a write carrying an
// older token than one it has seen (package fence). The fenced and fair
// locks' Mutex embed it.
type FencedHandle struct {
	Handle
}

// LockAndGetToken is Lock, returning this acquisition's fencing token. A
// fenced lock gives every acquisition a new token, re-entries included (as
// Redisson); a fair lock's re-entry returns the hold's current token. Send
// it with every write the lock protects and let the resource refuse writes
// with an older token (package fence). Tokens are exact up to 2^53: once the
// lock's token key holds 2^53, every acquisition that would need a new token
// returns an error at once and changes nothing (docs/design.md, "Fencing
// tokens"), never a token that repeats or goes back.
func (h *FencedHandle) LockAndGetToken(ctx context.Context) (int64, error) {
	if h.zero() {
		return 0, errZero
	}
	var token int64
	o := h.opts(core.Forever, 0)
	o.Token = &token
	if _, err := h.m.Acquire(ctx, o); err != nil {
		return 0, err
	}
	return token, nil
}

// LockAndGetTokenWithLease is LockAndGetToken with an explicit lease: the
// lock frees itself after lease unless unlocked first, and no watchdog
// renews it. (Redisson's lockAndGetToken(lease, unit) ignores its lease and
// lets the watchdog keep the lock; here the lease is used.) Its leases are
// LockWithLease's: 0 lets the watchdog keep the lock; a negative lease, or
// one under 10 ms, is refused with ErrInvalidValue.
func (h *FencedHandle) LockAndGetTokenWithLease(ctx context.Context, lease time.Duration) (int64, error) {
	if h.zero() {
		return 0, errZero
	}
	if err := h.checkArgs("LockAndGetTokenWithLease", 0, lease); err != nil {
		return 0, err
	}
	var token int64
	o := h.opts(core.Forever, lease)
	o.Token = &token
	if _, err := h.m.Acquire(ctx, o); err != nil {
		return 0, err
	}
	return token, nil
}

// TryLockAndGetToken is TryLockFor, returning the fencing token: when it
// acquired, ok is true and token is this acquisition's token; when the wait
// ran out, ok is false with a nil error. Its waits and leases are
// TryLockFor's.
func (h *FencedHandle) TryLockAndGetToken(ctx context.Context, wait, lease time.Duration) (token int64, ok bool, err error) {
	if h.zero() {
		return 0, false, errZero
	}
	if err := h.checkArgs("TryLockAndGetToken", wait, lease); err != nil {
		return 0, false, err
	}
	o := h.opts(wait, lease)
	o.Token = &token
	ok, err = h.m.Acquire(ctx, o)
	if !ok {
		token = 0
	}
	return token, ok, err
}

// Token reads the lock's token key (Redisson's getToken): the token of the
// latest take on this name, by any owner (a fair or a fenced lock: both
// count on one key); 0 when none was ever issued. It is this handle's token
// only while this handle holds the lock (and, on a fenced lock, has not
// re-entered since).
func (h *FencedHandle) Token(ctx context.Context) (int64, error) {
	if h.zero() {
		return 0, errZero
	}
	return h.m.Token(ctx)
}

// TokenKey is the Redis key of the lock's token counter,
// "redisson_lock_token:{name}" ("" for a zero lock).
func (h *FencedHandle) TokenKey() string {
	if h.zero() {
		return ""
	}
	return h.m.Keys.Token()
}
