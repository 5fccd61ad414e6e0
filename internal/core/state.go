package core

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/wire"
)

// ForceUnlock deletes the lock whoever holds it and wakes a waiter. It
// reports whether there was a lock to delete.
func (m *Mutex) ForceUnlock(ctx context.Context) (bool, error) {
	if ctx == nil {
		return false, errNilCtx
	}
	a := wire.Args{NowMs: m.S.WallMs(), GraceMs: m.S.GraceMs(), PubCmd: m.S.PubCmd()}
	ok, err := call(ctx, func(ctx context.Context) (bool, error) { return m.E.ForceUnlock(ctx, a) })
	if err != nil {
		return false, Errorf(err, "force unlock %q", m.userName())
	}
	m.mu.Lock()
	h := m.cur
	m.mu.Unlock()
	m.released(h)
	return ok, nil
}

// Done returns a channel closed when the current hold ends: released by the
// last Unlock, deleted by ForceUnlock, lost, or ended by Close. When the
// handle holds nothing, the channel is already closed.
func (m *Mutex) Done() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil {
		return closedChan
	}
	if m.cur.done == nil {
		m.cur.done = make(chan struct{})
	}
	return m.cur.done
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Err reports why the most recent hold ended: nil while held or after a
// release, an error matching ErrLost when the lock was lost, ErrClosed when
// the client was closed while it was held.
func (m *Mutex) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur != nil || m.last == nil {
		return nil
	}
	return m.last.err
}

// IsLocked reports whether anyone holds the lock.
func (m *Mutex) IsLocked(ctx context.Context) (bool, error) {
	if ctx == nil {
		return false, errNilCtx
	}
	n, err := call(ctx, func(ctx context.Context) (int64, error) { return m.S.RDB.Exists(ctx, m.Keys.Name).Result() })
	return n == 1, err
}

// IsHeld reports whether this handle's owner holds the lock.
func (m *Mutex) IsHeld(ctx context.Context) (bool, error) {
	if ctx == nil {
		return false, errNilCtx
	}
	return call(ctx, func(ctx context.Context) (bool, error) { return m.S.RDB.HExists(ctx, m.Keys.Name, m.Owner).Result() })
}

// HoldCount is the owner's hold count in Redis, 0 when not held.
func (m *Mutex) HoldCount(ctx context.Context) (int, error) {
	if ctx == nil {
		return 0, errNilCtx
	}
	s, err := call(ctx, func(ctx context.Context) (string, error) { return m.S.RDB.HGet(ctx, m.Keys.Name, m.Owner).Result() })
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(s)
}

// NoExpiry is what RemainingLease reports for a lock without a lease.
const NoExpiry time.Duration = -1

// RemainingLease is the lock's remaining lease: 0 when nobody holds it,
// NoExpiry when it has no lease.
func (m *Mutex) RemainingLease(ctx context.Context) (time.Duration, error) {
	if ctx == nil {
		return 0, errNilCtx
	}
	ms, err := call(ctx, func(ctx context.Context) (int64, error) { return m.S.RDB.Do(ctx, "pttl", m.Keys.Name).Int64() })
	switch {
	case err != nil:
		return 0, err
	case ms == -2:
		return 0, nil
	case ms == -1:
		return NoExpiry, nil
	}
	return time.Duration(ms) * time.Millisecond, nil
}
