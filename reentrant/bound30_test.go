package reentrant_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/fenced"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/reentrant"
	"github.com/fairlock-go/fairlock/rwlock"
)

// Issue 30, section 1: a call's bound is a bound, with go-redis's default
// options (ReadTimeout 5 s in go-redis v9.23, 3 retries,
// ContextTimeoutEnabled off), on a
// stopped (SIGSTOP) server, a killed one and an address where nothing
// listens. The handles of every single lock run on internal/core's loops;
// each kind is checked here.

// locker is what the checks call on every kind of handle.
type locker interface {
	Lock(ctx context.Context) error
	LockWithLease(ctx context.Context, lease time.Duration) error
	TryLock(ctx context.Context) (bool, error)
	TryLockFor(ctx context.Context, wait, lease time.Duration) (bool, error)
	Unlock(ctx context.Context) error
	Done() <-chan struct{}
	Err() error
}

type kind struct {
	name string
	make func(c *fairlock.Client, name string) (locker, error)
}

var kinds = []kind{
	{"reentrant", func(c *fairlock.Client, name string) (locker, error) { return reentrant.New(c, name) }},
	{"fair", func(c *fairlock.Client, name string) (locker, error) {
		return fair.New(c, name, fair.WithEngine(fair.Redisson))
	}},
	{"fair-scalable", func(c *fairlock.Client, name string) (locker, error) {
		return fair.New(c, name, fair.WithEngine(fair.Scalable))
	}},
	{"fenced", func(c *fairlock.Client, name string) (locker, error) { return fenced.New(c, name) }},
	{"rwlock-write", func(c *fairlock.Client, name string) (locker, error) {
		rw, err := rwlock.New(c, name)
		if err != nil {
			return nil, err
		}
		return rw.WriteLock(), nil
	}},
}

func newLocker(t testing.TB, k kind, c *fairlock.Client, name string) locker {
	t.Helper()
	m, err := k.make(c, name)
	require.NoError(t, err)
	return m
}

// returnsWithin runs f on its own goroutine and waits for it at most
// limit; it fails the test (and returns false) when f is still blocked.
func returnsWithin(t *testing.T, limit time.Duration, what string, f func()) (time.Duration, bool) {
	t.Helper()
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); f() }()
	select {
	case <-done:
		return time.Since(start), true
	case <-time.After(limit):
		t.Errorf("%s: still blocked after %v", what, limit)
		return limit, false
	}
}

// Item 1: Lock(context.Background()) where no Redis ever answered never
// returned (still blocked at 60 s and 120 s). Its wait now ends when Redis
// has been unreachable for the outage budget, with an error matching
// ErrUnavailable that names the address and wraps the cause. Both kinds of
// absence: nothing listens (refused at once), and a stopped server (the
// kernel accepts the connection, nothing answers: each call lasts go-redis's
// read timeouts and retries).
func TestLockWhereRedisNeverAnsweredEndsAfterTheOutageBudget(t *testing.T) {
	redistest.Long(t)
	const budget = 2 * time.Second
	stopped := redistest.StartT(t)
	require.NoError(t, stopped.Pause())
	t.Cleanup(func() { _ = stopped.Resume() })
	for _, addr := range []struct {
		name, addr string
		call       time.Duration // one Redis call as the client bounds it
	}{
		{"refused", "127.0.0.1:1", 0},
		{"stopped", stopped.Addr, 25 * time.Second}, // 4 tries of a 5 s read timeout
	} {
		t.Run(addr.name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: addr.addr})
			t.Cleanup(func() { _ = rdb.Close() })
			c := newClient(t, rdb, fairlock.WithOutageBudget(budget))
			m := newLocker(t, kinds[0], c, redistest.Prefix(t)+"lock")
			var err error
			limit := budget + addr.call + 4*time.Second
			took, ok := returnsWithin(t, limit+20*time.Second, "Lock(Background)", func() { err = m.Lock(context.Background()) })
			if !ok {
				return
			}
			t.Logf("Lock(Background) returned after %v: %v", took, err)
			require.Error(t, err)
			assert.ErrorIs(t, err, fairlock.ErrUnavailable)
			assert.NotErrorIs(t, err, fairlock.ErrCanceled)
			assert.Contains(t, err.Error(), addr.addr, "the error names the address")
			assert.GreaterOrEqual(t, took, budget, "the wait ended before its budget: %v", err)
			assert.Less(t, took, limit, "Lock took %v: %v", took, err)
			var ne interface{ Timeout() bool }
			assert.True(t, errors.As(err, &ne) || strings.Contains(err.Error(), "refused"), "the cause is wrapped: %v", err)
		})
	}
}

