// Package rwlock is a distributed read-write lock on Redis, Redisson's
// RReadWriteLock, wire-compatible with it: many readers share the lock, or
// one writer holds it alone (and may also take read holds itself); each
// half is reentrant, kept by the watchdog or an explicit lease, and waiters
// are woken by pub/sub on the lock's channel.
//
// A writer waits until every read hold is released, its own owner's
// included: a read hold cannot be upgraded to a write hold (taking the
// write lock while holding the read lock waits for ever, or until ctx
// ends). The converse is allowed: the writer may take read holds, which it
// keeps after its last write Unlock.
//
// It is not fair: when the lock is freed any waiter may take it, and
// readers arriving while readers hold the lock join them even if a writer
// waits, so a steady stream of readers can starve a writer.
package rwlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// RWMutex is a handle on a distributed read-write lock: one owner
// ("<client-uuid>:<thread-id>", Redisson's thread) with a read half and a
// write half. As with every lock handle each RWMutex is its own owner; give
// each goroutine that must be excluded its own handle (New is cheap: it
// talks to nobody). An RWMutex must not be copied after first use. Make one
// with New: on a zero RWMutex (or Lock) every call returns an error matching
// ErrInvalidValue.
type RWMutex struct {
	read, write *Lock
}

// Lock is one half of an RWMutex: the read lock or the write lock. Its
// calls are fairlock.Handle's (Lock, LockWithLease, TryLock, TryLockFor,
// Unlock, RemainingLease, Done, Err, ValidUntil, Name, Owner), which say
// what each does and leaves behind, except ForceUnlock, IsLocked, IsHeld and
// HoldCount, which are the half's own. Owner is "<uuid>:<tid>" for the read
// half and "<uuid>:<tid>:write" for the write half. RemainingLease is the
// lease both halves share.
type Lock struct {
	fairlock.Handle
	m       *core.Mutex
	write   bool
	sibling *Lock // the other half of the same RWMutex
}

// New returns a handle on the read-write lock called name. The name must be
// non-empty; it may carry a Redis hash tag ("{tag}rest"). New does not talk
// to Redis.
func New(c *fairlock.Client, name string, opts ...fairlock.LockOption) (*RWMutex, error) {
	half := func(write bool, opts []Option) (*Lock, error) {
		h, m, err := core.NewLock[fairlock.Handle](c, name, opts, func(s *core.Session, k wire.Keys, _ core.LockConfig) (core.Engine, error) {
			return engine{s: s, k: k, write: write}, nil
		})
		if err != nil {
			return nil, err
		}
		if write {
			m.Owner = wire.WriterOwner(m.Owner)
		}
		m.WatchKind = core.KindRW
		// Both halves' re-entries set the TTL to max(TTL, lease) (H6).
		m.ReentryKeepsLonger = true
		return &Lock{Handle: h, m: m, write: write}, nil
	}
	r, err := half(false, opts)
	if err != nil {
		return nil, err
	}
	// The write half is the same owner: the read half's thread id.
	w, err := half(true, append(opts[:len(opts):len(opts)], fairlock.WithThreadID(r.m.ThreadID)))
	if err != nil {
		return nil, err
	}
	r.sibling, w.sibling = w, r
	return &RWMutex{read: r, write: w}, nil
}

// errZero is what every call on a zero rwlock.RWMutex or Lock returns.
var errZero = fmt.Errorf("%w: a zero rwlock.RWMutex or Lock (make one with rwlock.New)", fairlock.ErrInvalidValue)

// zero reports an RWMutex not made by New (a zero value, or nil).
func (rw *RWMutex) zero() bool { return rw == nil || rw.read == nil || rw.write == nil }

// zero reports a Lock not made by New (a zero value, or nil).
func (l *Lock) zero() bool { return l == nil || l.m == nil }

// ReadLock is the read half: shared with other owners' read holds, and
// with this owner's own write hold.
func (rw *RWMutex) ReadLock() *Lock {
	if rw.zero() {
		return &Lock{}
	}
	return rw.read
}

// WriteLock is the write half: exclusive, except for this owner's own read
// holds.
func (rw *RWMutex) WriteLock() *Lock {
	if rw.zero() {
		return &Lock{}
	}
	return rw.write
}

// Name is the lock's name.
func (rw *RWMutex) Name() string {
	if rw.zero() {
		return ""
	}
	return rw.read.m.Keys.Name
}

// IsWrite reports whether l is the write half of its RWMutex (false on a
// nil or zero Lock).
func (l *Lock) IsWrite() bool { return !l.zero() && l.write }

