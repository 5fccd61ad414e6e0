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
	"time"

	"github.com/redis/go-redis/v9"

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

// RWMutex is a handle on a distributed read-write lock: one owner
// ("<client-uuid>:<thread-id>", Redisson's thread) with a read half and a
// write half. As with reentrant.Mutex each handle is its own owner; give each
// goroutine that must be excluded its own handle (New is cheap: it talks to
// nobody). An RWMutex must not be copied after first use. Make one with New:
// on a zero RWMutex (or Lock) every call returns an error matching
// ErrInvalidValue.
type RWMutex struct {
	read, write *Lock
}

// Lock is one half of an RWMutex: the read lock or the write lock.
type Lock struct {
	m       *core.Mutex
	write   bool
	sibling *Lock // the other half of the same RWMutex
}

// Option configures an RWMutex.
type Option func(*options)

type options struct{ threadID int64 }

// WithThreadID fixes the thread part of the owner id, for example to act as
// the same owner as another process (as a Java thread id does). It must be
// positive. By default each handle gets a fresh id.
func WithThreadID(id int64) Option { return func(o *options) { o.threadID = id } }

// New returns a handle on the read-write lock called name. The name must be
// non-empty; it may carry a Redis hash tag ("{tag}rest"). New does not talk
// to Redis.
func New(c *fairlock.Client, name string, opts ...Option) (*RWMutex, error) {
	var o options
	for i, f := range opts {
		if f == nil {
			return nil, fmt.Errorf("%w: option %d is nil", ErrInvalidValue, i)
		}
		f(&o)
	}
	if o.threadID < 0 {
		return nil, fmt.Errorf("%w: thread id %d", ErrInvalidValue, o.threadID)
	}
	s := core.Of(c)
	if s == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidValue)
	}
	if err := lua.ValidateName(name); err != nil {
		return nil, fmt.Errorf("fairlock: %w", err)
	}
	tid := o.threadID
	if tid == 0 {
		tid = s.NewThreadID()
	}
	half := func(write bool) (*Lock, error) {
		m, err := core.NewMutex(s, func(k lua.Keys) core.Engine { return engine{s: s, k: k, write: write} }, name, tid)
		if err != nil {
			return nil, err
		}
		if write {
			m.Owner = lua.WriterOwner(m.Owner)
		}
		m.WatchKind = core.KindRW
		return &Lock{m: m, write: write}, nil
	}
	r, err := half(false)
	if err != nil {
		return nil, err
	}
	w, err := half(true)
	if err != nil {
		return nil, err
	}
	r.sibling, w.sibling = w, r
	return &RWMutex{read: r, write: w}, nil
}

// errZero is what every call on a zero rwlock.RWMutex or Lock returns.
var errZero = fmt.Errorf("%w: a zero rwlock.RWMutex or Lock (make one with rwlock.New)", ErrInvalidValue)

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

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

// Name is the lock's name.
func (l *Lock) Name() string {
	if l.zero() {
		return ""
	}
	return l.m.Keys.Name
}

// Owner is the owner id this half writes into the lock: "<uuid>:<tid>" for
// the read half, "<uuid>:<tid>:write" for the write half.
func (l *Lock) Owner() string {
	if l.zero() {
		return ""
	}
	return l.m.Owner
}

// Lock acquires this half, waiting as long as ctx allows. The watchdog
// keeps the hold until Unlock. Transient Redis errors (timeouts, refused
// connections, loading, failover) do not end the wait. If ctx ends first,
// Lock returns at once an error matching both ErrCanceled and ctx.Err(), and
// what it may have left is given back in the background before this half
// acquires or unlocks again.
func (l *Lock) Lock(ctx context.Context) error {
	if l.zero() {
		return errZero
	}
	_, err := l.m.Acquire(ctx, core.AcquireOpts{Wait: core.Forever})
	return err
}

