package reentrant_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/reentrant"
)

func TestMain(m *testing.M) { os.Exit(redistest.MainLeakCheck(m)) }

func newClient(t testing.TB, rdb redis.UniversalClient, opts ...fairlock.Option) *fairlock.Client {
	t.Helper()
	c, err := fairlock.NewClient(rdb, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newMutex(t testing.TB, c *fairlock.Client, name string) *reentrant.Mutex {
	t.Helper()
	m, err := reentrant.New(c, name)
	require.NoError(t, err)
	return m
}

// testCtx bounds a test: a wait that never ends fails the test instead of
// hanging it.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestMutualExclusion(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// 150 passes through the lock: bounded by a minute rather than
		// testCtx's 20 s, which a loaded machine can use up.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		name := redistest.Prefix(t) + "lock"
		counter := redistest.Prefix(t) + "counter"
		const clients, goroutines, rounds = 3, 10, 5
		var wg sync.WaitGroup
		errs := make(chan error, clients*goroutines)
		for i := 0; i < clients; i++ {
			rdb := b.Client(t)
			c := newClient(t, rdb)
			for g := 0; g < goroutines; g++ {
				m := newMutex(t, c, name)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for r := 0; r < rounds; r++ {
						if err := m.Lock(ctx); err != nil {
							errs <- err
							return
						}
						// read-modify-write in two round trips: without
						// the lock, concurrent increments get lost
						v, _ := rdb.Get(ctx, counter).Int()
						rdb.Set(ctx, counter, v+1, 0)
						if err := m.Unlock(ctx); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		got, err := b.Client(t).Get(ctx, counter).Int()
		require.NoError(t, err)
		assert.Equal(t, clients*goroutines*rounds, got)
	})
}

func TestReentrancy(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		c := newClient(t, b.Client(t))
		name := redistest.Prefix(t) + "lock"
		m := newMutex(t, c, name)
		other := newMutex(t, c, name)
		for i := 1; i <= 3; i++ {
			require.NoError(t, m.Lock(ctx))
			n, err := m.HoldCount(ctx)
			require.NoError(t, err)
			assert.Equal(t, i, n)
		}
		ok, err := other.TryLock(ctx)
		require.NoError(t, err)
		assert.False(t, ok, "another owner must not get a held lock")
		for i := 2; i >= 0; i-- {
			require.NoError(t, m.Unlock(ctx))
			n, err := m.HoldCount(ctx)
			require.NoError(t, err)
			assert.Equal(t, i, n)
		}
		locked, err := m.IsLocked(ctx)
		require.NoError(t, err)
		assert.False(t, locked)
		assert.True(t, errors.Is(m.Unlock(ctx), reentrant.ErrNotHeld))
		ok, err = other.TryLock(ctx)
		require.NoError(t, err)
		assert.True(t, ok)
		require.NoError(t, other.Unlock(ctx))
	})
}

func TestUnlockByNonOwnerChangesNothing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		c := newClient(t, rdb)
		name := redistest.Prefix(t) + "lock"
		m, stranger := newMutex(t, c, name), newMutex(t, c, name)
		require.NoError(t, m.LockWithLease(ctx, time.Minute))
		before := rdb.HGetAll(ctx, name).Val()
		err := stranger.Unlock(ctx)
		assert.True(t, errors.Is(err, reentrant.ErrNotHeld), "%v", err)
		assert.Equal(t, before, rdb.HGetAll(ctx, name).Val())
		held, err := m.IsHeld(ctx)
		require.NoError(t, err)
		assert.True(t, held)
		require.NoError(t, m.Unlock(ctx))
	})
}

