package reentrant_test

// The holder always knows: each test here injects a real fault (a stalled
// connection through a proxy, a stopped server process, a restart, a bad
// key) and checks the lock's promise against what another owner can do, not
// against the library's own bookkeeping.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/faultproxy"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/reentrant"
)

// validUntil is the holder's own statement of how long its hold is valid
// (zero when it makes none).
func validUntil(m *reentrant.Mutex) time.Time {
	if v, ok := any(m).(interface{ ValidUntil() time.Time }); ok {
		return v.ValidUntil()
	}
	return time.Time{}
}

// believedUntil watches m's current hold and reports when the holder stopped
// believing it valid: the earlier of the last validity it stated and the
// moment Done was seen closed.
func believedUntil(m *reentrant.Mutex) <-chan time.Time {
	out := make(chan time.Time, 1)
	done := m.Done()
	go func() {
		last := validUntil(m)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				end := time.Now()
				if !last.IsZero() && last.Before(end) {
					end = last
				}
				out <- end
				return
			case <-tick.C:
				if v := validUntil(m); !v.IsZero() {
					last = v
				}
			}
		}
	}()
	return out
}

// acquiredAt polls TryLock on m until it succeeds and reports when its call
// returned.
func acquiredAt(ctx context.Context, t *testing.T, m *reentrant.Mutex) time.Time {
	for {
		ok, err := m.TryLock(ctx)
		if err == nil && ok {
			return time.Now()
		}
		if ctx.Err() != nil {
			t.Fatalf("never acquired: %v", ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Case 1: a stall longer than go-redis's read timeout makes go-redis resend
// the acquisition; Redis runs every copy once the stall ends. One Lock must
// still be one hold, and one Unlock must free the lock.
func TestStalledAcquisitionCountsOnce(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	p := faultproxy.Start(t, b.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, ReadTimeout: 400 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	name := redistest.Prefix(t) + "lock"
	m := newMutex(t, newClient(t, rdb), name)
	// Load the scripts and open a pooled connection before the stall.
	require.NoError(t, m.Lock(ctx))
	require.NoError(t, m.Unlock(ctx))

	undo := p.Stall()
	got := make(chan error, 1)
	go func() { got <- m.Lock(ctx) }()
	time.Sleep(600 * time.Millisecond) // past one read timeout: go-redis resends
	undo()
	require.NoError(t, <-got)
	direct := b.Client(t)
	assert.Equal(t, "1", direct.HGet(ctx, name, m.Owner()).Val(), "one Lock, one hold")
	require.NoError(t, m.Unlock(ctx))
	assert.Zero(t, direct.Exists(ctx, name).Val(), "one Unlock frees the lock")
}

// A Lock that gives up during a stall must leave nothing behind once the
// stalled copies reach Redis: no hold that nobody knows about.
func TestAbandonedAcquisitionLeavesNoHold(t *testing.T) {
	b := redistest.Real(t)
	p := faultproxy.Start(t, b.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	name := redistest.Prefix(t) + "lock"
	c := newClient(t, rdb, fairlock.WithCleanupTimeout(time.Second))
	m := newMutex(t, c, name)
	require.NoError(t, rdb.Ping(context.Background()).Err())

	undo := p.Stall()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	err := m.Lock(ctx)
	cancel()
	require.Error(t, err)
	undo() // the stalled copies (and the library's cleanup) now reach Redis
	direct := b.Client(t)
	// The lease is 30 s: a ghost hold would still be there at the end of this wait.
	assert.Eventually(t, func() bool { return direct.Exists(context.Background(), name).Val() == 0 },
		10*time.Second, 50*time.Millisecond, "a hold taken by an abandoned request is given back")
}

// Case 2: a ctx deadline bounds every call, with go-redis's default settings
// (ContextTimeoutEnabled off, read timeout 3 s, 3 retries), on a stopped
// server and on a refused address.
//
// Both client settings: without ContextTimeoutEnabled each call runs on a
// goroutine of its own; with it, a call whose ctx has a deadline runs
// inline, bounded by go-redis at the deadline (call.go).
func TestContextBoundsCallsOnAStoppedServer(t *testing.T) {
	redistest.Long(t)
	for _, enforced := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", enforced), func(t *testing.T) {
			testContextBoundsCallsOnAStoppedServer(t, enforced)
		})
	}
}

func testContextBoundsCallsOnAStoppedServer(t *testing.T, enforced bool) {
	srv := redistest.StartT(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: enforced})
	t.Cleanup(func() { _ = rdb.Close() })
	// A long cleanup timeout: the calls that acquire or read must return
	// when their ctx ends, not when the give-back of what they abandoned
	// is done (it goes on in the background); Unlock alone finishes its
	// release on a fresh context, within the cleanup timeout.
	cleanup := 5 * time.Second
	c := newClient(t, rdb, fairlock.WithCleanupTimeout(cleanup))
	m := newMutex(t, c, "lock")
	require.NoError(t, rdb.Ping(context.Background()).Err())
	require.NoError(t, srv.Pause())
	t.Cleanup(func() { _ = srv.Resume() })

	const deadline = 300 * time.Millisecond
	slack := time.Second // a loaded machine; the promise is about 50 ms
	calls := map[string]func(ctx context.Context) error{
		"Lock": m.Lock,
		"TryLock": func(ctx context.Context) error {
			_, err := m.TryLock(ctx)
			return err
		},
		"IsLocked": func(ctx context.Context) error {
			_, err := m.IsLocked(ctx)
			return err
		},
		"Unlock": m.Unlock,
	}
	for name, call := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		start := time.Now()
		err := call(ctx)
		took := time.Since(start)
		cancel()
		assert.Error(t, err, name)
		bound := deadline + slack
		if name == "Unlock" {
			bound += cleanup
		}
		assert.Less(t, took, bound, "%s took %v with a %v deadline", name, took, deadline)
	}
}

func TestContextBoundsCallsOnARefusedAddress(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	m := newMutex(t, newClient(t, rdb, fairlock.WithCleanupTimeout(5*time.Second)), "lock")
	const deadline = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	err := m.Lock(ctx)
	require.Error(t, err)
	// A refused connection is transient: the wait goes on until its ctx
	// ends.
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), deadline+time.Second)
}

