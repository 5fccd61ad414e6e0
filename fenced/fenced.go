// Package fenced is Redisson's fenced lock (RedissonFencedLock): the
// reentrant lock of package reentrant (the same hash, unlock, channel and
// watchdog) whose every successful acquisition also INCRs a counter,
// "redisson_lock_token:{name}", and returns its new value: a fencing token.
//
// A lease lock alone cannot stop a holder that was paused past its lease (a
// GC pause, SIGSTOP, a stalled network) from writing after another owner
// took the lock. The token can: send it with every write the lock protects,
// and let the resource refuse a write whose token is older than one it has
// already seen (package fence does this for a Redis key; docs/design.md
// shows the SQL form). Tokens strictly increase across owners and across a
// holder's lease expiry.
//
// As in Redisson, every successful acquisition gets a new token, re-entries
// included, and the plain Lock / TryLock methods INCR too (they discard the
// token). One deliberate difference: Redisson's lockAndGetToken(lease, unit)
// ignores the lease; LockAndGetTokenWithLease here uses it.
package fenced

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

// Mutex is a handle on a distributed fenced lock. Owners and re-entry are
// those of reentrant.Mutex: each handle is one owner; goroutines sharing a
// handle re-enter rather than exclude each other.
//
// A Mutex must not be copied after first use. Make one with New: on a zero
// Mutex every call returns an error matching ErrInvalidValue.
type Mutex struct {
	m *core.Mutex
}

// Option configures a Mutex.
type Option func(*options)

type options struct{ threadID int64 }

// WithThreadID fixes the thread part of the owner id. It must be positive.
// By default each handle gets a fresh id.
func WithThreadID(id int64) Option { return func(o *options) { o.threadID = id } }

// New returns a handle on the fenced lock called name. The name must be
// non-empty; it may carry a Redis hash tag. New does not talk to Redis.
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
	m, err := core.NewMutex(s, func(k lua.Keys) core.Engine { return engine{core.ReentrantEngine{S: s, K: k}} }, name, o.threadID)
	if err != nil {
		return nil, err
	}
	return &Mutex{m: m}, nil
}

// errZero is what every call on a zero fenced.Mutex returns.
var errZero = fmt.Errorf("%w: a zero fenced.Mutex (make one with fenced.New)", ErrInvalidValue)

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

// TokenKey is the Redis key of the lock's token counter,
// "redisson_lock_token:{name}".
func (m *Mutex) TokenKey() string {
	if m.zero() {
		return ""
	}
	return m.m.Keys.Token()
}

// LockAndGetToken acquires the lock (waiting as long as ctx allows, the
// watchdog keeping it until Unlock) and returns this acquisition's token.
func (m *Mutex) LockAndGetToken(ctx context.Context) (int64, error) {
	if m.zero() {
		return 0, errZero
	}
	var token int64
	if _, err := m.m.Acquire(ctx, core.AcquireOpts{Wait: core.Forever, Token: &token}); err != nil {
		return 0, err
	}
	return token, nil
}

// LockAndGetTokenWithLease is LockAndGetToken with an explicit lease: the
// lock frees itself after lease unless unlocked first, and no watchdog
// renews it. (Redisson's lockAndGetToken(lease, unit) ignores its lease and
// lets the watchdog keep the lock; here the lease is used.)
func (m *Mutex) LockAndGetTokenWithLease(ctx context.Context, lease time.Duration) (int64, error) {
	if m.zero() {
		return 0, errZero
	}
	if lease <= 0 {
		return 0, fmt.Errorf("%w: lease %v", ErrInvalidValue, lease)
	}
	var token int64
	if _, err := m.m.Acquire(ctx, core.AcquireOpts{Wait: core.Forever, Lease: lease, Token: &token}); err != nil {
		return 0, err
	}
	return token, nil
}

// TryLockAndGetToken waits up to wait for the lock (0: one attempt); a
// lease of 0 lets the watchdog keep it. When it acquired, ok is true and
// token is this acquisition's token; when the wait ran out, ok is false
// with a nil error.
func (m *Mutex) TryLockAndGetToken(ctx context.Context, wait, lease time.Duration) (token int64, ok bool, err error) {
	if m.zero() {
		return 0, false, errZero
	}
	if wait < 0 {
		return 0, false, fmt.Errorf("%w: wait %v", ErrInvalidValue, wait)
	}
	ok, err = m.m.Acquire(ctx, core.AcquireOpts{Wait: wait, Lease: lease, Token: &token})
	if !ok {
		token = 0
	}
	return token, ok, err
}

// Token reads the token key (Redisson's getToken): the token of the latest
// acquisition on this name, by any owner; 0 when none was ever issued. It
// is this handle's token only while this handle holds the lock and has not
// re-entered since.
func (m *Mutex) Token(ctx context.Context) (int64, error) {
	if m.zero() {
		return 0, errZero
	}
	return m.m.Token(ctx)
}

// Lock acquires the lock as LockAndGetToken does and discards the token (it
// was still INCRed, as in Redisson).
func (m *Mutex) Lock(ctx context.Context) error {
	if m.zero() {
		return errZero
	}
	_, err := m.LockAndGetToken(ctx)
	return err
}

// LockWithLease is LockAndGetTokenWithLease discarding the token.
func (m *Mutex) LockWithLease(ctx context.Context, lease time.Duration) error {
	if m.zero() {
		return errZero
	}
	_, err := m.LockAndGetTokenWithLease(ctx, lease)
	return err
}

// TryLock makes one attempt and does not wait (the token is INCRed when it
// acquires, and discarded).
func (m *Mutex) TryLock(ctx context.Context) (bool, error) {
	if m.zero() {
		return false, errZero
	}
	return m.m.Acquire(ctx, core.AcquireOpts{})
}

// TryLockFor is TryLockAndGetToken discarding the token.
func (m *Mutex) TryLockFor(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if m.zero() {
		return false, errZero
	}
	_, ok, err := m.TryLockAndGetToken(ctx, wait, lease)
	return ok, err
}

// Unlock releases one hold (the reentrant lock's unlock, with its latch).
// It returns ErrNotHeld, changing nothing, when this owner does not hold
// the lock. The token key is never touched by a release.
func (m *Mutex) Unlock(ctx context.Context) error {
	if m.zero() {
		return errZero
	}
	return m.m.Unlock(ctx)
}

// ForceUnlock deletes the lock whoever holds it and wakes a waiter. It
// reports whether a lock was deleted.
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

// Done returns a channel closed when this handle's current hold ends (see
// reentrant.Mutex.Done).
func (m *Mutex) Done() <-chan struct{} {
	if m.zero() {
		return closedChan
	}
	return m.m.Done()
}

// Err says why the most recent hold ended (see reentrant.Mutex.Err).
func (m *Mutex) Err() error {
	if m.zero() {
		return errZero
	}
	return m.m.Err()
}

// ValidUntil is the local instant until which the current hold is known to
// be valid (see reentrant.Mutex.ValidUntil). A token makes a write safe
// even past it: the resource refuses it once a newer token was seen.
func (m *Mutex) ValidUntil() time.Time {
	if m.zero() {
		return time.Time{}
	}
	return m.m.ValidUntil()
}

// engine is the reentrant lock's engine with fenced_acquire.lua.
type engine struct{ core.ReentrantEngine }

// Try replies the token in place of the ttl when acquired (core.Engine).
func (e engine) Try(ctx context.Context, a lua.Args, _ bool) (bool, int64, error) {
	ok, ttl, token, err := e.S.Scripts.FencedAcquire(ctx, e.S.RDB, e.K, a)
	if ok {
		return true, token, err
	}
	return false, ttl, err
}