func TestLeaseExpiryFreesLock(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		c := newClient(t, b.Client(t))
		name := redistest.Prefix(t) + "lock"
		m, other := newMutex(t, c, name), newMutex(t, c, name)
		// Long enough that it cannot run out before RemainingLease reads
		// it on a loaded machine; redis-server waits it out for real.
		lease := 2 * time.Second
		require.NoError(t, m.LockWithLease(ctx, lease))
		d, err := m.RemainingLease(ctx)
		require.NoError(t, err)
		assert.True(t, d > 0 && d <= lease, "remaining lease %v", d)
		if b.Mini != nil {
			b.Mini.FastForward(lease)
		}
		ok, err := other.TryLockFor(ctx, 10*time.Second, time.Minute)
		require.NoError(t, err)
		assert.True(t, ok, "the lock must be free once its lease ran out")
		<-m.Done() // the expired holder is told its lease ran out
		assert.True(t, errors.Is(m.Err(), reentrant.ErrLost))
		require.NoError(t, other.Unlock(ctx))
	})
}

// A waiter sleeps until the holder's lease runs out unless the unlock
// message wakes it: with a 1-minute lease, only the wake-up lets it in
// before the test's 20 s bound.
func TestUnlockWakesWaiter(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		holderC, waiterC := newClient(t, b.Client(t)), newClient(t, b.Client(t))
		name := redistest.Prefix(t) + "lock"
		holder, waiter := newMutex(t, holderC, name), newMutex(t, waiterC, name)
		require.NoError(t, holder.LockWithLease(ctx, time.Minute))
		got := make(chan error, 1)
		go func() { got <- waiter.Lock(ctx) }()
		waitSubscribed(t, b, waiterC)
		require.NoError(t, holder.Unlock(ctx))
		require.NoError(t, <-got)
		require.NoError(t, waiter.Unlock(ctx))
	})
}

// waitSubscribed waits until c's shared subscription has a channel.
func waitSubscribed(t testing.TB, b *redistest.Backend, c *fairlock.Client) {
	t.Helper()
	s := core.Of(c)
	require.Eventually(t, func() bool { return s.WaitChannels() > 0 }, 10*time.Second, time.Millisecond)
}

func TestCanceledWaitLeavesNothing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		c := newClient(t, rdb)
		name := redistest.Prefix(t) + "lock"
		holder, waiter := newMutex(t, c, name), newMutex(t, c, name)
		require.NoError(t, holder.Lock(ctx))

		wctx, cancel := context.WithCancel(ctx)
		got := make(chan error, 1)
		go func() { got <- waiter.Lock(wctx) }()
		waitSubscribed(t, b, c)
		cancel()
		err := <-got
		assert.True(t, errors.Is(err, reentrant.ErrCanceled), "%v", err)
		assert.True(t, errors.Is(err, context.Canceled), "%v", err)
		assert.Equal(t, 0, core.Of(c).WaitChannels(), "subscription left behind")
		held, err := waiter.IsHeld(ctx)
		require.NoError(t, err)
		assert.False(t, held)

		dctx, dcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer dcancel()
		err = waiter.Lock(dctx)
		assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
		assert.True(t, errors.Is(err, reentrant.ErrCanceled), "%v", err)
		require.NoError(t, holder.Unlock(ctx))
		keys, _ := rdb.Keys(ctx, name+"*").Result()
		assert.Empty(t, keys)
	})
}

func TestUnlockWithCanceledContextReleases(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		c := newClient(t, b.Client(t))
		m := newMutex(t, c, redistest.Prefix(t)+"lock")
		require.NoError(t, m.Lock(ctx))
		dead, cancel := context.WithCancel(ctx)
		cancel()
		require.NoError(t, m.Unlock(dead))
		locked, err := m.IsLocked(ctx)
		require.NoError(t, err)
		assert.False(t, locked)
	})
}