// Case 3: with Redis stalled, the holder stops believing in its hold before
// another owner can have it: its last stated validity (or the moment Done
// closed) comes before the other owner's acquisition, on any client setting,
// even ReadTimeout -1 (reads that never time out).
func TestHolderKnowsBeforeAnotherOwnerAcquires(t *testing.T) {
	redistest.Long(t)
	for _, readTimeout := range []time.Duration{0, -1} {
		t.Run("ReadTimeout="+readTimeout.String(), func(t *testing.T) {
			b := redistest.Real(t)
			ctx := testCtx(t)
			p := faultproxy.Start(t, b.Addr)
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr, ReadTimeout: readTimeout})
			t.Cleanup(func() { _ = rdb.Close() })
			lease := 3 * time.Second
			name := redistest.Prefix(t) + "lock"
			holder := newMutex(t, newClient(t, rdb, fairlock.WithLease(lease)), name)
			other := newMutex(t, newClient(t, b.Client(t)), name)
			require.NoError(t, holder.Lock(ctx))
			believed := believedUntil(holder)

			undo := p.Stall() // the holder's renewals no longer reach Redis
			defer undo()
			took := acquiredAt(ctx, t, other)
			var end time.Time
			select {
			case end = <-believed:
			case <-time.After(lease + 5*time.Second):
				t.Fatal("the holder was never told its lock was lost")
			}
			assert.True(t, end.Before(took), "holder believed until %v, other owner acquired at %v (%v earlier)",
				end.Format("15:04:05.000"), took.Format("15:04:05.000"), end.Sub(took))
			assert.ErrorIs(t, holder.Err(), fairlock.ErrLost)
			require.NoError(t, other.Unlock(ctx))
		})
	}
}

// Case 3, data loss: after a restart without persistence the holder is told
// within one renewal period (lease/3) plus a call, as docs/design.md states.
func TestHolderToldWithinARenewalPeriodAfterDataLoss(t *testing.T) {
	srv := redistest.StartT(t)
	ctx := testCtx(t)
	lease := 6 * time.Second
	m := newMutex(t, newClient(t, srv.Backend().Client(t), fairlock.WithLease(lease)), "lock")
	require.NoError(t, m.Lock(ctx))
	require.NoError(t, srv.Restart())
	restarted := time.Now()
	select {
	case <-m.Done():
	case <-time.After(lease/3 + 5*time.Second):
		t.Fatal("the holder was not told within a renewal period")
	}
	t.Logf("told %v after the restart", time.Since(restarted))
	assert.ErrorIs(t, m.Err(), fairlock.ErrLost)
}

