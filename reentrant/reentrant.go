// Package reentrant is a distributed reentrant lock on Redis, Redisson's
// RLock: a hash "owner -> hold count" with a lease, owner-checked unlock, a
// watchdog that renews the lease while the holder lives, and waiters woken
// by pub/sub rather than polling.
//
// It is not fair: when the lock is released, any waiter may get it. Use
// package fair when first come must be first served.
package reentrant

import (
	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
)

// Mutex is a handle on a distributed reentrant lock. Its calls (Lock,
// LockWithLease, TryLock, TryLockFor, Unlock, ForceUnlock, IsLocked, IsHeld,
// HoldCount, RemainingLease, Done, Err, ValidUntil, Name, Owner) are
// fairlock.Handle's, which says what each does and leaves behind: every lock
// has them. Each handle is its own owner ("<client-uuid>:<thread-id>").
//
// A Mutex must not be copied after first use. Make one with New: on a zero
// Mutex every call returns an error matching ErrInvalidValue.
type Mutex struct {
	fairlock.Handle
}

// New returns a handle on the lock called name. The name must be non-empty;
// it may carry a Redis hash tag ("{tag}rest"). New does not talk to Redis.
func New(c *fairlock.Client, name string, opts ...fairlock.LockOption) (*Mutex, error) {
	return core.New(c, name, opts, core.MakeReentrant, func(h fairlock.Handle, _ *core.Mutex) *Mutex { return &Mutex{h} })
}

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