func TestBadInput(t *testing.T) {
	b := redistest.Mini(t)
	c := newClient(t, b.Client(t))
	ctx := testCtx(t)
	for _, name := range []string{"", "a{b", "x}y", "{}"} {
		_, err := reentrant.New(c, name)
		assert.True(t, errors.Is(err, reentrant.ErrInvalidName), "%q: %v", name, err)
	}
	_, err := reentrant.New(nil, "x")
	assert.True(t, errors.Is(err, reentrant.ErrInvalidValue), "%v", err)
	_, err = reentrant.New(c, "x", reentrant.WithThreadID(-1))
	assert.True(t, errors.Is(err, reentrant.ErrInvalidValue), "%v", err)
	_, err = fairlock.NewClient(nil)
	assert.True(t, errors.Is(err, fairlock.ErrInvalidValue), "%v", err)
	_, err = fairlock.NewClient(b.Client(t), fairlock.WithLease(-time.Second))
	assert.True(t, errors.Is(err, fairlock.ErrInvalidValue), "%v", err)

	m := newMutex(t, c, "x")
	assert.True(t, errors.Is(m.LockWithLease(ctx, -time.Second), reentrant.ErrInvalidValue))
	_, err = m.TryLockFor(ctx, -time.Second, 0)
	assert.True(t, errors.Is(err, reentrant.ErrInvalidValue), "%v", err)
	_, err = m.TryLockFor(ctx, time.Second, -time.Second)
	assert.True(t, errors.Is(err, reentrant.ErrInvalidValue), "%v", err)
	assert.Empty(t, b.Mini.Keys(), "bad input must change nothing")

	dead, cancel := context.WithCancel(ctx)
	cancel()
	err = m.Lock(dead)
	assert.True(t, errors.Is(err, context.Canceled) && errors.Is(err, reentrant.ErrCanceled), "%v", err)
	assert.Empty(t, b.Mini.Keys())
}

func TestUnreachableRedis(t *testing.T) {
	redistest.Long(t)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	m := newMutex(t, c, "x")
	// Only a bound: go-redis spends about two seconds retrying the dial
	// before Lock sees the refusal, longer on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := m.Lock(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "connection refused")
	_, err = m.TryLock(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "connection refused")
}

func TestClosedClient(t *testing.T) {
	b := redistest.Mini(t)
	c := newClient(t, b.Client(t))
	m := newMutex(t, c, "x")
	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "Close twice is fine")
	err := m.Lock(testCtx(t))
	assert.True(t, errors.Is(err, fairlock.ErrClosed), "%v", err)
}

func TestForceUnlockWakesWaiter(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		c := newClient(t, b.Client(t))
		name := redistest.Prefix(t) + "lock"
		holder, waiter, admin := newMutex(t, c, name), newMutex(t, c, name), newMutex(t, c, name)
		require.NoError(t, holder.LockWithLease(ctx, time.Minute))
		got := make(chan error, 1)
		go func() { got <- waiter.Lock(ctx) }()
		waitSubscribed(t, b, c)
		ok, err := admin.ForceUnlock(ctx)
		require.NoError(t, err)
		assert.True(t, ok)
		require.NoError(t, <-got)
		ok, err = admin.ForceUnlock(ctx)
		require.NoError(t, err)
		assert.True(t, ok)
		ok, err = admin.ForceUnlock(ctx)
		require.NoError(t, err)
		assert.False(t, ok)
	})
}

// --- real redis-server only: these need Redis's own clock to run ---

func TestWatchdogKeepsLockAcrossLeases(t *testing.T) {
	redistest.Long(t)
	b := redistest.Real(t)
	ctx := testCtx(t)
	// Renewed every second; a renewal may come two seconds late before
	// the lease runs out, so a loaded machine does not lose the lock.
	lease := 3 * time.Second
	c := newClient(t, b.Client(t), fairlock.WithLease(lease))
	name := redistest.Prefix(t) + "lock"
	m, other := newMutex(t, c, name), newMutex(t, c, name)
	require.NoError(t, m.Lock(ctx))
	wd := core.Of(c).Watchdog
	assert.Equal(t, 1, wd.Len())
	// Another owner waits one and a half leases (past the first lease,
	// over four renewal periods): it must not get the lock, and the
	// holder must not be told it lost it.
	ok, err := other.TryLockFor(ctx, lease+lease/2, 0)
	require.NoError(t, err)
	assert.False(t, ok, "the watchdog must keep the lock past its lease")
	select {
	case <-m.Done():
		t.Fatalf("hold ended: %v", m.Err())
	default:
	}
	require.NoError(t, m.Unlock(ctx))
	assert.Equal(t, 0, wd.Len(), "the watchdog must stop after Unlock")
	assert.NoError(t, m.Err())
}