// Item 1, the other side: a blip shorter than the budget is waited through:
// the waiter's attempts fail during it, and Lock returns nil once the lock
// is free. (With a budget shorter than the blip, 300 ms, this fails: Lock
// returns ErrUnavailable.)
func TestLockWaitsThroughABlipShorterThanTheOutageBudget(t *testing.T) {
	redistest.Long(t)
	srv := redistest.StartT(t)
	ctx := testCtx(t)
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			name := redistest.Prefix(t) + "lock"
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 500 * time.Millisecond})
			t.Cleanup(func() { _ = rdb.Close() })
			c := newClient(t, rdb, fairlock.WithOutageBudget(8*time.Second))
			holder := newLocker(t, k, newClient(t, srv.Backend().Client(t)), name)
			m := newLocker(t, k, c, name)
			// The holder's lease ends during the blip: m's next attempt
			// comes then, and fails until the server is back.
			require.NoError(t, holder.LockWithLease(ctx, time.Second))
			res := make(chan error, 1)
			go func() { res <- m.Lock(context.Background()) }()
			time.Sleep(300 * time.Millisecond) // m waits
			require.NoError(t, srv.Pause())
			time.Sleep(3 * time.Second) // several read timeouts of m's client
			require.NoError(t, srv.Resume())
			select {
			case err := <-res:
				require.NoError(t, err, "a blip shorter than the budget ended the wait")
				require.NoError(t, m.Unlock(ctx))
			case <-time.After(15 * time.Second):
				t.Fatal("Lock did not take the freed lock")
			}
		})
	}
}

// Item 2: TryLock ("one attempt, never waits") after a Lock of the same
// handle was cut short by its ctx while Redis was unreachable blocked until
// its own ctx ended (for ever with Background): it waited for the earlier
// call's background give-back. So did TryLockFor. Both now end within their
// bound (wait + one attempt timeout: go-redis's read timeout, at most
// 3 s),
// with an error matching ErrUnavailable while the give-back is pending (and
// Lock within the outage budget); the give-back still runs, and once it is done the handle acquires again.
func TestTryLockAfterACutLockIsBoundedByItsOwnAttempt(t *testing.T) {
	redistest.Long(t)
	for _, k := range []kind{kinds[0], kinds[1]} {
		t.Run(k.name, func(t *testing.T) {
			srv := redistest.StartT(t)
			name := redistest.Prefix(t) + "lock"
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { _ = rdb.Close() })
			const budget = 4 * time.Second
			c := newClient(t, rdb, fairlock.WithOutageBudget(budget))
			m := newLocker(t, k, c, name)
			holder := newLocker(t, k, newClient(t, srv.Backend().Client(t)), name)
			require.NoError(t, m.Lock(context.Background())) // warm: scripts loaded, connections open
			require.NoError(t, m.Unlock(context.Background()))
			require.NoError(t, holder.Lock(context.Background()))

			require.NoError(t, srv.Pause())
			resumed := false
			defer func() {
				if !resumed {
					_ = srv.Resume()
				}
			}()
			cut, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			err := m.Lock(cut) // its attempt is in flight when its ctx ends: a give-back follows
			cancel()
			require.ErrorIs(t, err, context.DeadlineExceeded)

			const attempt = 3 * time.Second // the attempt timeout: go-redis's read timeout, at most 3 s
			var ok bool
			took, fine := returnsWithin(t, attempt+20*time.Second, "TryLock", func() { ok, err = m.TryLock(context.Background()) })
			if fine {
				t.Logf("TryLock returned after %v: %v", took, err)
				assert.False(t, ok)
				assert.ErrorIs(t, err, fairlock.ErrUnavailable, "the pending give-back is reported")
				assert.Less(t, took, attempt+3*time.Second, "TryLock took %v: %v", took, err)
			}
			const wait = time.Second
			took, fine = returnsWithin(t, wait+attempt+20*time.Second, "TryLockFor", func() { ok, err = m.TryLockFor(context.Background(), wait, 0) })
			if fine {
				t.Logf("TryLockFor(%v) returned after %v: %v", wait, took, err)
				assert.False(t, ok)
				assert.Error(t, err)
				assert.Less(t, took, wait+attempt+3*time.Second, "TryLockFor(%v) took %v: %v", wait, took, err)
			}
			// Lock has no wait of its own: its wait for the give-back counts
			// against the outage budget.
			took, fine = returnsWithin(t, budget+20*time.Second, "Lock", func() { err = m.Lock(context.Background()) })
			if fine {
				t.Logf("Lock returned after %v: %v", took, err)
				assert.ErrorIs(t, err, fairlock.ErrUnavailable)
				assert.Less(t, took, budget+3*time.Second, "Lock took %v: %v", took, err)
			}

			require.NoError(t, srv.Resume())
			resumed = true
			require.NoError(t, holder.Unlock(context.Background()))
			// The give-back went on: the handle acquires again (one hold:
			// one Unlock frees the lock for another owner).
			ok, err = m.TryLockFor(context.Background(), 20*time.Second, 0)
			require.NoError(t, err)
			require.True(t, ok)
			require.NoError(t, m.Unlock(context.Background()))
			ok, err = holder.TryLock(context.Background())
			require.NoError(t, err)
			require.True(t, ok, "the lock is free after one Unlock")
			require.NoError(t, holder.Unlock(context.Background()))
		})
	}
}