// ForceUnlock deletes the lock, whoever holds it, when it is held in this
// half's mode (the read half deletes a read-locked lock, the write half a
// write-locked one), and wakes the waiters. It reports whether a lock was
// deleted. When it deleted one, this owner's holds of both halves end as
// released (Done closed, Err nil); when it deleted nothing, nothing changes,
// on the client either.
func (l *Lock) ForceUnlock(ctx context.Context) (bool, error) {
	if l.zero() {
		return false, errZero
	}
	if ctx == nil {
		return false, fmt.Errorf("%w: nil context", ErrInvalidValue)
	}
	a := wire.Args{PubCmd: l.m.S.PubCmd()}
	ok, err := core.Call(ctx, func(ctx context.Context) (bool, error) {
		return l.m.S.Scripts().RWForceUnlock(ctx, l.m.S.RDB, l.m.Keys, a, l.write)
	})
	if err != nil {
		return false, fmt.Errorf("fairlock: force unlock %q: %w", l.m.Keys.Name, err)
	}
	if ok {
		// The whole lock is gone: this owner's holds of both halves.
		l.m.EndReleased()
		l.sibling.m.EndReleased()
	}
	return ok, nil
}

// IsLocked reports, for the read half, whether the lock is held in read
// mode or held by a writer that also reads; for the write half, whether it
// is held in write mode (Redisson's isLocked of each half).
func (l *Lock) IsLocked(ctx context.Context) (bool, error) {
	if l.zero() {
		return false, errZero
	}
	type state struct {
		mode string
		n    int64
	}
	st, err := core.Call(ctx, func(ctx context.Context) (state, error) {
		pipe := l.m.S.RDB.Pipeline()
		mode := pipe.HGet(ctx, l.m.Keys.Name, "mode")
		n := pipe.HLen(ctx, l.m.Keys.Name)
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return state{}, err
		}
		return state{mode.Val(), n.Val()}, nil
	})
	if err != nil {
		return false, err
	}
	if l.write {
		return st.mode == "write", nil
	}
	return st.mode == "read" || (st.mode == "write" && st.n > 2), nil
}

// IsHeld reports whether this half's owner holds it. For the read half, a
// field whose every hold's key has expired (its lease ran out while other
// holds kept the lock, and the handle was told it was lost) is not held.
func (l *Lock) IsHeld(ctx context.Context) (bool, error) {
	if l.zero() {
		return false, errZero
	}
	if l.write {
		return l.m.IsHeld(ctx)
	}
	n, err := l.readHolds(ctx)
	return n > 0, err
}

// HoldCount is this half's hold count in Redis; 0 when it holds none. A
// read field whose every hold's key has expired counts 0 (see IsHeld).
func (l *Lock) HoldCount(ctx context.Context) (int, error) {
	if l.zero() {
		return 0, errZero
	}
	if l.write {
		return l.m.HoldCount(ctx)
	}
	return l.readHolds(ctx)
}

// readHolds is the read half's hold count: the field's count while one of
// its holds' keys lives, else 0 (the scripts' rule: those holds' leases ran
// out while other holds kept the hash, and are over).
func (l *Lock) readHolds(ctx context.Context) (int, error) {
	return core.Call(ctx, func(ctx context.Context) (int, error) {
		rdb := l.m.S.RDB
		n, err := rdb.HGet(ctx, l.m.Keys.Name, l.m.Owner).Int()
		if errors.Is(err, redis.Nil) || (err == nil && n <= 0) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		pipe := rdb.Pipeline()
		ttls := make([]*redis.DurationCmd, n)
		for k := n; k >= 1; k-- {
			ttls[k-1] = pipe.PTTL(ctx, l.m.Keys.RWTimeoutKey(l.m.Owner, int64(k)))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, err
		}
		for _, t := range ttls {
			if t.Val() > 0 {
				return n, nil
			}
		}
		return 0, nil
	})
}

type engine struct {
	s     *core.Session
	k     wire.Keys
	write bool
}

func (e engine) Try(ctx context.Context, a wire.Args, _ bool) (bool, int64, error) {
	if e.write {
		return e.s.Scripts().WriteAcquire(ctx, e.s.RDB, e.k, a)
	}
	return e.s.Scripts().ReadAcquire(ctx, e.s.RDB, e.k, a)
}

func (e engine) GiveUp(context.Context, wire.Args) error { return nil }

func (e engine) Unlock(ctx context.Context, a wire.Args) (wire.UnlockResult, error) {
	if e.write {
		return e.s.Scripts().WriteUnlock(ctx, e.s.RDB, e.k, a)
	}
	return e.s.Scripts().ReadUnlock(ctx, e.s.RDB, e.k, a)
}

func (e engine) ForceUnlock(ctx context.Context, a wire.Args) (bool, error) {
	return e.s.Scripts().RWForceUnlock(ctx, e.s.RDB, e.k, a, e.write)
}

func (e engine) WakeChannel(string) string { return e.k.RWChannel() }

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