// Case 4: one key overwritten with another type fails only itself; the
// other locks renewed in the same batch stay held.
func TestOneBadKeyFailsOnlyItself(t *testing.T) {
	redistest.Long(t)
	b := redistest.Real(t)
	ctx := testCtx(t)
	lease := 3 * time.Second
	c := newClient(t, b.Client(t), fairlock.WithLease(lease))
	rdb := b.Client(t)
	var ms []*reentrant.Mutex
	for i := range 10 {
		m := newMutex(t, c, redistest.Prefix(t)+strconv.Itoa(i))
		require.NoError(t, m.Lock(ctx))
		ms = append(ms, m)
	}
	require.NoError(t, rdb.Set(ctx, ms[0].Name(), "not a hash", 0).Err())
	select {
	case <-ms[0].Done():
	case <-time.After(lease + 5*time.Second):
		t.Fatal("the overwritten lock was never reported lost")
	}
	time.Sleep(lease) // three more renewal rounds
	for _, m := range ms[1:] {
		select {
		case <-m.Done():
			t.Errorf("%s reported lost: %v", m.Name(), m.Err())
		default:
		}
		held, err := m.IsHeld(ctx)
		require.NoError(t, err)
		assert.True(t, held, m.Name())
		require.NoError(t, m.Unlock(ctx))
	}
}

// Case 5: Close is a lifecycle event. Holds end (Done closed, Err matching
// ErrClosed) and are released; waits return ErrClosed and never succeed
// later; nothing hangs.
func TestCloseEndsHoldsAndWaits(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	name := redistest.Prefix(t) + "lock"
	other := redistest.Prefix(t) + "other"
	c, err := fairlock.NewClient(b.Client(t))
	require.NoError(t, err)
	blocker := newMutex(t, newClient(t, b.Client(t)), other)
	require.NoError(t, blocker.Lock(ctx))

	held := newMutex(t, c, name)
	require.NoError(t, held.Lock(ctx))
	waiter := newMutex(t, c, other)
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(ctx) }()
	waitSubscribed(t, b, c)

	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		t.Fatal("Close hangs")
	}
	select {
	case <-held.Done():
	default:
		t.Fatal("a hold outlives Close")
	}
	assert.ErrorIs(t, held.Err(), fairlock.ErrClosed)
	// Close returns once the wait's acquisition has ended; the Lock call
	// returns right after, on its own goroutine, which the scheduler may
	// run a little later (160 µs after Close in a red CI run under -race):
	// wait for it, boundedly. Nothing but Close ends this wait (the blocker
	// holds the lock, ctx is the test's).
	select {
	case err := <-got:
		assert.ErrorIs(t, err, fairlock.ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("a wait outlives Close")
	}
	rdb := b.Client(t)
	assert.Zero(t, rdb.Exists(ctx, name).Val(), "a lock held at Close is released")
	// The wait must not take the lock later.
	require.NoError(t, blocker.Unlock(ctx))
	time.Sleep(time.Second)
	assert.Zero(t, rdb.Exists(ctx, other).Val(), "a wait ended by Close never takes the lock")
}