func TestCloseStopsWatchdogAndLockExpires(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	lease := 300 * time.Millisecond
	dying := newClient(t, b.Client(t), fairlock.WithLease(lease))
	name := redistest.Prefix(t) + "lock"
	m := newMutex(t, dying, name)
	require.NoError(t, m.Lock(ctx))
	require.NoError(t, dying.Close()) // the client dies without unlocking
	live := newClient(t, b.Client(t))
	other := newMutex(t, live, name)
	require.NoError(t, other.Lock(ctx), "the lock must free itself after the lease")
	require.NoError(t, other.Unlock(ctx))
}

func TestLostSignalWhenKeyDeleted(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	rdb := b.Client(t)
	c := newClient(t, rdb, fairlock.WithLease(300*time.Millisecond))
	name := redistest.Prefix(t) + "lock"
	m := newMutex(t, c, name)
	require.NoError(t, m.Lock(ctx))
	require.NoError(t, rdb.Del(ctx, name).Err()) // behind the holder's back
	select {
	case <-m.Done():
	case <-ctx.Done():
		t.Fatal("the holder was never told its lock was lost")
	}
	assert.True(t, errors.Is(m.Err(), reentrant.ErrLost), "%v", m.Err())
	assert.Equal(t, 0, core.Of(c).Watchdog.Len())
	assert.True(t, errors.Is(m.Unlock(ctx), reentrant.ErrNotHeld))
}

func TestLostSignalWhenRedisRestarts(t *testing.T) {
	srv := redistest.StartT(t)
	ctx := testCtx(t)
	rdb := srv.Backend().Client(t)
	c := newClient(t, rdb, fairlock.WithLease(600*time.Millisecond))
	m := newMutex(t, c, "lock")
	require.NoError(t, m.Lock(ctx))
	require.NoError(t, srv.Restart()) // no persistence: the lock is gone
	select {
	case <-m.Done():
	case <-ctx.Done():
		t.Fatal("the holder was never told its lock was lost")
	}
	assert.True(t, errors.Is(m.Err(), reentrant.ErrLost), "%v", m.Err())
}

func TestManyLocksOneWatchdogBatch(t *testing.T) {
	redistest.Long(t)
	b := redistest.Real(t)
	ctx := testCtx(t)
	rdb := b.Client(t)
	// 25 locks renewed 7 per call: four calls a round. The lease is long
	// enough (renewed every second) that a renewal arriving late on a
	// loaded machine still saves it.
	lease := 3 * time.Second
	c := newClient(t, b.Client(t), fairlock.WithLease(lease), fairlock.WithRenewBatch(7))
	var ms []*reentrant.Mutex
	for i := 0; i < 25; i++ {
		m := newMutex(t, c, redistest.Prefix(t)+strconv.Itoa(i))
		require.NoError(t, m.Lock(ctx))
		ms = append(ms, m)
	}
	// Watch every lock's PTTL in Redis until each has gone back up (a
	// renewal) twice: every batch is renewed, round after round. None may
	// expire meanwhile.
	renewals := make([]int, len(ms))
	last := make([]int64, len(ms))
	for {
		cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, m := range ms {
				p.Do(ctx, "pttl", m.Name())
			}
			return nil
		})
		require.NoError(t, err, "renewals seen so far: %v", renewals)
		done := true
		for i, cmd := range cmds {
			pttl, err := cmd.(*redis.Cmd).Int64()
			require.NoError(t, err)
			require.Positive(t, pttl, "%s expired or lost its lease (renewals seen: %v)", ms[i].Name(), renewals)
			if last[i] > 0 && pttl > last[i] {
				renewals[i]++
			}
			last[i] = pttl
			done = done && renewals[i] >= 2
		}
		if done {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, m := range ms {
		held, err := m.IsHeld(ctx)
		require.NoError(t, err)
		assert.True(t, held, m.Name())
		require.NoError(t, m.Unlock(ctx))
	}
}