// Item 3: TryLockFor(wait = 1 s) on a stopped server returned after 7-12 s
// (fair, reentrant, fenced): its attempt ran inline (a Background ctx) or
// until go-redis's retries gave up. Every timed call now ends within
// wait + one attempt timeout (the client's read timeout, at most 3 s),
// with an error matching ErrUnavailable; TryLock's wait is 0.
func TestTimedCallsOnAStoppedServerEndWithinWaitPlusAttemptTimeout(t *testing.T) {
	redistest.Long(t)
	const attempt = 3 * time.Second
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			srv := redistest.StartT(t)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { _ = rdb.Close() })
			c := newClient(t, rdb)
			name := redistest.Prefix(t) + "lock"
			warm := newLocker(t, k, c, name)
			require.NoError(t, warm.Lock(context.Background()))
			require.NoError(t, warm.Unlock(context.Background()))
			require.NoError(t, srv.Pause())
			t.Cleanup(func() { _ = srv.Resume() })
			for _, wait := range []time.Duration{time.Second, 0} {
				m := newLocker(t, k, c, name) // a fresh handle: no give-back of another call to wait for
				var ok bool
				var err error
				call := func() { ok, err = m.TryLockFor(context.Background(), wait, 0) }
				if wait == 0 {
					call = func() { ok, err = m.TryLock(context.Background()) }
				}
				took, fine := returnsWithin(t, wait+attempt+20*time.Second, "TryLockFor", call)
				if !fine {
					continue
				}
				t.Logf("wait %v: returned after %v: %v", wait, took, err)
				assert.False(t, ok)
				assert.ErrorIs(t, err, fairlock.ErrUnavailable, "wait %v", wait)
				assert.Less(t, took, wait+attempt+time.Second, "wait %v: took %v: %v", wait, took, err)
			}
		})
	}
}

// Item 4: Unlock of a hold that Done and Err already reported lost (the
// server was killed) took 10.9 s (lease 3 s) or 33 s (the default lease) to
// return "not confirmed": it waited for the background give-back of the
// lost hold's field. It now returns at once with an error matching ErrLost
// and ErrNotHeld;
// the give-back goes on in the background.
func TestUnlockOfAHoldReportedLostReturnsAtOnce(t *testing.T) {
	redistest.Long(t)
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			srv := redistest.StartT(t)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { _ = rdb.Close() })
			const lease = 3 * time.Second
			c := newClient(t, rdb, fairlock.WithLease(lease))
			m := newLocker(t, k, c, redistest.Prefix(t)+"lock")
			require.NoError(t, m.Lock(context.Background()))
			srv.Stop()
			select {
			case <-m.Done():
			case <-time.After(lease + 10*time.Second):
				t.Fatal("the hold of a killed server was not reported lost")
			}
			require.ErrorIs(t, m.Err(), fairlock.ErrLost)
			var err error
			took, ok := returnsWithin(t, 60*time.Second, "Unlock", func() { err = m.Unlock(context.Background()) })
			if !ok {
				return
			}
			t.Logf("Unlock returned after %v: %v", took, err)
			assert.ErrorIs(t, err, fairlock.ErrLost)
			assert.ErrorIs(t, err, fairlock.ErrNotHeld)
			assert.Less(t, took, time.Second, "Unlock of a hold reported lost took %v: %v", took, err)
			// Closing the client stops the background clean-up within its bound.
			took, _ = returnsWithin(t, 30*time.Second, "Close", func() { _ = c.Close() })
			assert.Less(t, took, 10*time.Second)
		})
	}
}