// A waiter whose subscription is not yet confirmed when Close is called
// (its pub/sub connection stalled) returns promptly too.
func TestCloseEndsAWaitWhoseSubscriptionIsPending(t *testing.T) {
	redistest.Long(t)
	b := redistest.Real(t)
	ctx := testCtx(t)
	name := redistest.Prefix(t) + "lock"
	blocker := newMutex(t, newClient(t, b.Client(t)), name)
	require.NoError(t, blocker.Lock(ctx))
	p := faultproxy.Start(t, b.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := fairlock.NewClient(rdb)
	require.NoError(t, err)
	m := newMutex(t, c, name)
	ok, err := m.TryLock(ctx) // opens a pooled connection before the stall
	require.NoError(t, err)
	require.False(t, ok)
	undo := p.Stall()
	defer undo()
	got := make(chan error, 1)
	go func() { got <- m.Lock(ctx) }()
	time.Sleep(500 * time.Millisecond)
	go func() { _ = c.Close() }()
	select {
	case err := <-got:
		assert.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a wait with a pending subscription outlives Close")
	}
	require.NoError(t, blocker.Unlock(ctx))
}

// Case 6: re-entering a watchdog-kept hold with a shorter explicit lease
// must not shorten the key's TTL: nobody else may take the lock while the
// first hold believes itself valid.
func TestReentryWithShorterLeaseKeepsTheWatchdogHold(t *testing.T) {
	redistest.Long(t)
	b := redistest.Real(t)
	ctx := testCtx(t)
	name := redistest.Prefix(t) + "lock"
	m := newMutex(t, newClient(t, b.Client(t)), name)
	other := newMutex(t, newClient(t, b.Client(t)), name)
	require.NoError(t, m.Lock(ctx))
	require.NoError(t, m.LockWithLease(ctx, time.Second))
	time.Sleep(2500 * time.Millisecond)
	select {
	case <-m.Done():
		t.Fatalf("the watchdog hold ended: %v", m.Err())
	default:
	}
	ok, err := other.TryLock(ctx)
	require.NoError(t, err)
	assert.False(t, ok, "another owner took a lock whose holder believes it valid")
	if ok {
		require.NoError(t, other.Unlock(ctx))
	}
	require.NoError(t, m.Unlock(ctx))
	require.NoError(t, m.Unlock(ctx))
}

// Case 9: a clean Unlock leaves Err nil, however the watchdog's renewals
// interleave with it (a short watchdog lease makes them frequent).
func TestErrIsNilAfterACleanUnlock(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	c := newClient(t, b.Client(t), fairlock.WithLease(30*time.Millisecond))
	var wg sync.WaitGroup
	bad := make(chan string, 1000)
	for g := range 4 {
		m := newMutex(t, c, redistest.Prefix(t)+strconv.Itoa(g))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 250 {
				if err := m.Lock(ctx); err != nil {
					bad <- "lock: " + err.Error()
					return
				}
				if err := m.Unlock(ctx); err != nil {
					continue // the hold really was lost first: allowed
				}
				if err := m.Err(); err != nil {
					bad <- "Err after a clean Unlock: " + err.Error()
				}
			}
		}()
	}
	wg.Wait()
	close(bad)
	n := 0
	for s := range bad {
		if n < 3 {
			t.Error(s)
		}
		n++
	}
	assert.Zero(t, n, "cycles with an error after a clean unlock (of 1000)")
}

// Case 9, bad input: a nil context is an error on every method, typed-nil
// Redis clients are refused, and a zero Client does not panic.
func TestNilAndZeroValues(t *testing.T) {
	b := redistest.Mini(t)
	c := newClient(t, b.Client(t))
	m := newMutex(t, c, "x")
	var nilCtx context.Context
	checks := map[string]func() error{
		"Lock":   func() error { return m.Lock(nilCtx) },
		"Unlock": func() error { return m.Unlock(nilCtx) },
		"TryLock": func() error {
			_, err := m.TryLock(nilCtx)
			return err
		},
		"IsLocked": func() error {
			_, err := m.IsLocked(nilCtx)
			return err
		},
		"IsHeld": func() error {
			_, err := m.IsHeld(nilCtx)
			return err
		},
		"HoldCount": func() error {
			_, err := m.HoldCount(nilCtx)
			return err
		},
		"RemainingLease": func() error {
			_, err := m.RemainingLease(nilCtx)
			return err
		},
		"ForceUnlock": func() error {
			_, err := m.ForceUnlock(nilCtx)
			return err
		},
	}
	for name, f := range checks {
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					err = errors.New("panic")
				}
			}()
			err = f()
		}()
		assert.ErrorIs(t, err, fairlock.ErrInvalidValue, name)
	}

	var typedNil *redis.Client
	_, err := fairlock.NewClient(typedNil)
	assert.ErrorIs(t, err, fairlock.ErrInvalidValue, "typed-nil *redis.Client")
	var typedNilCluster *redis.ClusterClient
	_, err = fairlock.NewClient(typedNilCluster)
	assert.ErrorIs(t, err, fairlock.ErrInvalidValue, "typed-nil *redis.ClusterClient")

	assert.NotPanics(t, func() { _ = (&fairlock.Client{}).Close() })
	assert.NotPanics(t, func() { _ = (&fairlock.Client{}).ID() })
	_, err = reentrant.New(&fairlock.Client{}, "x")
	assert.ErrorIs(t, err, fairlock.ErrInvalidValue, "a zero Client")
}
