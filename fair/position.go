package fair

import (
	"context"
	"fmt"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// TryAhead is Try with the caller's queue position (core.AheadTrier).
func (e engine) TryAhead(ctx context.Context, a wire.Args) (bool, int64, wire.Ahead, error) {
	ok, ttl, token, ahead, err := e.set.TryLockWaitAhead(ctx, e.s.RDB, e.k, a)
	if ok {
		return true, token, ahead, err
	}
	return false, ttl, ahead, err
}

// State is a fair lock's state at one instant, as anyone can read it
// (Mutex.State).
type State struct {
	// Locked: somebody holds the lock.
	Locked bool
	// Owner is the holder's owner id ("<client-uuid>:<thread-id>"); "" when
	// free. Owners lists every owner of the lock hash (normally at most
	// one: more is a state the scripts never leave).
	Owner  string
	Owners []string
	// HoldCount is the holder's reentrant hold count.
	HoldCount int
	// Lease is the holder's lease left: 0 when free, fairlock.NoExpiry
	// when the lock has no lease.
	Lease time.Duration
	// Token is the fencing token counter, the current holder's token while
	// the lock is held by a fair acquisition (0 when no acquisition ever
	// took a token).
	Token int64
	// QueueLen is how many waiters are queued; Waiters the first of them,
	// head first (as many as State was asked for).
	QueueLen int
	Waiters  []string
}

// State reads the lock's state (one read-only script, fair_state.lua, which
// writes nothing): its holder, hold count, lease left and fencing token,
// how many wait, and the first waiters (at most first, at most 1000),
// head first. It works on either engine and on a name used by Java
// Redisson clients. Its cost is O(1) plus O(first) on either engine.
//
// When the holder took the lock is not in Redis (Redisson's keys do not
// keep it, and writing it would cost every acquisition a write); the
// holder's own handle knows its hold (ValidUntil, and the Granted event of
// an Observer).
func (m *Mutex) State(ctx context.Context, first int) (State, error) {
	if m.m == nil {
		_, err := m.TryLock(ctx) // the zero Mutex's error
		return State{}, err
	}
	if ctx == nil {
		return State{}, fmt.Errorf("%w: nil context", fairlock.ErrInvalidValue)
	}
	if first < 0 {
		return State{}, fmt.Errorf("%w: first %d", fairlock.ErrInvalidValue, first)
	}
	r, err := m.m.S.Scripts().FairState(ctx, m.m.S.RDB, m.m.Keys, min(first, 1000))
	if err != nil {
		return State{}, fmt.Errorf("fairlock: state of %q: %w", m.m.Keys.Name, err)
	}
	st := State{QueueLen: int(r.Length), Waiters: r.Waiters, Token: r.Token}
	for _, h := range r.Holders {
		st.Owners = append(st.Owners, h.Owner)
	}
	if len(r.Holders) > 0 {
		st.Locked, st.Owner, st.HoldCount = true, r.Holders[0].Owner, int(r.Holders[0].Count)
		switch {
		case r.PTTLMs == -1:
			st.Lease = fairlock.NoExpiry
		case r.PTTLMs > 0:
			st.Lease = time.Duration(r.PTTLMs) * time.Millisecond
		}
	}
	return st, nil
}
