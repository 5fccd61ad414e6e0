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
// holder's lease expiry. They are exact up to 2^53: the acquisition after
// the one that got 2^53 (a re-entry too) returns an error and changes
// nothing.
//
// As in Redisson, every successful acquisition gets a new token, re-entries
// included, and the plain Lock / TryLock methods INCR too (they discard the
// token). One deliberate difference: Redisson's lockAndGetToken(lease, unit)
// ignores the lease; LockAndGetTokenWithLease here uses it.
package fenced

import (
	"context"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Mutex is a handle on a fenced lock. Its calls are fairlock.FencedHandle's
// (LockAndGetToken, LockAndGetTokenWithLease, TryLockAndGetToken, Token,
// TokenKey) and fairlock.Handle's (Lock, LockWithLease, TryLock,
// TryLockFor, Unlock, ForceUnlock, IsLocked, IsHeld, HoldCount,
// RemainingLease, Done, Err, ValidUntil, Name, Owner), which say what each
// does and leaves behind. Lock, LockWithLease, TryLock and TryLockFor take a
// token too (it is INCRed, as in Redisson) and discard it. ValidUntil bounds
// the hold on the local clock; a token makes a write safe even past it: the
// resource refuses it once a newer token was seen.
//
// A Mutex must not be copied after first use. Make one with New: on a zero
// Mutex every call returns an error matching ErrInvalidValue.
type Mutex struct {
	fairlock.FencedHandle
}

// New returns a handle on the fenced lock called name. The name must be
// non-empty; it may carry a Redis hash tag. New does not talk to Redis.
func New(c *fairlock.Client, name string, opts ...fairlock.LockOption) (*Mutex, error) {
	return core.New(c, name, opts, makeEngine, func(h fairlock.FencedHandle, _ *core.Mutex) *Mutex { return &Mutex{h} })
}

func makeEngine(s *core.Session, k wire.Keys, _ core.LockConfig) (core.Engine, error) {
	return engine{core.ReentrantEngine{S: s, K: k}}, nil
}

// engine is the reentrant lock's engine with fenced_acquire.lua: every
// acquisition INCRs the token, so Lock and TryLock take one too.
type engine struct{ core.ReentrantEngine }

// LockKind names the lock for an observer's events.
func (engine) LockKind() string { return "fenced" }

// Try replies the token in place of the ttl when acquired (core.Engine).
func (e engine) Try(ctx context.Context, a wire.Args, _ bool) (bool, int64, error) {
	ok, ttl, token, err := e.S.Scripts().FencedAcquire(ctx, e.S.RDB, e.K, a)
	if ok {
		return true, token, err
	}
	return false, ttl, err
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