// After the pub/sub connection drops and comes back, waiters re-check the
// lock at once: a release published while it was down would be lost. Here
// the lock is freed without any message (its key deleted) while the
// holder's lease is a minute long; only the re-check after the reconnect
// lets the waiter in before the test's 20 s bound.
func TestWaitersRecheckAfterPubSubReconnect(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	name := redistest.Prefix(t) + "lock"
	clientName := "fl-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	waiterRDB := redis.NewClient(&redis.Options{Addr: b.Addr, ClientName: clientName})
	t.Cleanup(func() { _ = waiterRDB.Close() })
	var scripts scriptCalls
	waiterRDB.AddHook(&scripts)
	admin := b.Client(t)
	holderC, waiterC := newClient(t, b.Client(t)), newClient(t, waiterRDB)
	holder, waiter := newMutex(t, holderC, name), newMutex(t, waiterC, name)
	require.NoError(t, holder.LockWithLease(ctx, time.Minute))
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(ctx) }()
	waitSubscribed(t, b, waiterC)
	// The waiter tries again once subscribed; only after that reply may the
	// lock be freed, or that attempt takes it and no wake-up is needed (on a
	// loaded machine it came after the Del: "the waiter's pub/sub
	// connection" was already closed).
	require.Eventually(t, func() bool { return scripts.done.Load() >= 2 }, 10*time.Second, time.Millisecond,
		"the waiter's attempt after subscribing never came back")

	require.NoError(t, admin.Del(ctx, name).Err()) // freed, and nobody is told
	list, err := admin.ClientList(ctx).Result()
	require.NoError(t, err)
	killed := 0
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, "name="+clientName+" ") && strings.Contains(line, " sub=1 ") {
			id := strings.TrimPrefix(strings.Fields(line)[0], "id=")
			require.NoError(t, admin.Do(ctx, "client", "kill", "id", id).Err())
			killed++
		}
	}
	require.Equal(t, 1, killed, "the waiter's pub/sub connection")
	require.NoError(t, <-got)
	require.NoError(t, waiter.Unlock(ctx))
}

// scriptCalls counts the scripts a go-redis client ran (replies received).
type scriptCalls struct{ done atomic.Int64 }

func (h *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if _, isScript := wire.ScriptCall(cmd); isScript && !wire.NotRun(err) {
			h.done.Add(1)
		}
		return err
	}
}
func (h *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// An Unlock whose ctx ends during the call (here: while it waits for the
// only pooled connection) must still release the lock.
func TestUnlockCompletesWhenContextEndsMidCall(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := redis.NewClient(&redis.Options{Addr: b.Addr, PoolSize: 1})
		t.Cleanup(func() { _ = rdb.Close() })
		c := newClient(t, rdb)
		name := redistest.Prefix(t) + "lock"
		m := newMutex(t, c, name)
		require.NoError(t, m.Lock(ctx))
		busy := make(chan struct{})
		go func() { // occupy the only connection for a while
			defer close(busy)
			rdb.BLPop(ctx, time.Second, redistest.Prefix(t)+"nothing")
		}()
		// Unlock only once BLPOP has the connection: it then waits for it
		// far longer than its 50 ms.
		require.Eventually(t, func() bool { return rdb.PoolStats().IdleConns == 0 }, 10*time.Second, time.Millisecond,
			"BLPOP never took the only connection")
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		require.NoError(t, m.Unlock(short))
		<-busy
		locked, err := b.Client(t).Exists(ctx, name).Result()
		require.NoError(t, err)
		assert.Zero(t, locked, "the lock must be released")
		<-m.Done()
		assert.NoError(t, m.Err())
	})
}