// LockWithLease is Lock with an explicit lease: the hold frees itself after
// lease unless unlocked first, and no watchdog renews it.
// A lease under 10 ms is refused (ErrInvalidValue): no reply could come back
// within it. A re-entry of a hold the watchdog keeps sets the watchdog lease
// instead (the watchdog keeps the hold until its last Unlock anyway).
func (l *Lock) LockWithLease(ctx context.Context, lease time.Duration) error {
	if l.zero() {
		return errZero
	}
	if lease <= 0 {
		return fmt.Errorf("%w: lease %v", ErrInvalidValue, lease)
	}
	_, err := l.m.Acquire(ctx, core.AcquireOpts{Wait: core.Forever, Lease: lease})
	return err
}

// TryLock makes one attempt and does not wait. Contention is reported as
// false with a nil error.
func (l *Lock) TryLock(ctx context.Context) (bool, error) {
	if l.zero() {
		return false, errZero
	}
	return l.m.Acquire(ctx, core.AcquireOpts{})
}

// TryLockFor waits up to wait for this half. A lease of 0 means the
// watchdog keeps the hold; a positive lease frees it after that long. It
// reports false with a nil error when the wait ran out.
func (l *Lock) TryLockFor(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if l.zero() {
		return false, errZero
	}
	if wait < 0 {
		return false, fmt.Errorf("%w: wait %v", ErrInvalidValue, wait)
	}
	return l.m.Acquire(ctx, core.AcquireOpts{Wait: wait, Lease: lease})
}

// Unlock releases one hold of this half. It returns ErrNotHeld, changing
// nothing, when this owner holds none. When ctx ends, before or during the
// call, it still runs to completion on a fresh context bounded by the
// client's cleanup timeout. A retry after a lost reply returns the first
// outcome (Redisson's unlock latch).
func (l *Lock) Unlock(ctx context.Context) error {
	if l.zero() {
		return errZero
	}
	return l.m.Unlock(ctx)
}

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
	a := lua.Args{PubCmd: l.m.S.PubCmd()}
	ok, err := core.Call(ctx, func(ctx context.Context) (bool, error) {
		return l.m.S.Scripts.RWForceUnlock(ctx, l.m.S.RDB, l.m.Keys, a, l.write)
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

// RemainingLease is the lock's remaining lease (both halves share it): 0
// when nobody holds it, NoExpiry when it has no lease.
func (l *Lock) RemainingLease(ctx context.Context) (time.Duration, error) {
	if l.zero() {
		return 0, errZero
	}
	return l.m.RemainingLease(ctx)
}

// Done returns a channel that is closed when this half's current hold
// ends: its last Unlock, a ForceUnlock through it, or the loss of the lock.
// Err then says which. When the half holds nothing the channel is already
// closed.
func (l *Lock) Done() <-chan struct{} {
	if l.zero() {
		return closedChan
	}
	return l.m.Done()
}

// Err is nil while this half is held and after a release; after a loss it
// is an error matching ErrLost; after the client was closed with the hold,
// one matching ErrClosed.
func (l *Lock) Err() error {
	if l.zero() {
		return errZero
	}
	return l.m.Err()
}

// ValidUntil is the local instant until which this half's current hold is
// known to be valid (see reentrant.Mutex.ValidUntil). Zero when nothing is
// held.
func (l *Lock) ValidUntil() time.Time {
	if l.zero() {
		return time.Time{}
	}
	return l.m.ValidUntil()
}

type engine struct {
	s     *core.Session
	k     lua.Keys
	write bool
}

func (e engine) Try(ctx context.Context, a lua.Args, _ bool) (bool, int64, error) {
	if e.write {
		return e.s.Scripts.WriteAcquire(ctx, e.s.RDB, e.k, a)
	}
	return e.s.Scripts.ReadAcquire(ctx, e.s.RDB, e.k, a)
}

func (e engine) GiveUp(context.Context, lua.Args) error { return nil }

func (e engine) Unlock(ctx context.Context, a lua.Args) (lua.UnlockResult, error) {
	if e.write {
		return e.s.Scripts.WriteUnlock(ctx, e.s.RDB, e.k, a)
	}
	return e.s.Scripts.ReadUnlock(ctx, e.s.RDB, e.k, a)
}

func (e engine) ForceUnlock(ctx context.Context, a lua.Args) (bool, error) {
	return e.s.Scripts.RWForceUnlock(ctx, e.s.RDB, e.k, a, e.write)
}

func (e engine) WakeChannel(string) string { return e.k.RWChannel() }
