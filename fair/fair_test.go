package fair_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/lua"
)

func TestMain(m *testing.M) { os.Exit(redistest.MainLeakCheck(m)) }

func newClient(t testing.TB, rdb redis.UniversalClient, opts ...fairlock.Option) *fairlock.Client {
	t.Helper()
	c, err := fairlock.NewClient(rdb, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newMutex(t testing.TB, c *fairlock.Client, name string, opts ...fair.Option) *fair.Mutex {
	t.Helper()
	m, err := fair.New(c, name, opts...)
	require.NoError(t, err)
	return m
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitQueued waits until the queue of name is n long.
func waitQueued(t testing.TB, rdb redis.UniversalClient, name string, n int) {
	t.Helper()
	q := lua.KeysFor(name).Queue
	require.Eventually(t, func() bool {
		return rdb.LLen(context.Background(), q).Val() == int64(n)
	}, 10*time.Second, time.Millisecond, "queue of %s never reached %d", name, n)
}

func TestFIFOAcrossClients(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		clients := []*fairlock.Client{newClient(t, b.Client(t)), newClient(t, b.Client(t)), newClient(t, b.Client(t))}
		holder := newMutex(t, clients[0], name)
		require.NoError(t, holder.Lock(ctx))

		const n = 30
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := 0; i < n; i++ {
			m := newMutex(t, clients[i%3], name)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := m.Lock(ctx); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				errs <- m.Unlock(ctx)
			}()
			waitQueued(t, rdb, name, i+1) // the next one starts after this one is queued
		}
		require.NoError(t, holder.Unlock(ctx))
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		want := make([]int, n)
		for i := range want {
			want[i] = i
		}
		assert.Equal(t, want, order, "grant order must equal arrival order")
		keys, _ := rdb.Keys(ctx, "*"+name+"*").Result()
		for _, k := range keys { // unlock latches expire by themselves
			assert.True(t, strings.HasPrefix(k, "redisson_unlock_latch:"), "left behind: %s", k)
		}
	})
}

func TestCanceledWaiterShiftsFollowersAndLeavesNoTrace(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		c := newClient(t, b.Client(t))
		name := redistest.Prefix(t) + "lock"
		k := lua.KeysFor(name)
		holder := newMutex(t, c, name)
		require.NoError(t, holder.Lock(ctx))
		slot := time.Minute
		var ms []*fair.Mutex
		var cancels []context.CancelFunc
		var results []chan error
		for i := 0; i < 3; i++ {
			m := newMutex(t, c, name, fair.WithWaitSlot(slot))
			wctx, cancel := context.WithCancel(ctx)
			res := make(chan error, 1)
			go func() { res <- m.Lock(wctx) }()
			waitQueued(t, rdb, name, i+1)
			ms, cancels, results = append(ms, m), append(cancels, cancel), append(results, res)
		}
		before := rdb.ZRangeWithScores(ctx, k.Timeouts, 0, -1).Val()
		require.Len(t, before, 3)

		cancels[1]() // the middle waiter gives up
		err := <-results[1]
		assert.True(t, errors.Is(err, fair.ErrCanceled) && errors.Is(err, context.Canceled), "%v", err)

		after := rdb.ZRangeWithScores(ctx, k.Timeouts, 0, -1).Val()
		require.Len(t, after, 2)
		assert.Equal(t, ms[0].Owner(), after[0].Member)
		assert.Equal(t, before[0].Score, after[0].Score, "the waiter ahead keeps its deadline")
		assert.Equal(t, ms[2].Owner(), after[1].Member)
		assert.Equal(t, before[2].Score-float64(slot.Milliseconds()), after[1].Score, "the follower moves up one slot")
		assert.Equal(t, []string{ms[0].Owner(), ms[2].Owner()}, rdb.LRange(ctx, k.Queue, 0, -1).Val())
		assert.Equal(t, 2, core.Of(c).Hub.Channels(), "the canceled waiter's subscription is gone")

		require.NoError(t, holder.Unlock(ctx))
		for _, i := range []int{0, 2} {
			require.NoError(t, <-results[i])
			require.NoError(t, ms[i].Unlock(ctx))
		}
		cancels[0]()
		cancels[2]()
	})
}

// enqueueDead leaves in the queue what a client that crashed while waiting
// leaves: an entry with a deadline one slot out, and nobody to come back.
// A free lock is held for the moment of the call, so the entry queues.
func enqueueDead(t testing.TB, rdb redis.UniversalClient, name, owner string, slot time.Duration) {
	t.Helper()
	ctx := context.Background()
	k := lua.KeysFor(name)
	free := rdb.Exists(ctx, k.Name).Val() == 0
	if free {
		require.NoError(t, rdb.HSet(ctx, k.Name, "placeholder:0", 1).Err())
	}
	ok, _, err := lua.Default.FairTryLockWait(ctx, rdb, k, lua.Args{
		Owner: owner, LeaseMs: 30000, WaitMs: slot.Milliseconds(), NowMs: time.Now().UnixMilli(),
	})
	require.NoError(t, err)
	require.False(t, ok)
	if free {
		require.NoError(t, rdb.Del(ctx, k.Name).Err())
	}
}

func TestDeadWaiterIsPruned(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		k := lua.KeysFor(name)
		c := newClient(t, b.Client(t), fairlock.WithHeadGrace(-1)) // Redisson's rules only
		holder := newMutex(t, c, name)
		require.NoError(t, holder.LockWithLease(ctx, 300*time.Millisecond)) // and its holder dies too
		enqueueDead(t, rdb, name, "dead-client:1", 300*time.Millisecond)
		live := newMutex(t, c, name)
		liveRes := make(chan error, 1)
		go func() { liveRes <- live.Lock(ctx) }()
		waitQueued(t, rdb, name, 2)
		if b.Mini != nil {
			b.Mini.FastForward(300 * time.Millisecond) // the holder's lease
		}
		require.NoError(t, <-liveRes, "the live waiter must get the lock once the dead one is pruned")
		assert.Equal(t, redis.Nil, rdb.ZScore(ctx, k.Timeouts, "dead-client:1").Err())
		assert.Zero(t, rdb.LLen(ctx, k.Queue).Val())
		require.NoError(t, live.Unlock(ctx))
	})
}

// A dead head behind a free lock must not stall its followers for its whole
// slot (5 minutes here): the head grace prunes it.
func TestDeadHeadDoesNotStallForItsSlot(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		c := newClient(t, b.Client(t), fairlock.WithHeadGrace(200*time.Millisecond))
		holder := newMutex(t, c, name)
		require.NoError(t, holder.LockWithLease(ctx, time.Minute))
		enqueueDead(t, rdb, name, "dead-client:1", 5*time.Minute)
		live := newMutex(t, c, name)
		liveRes := make(chan error, 1)
		go func() { liveRes <- live.Lock(ctx) }()
		waitQueued(t, rdb, name, 2)
		require.NoError(t, holder.Unlock(ctx))
		require.NoError(t, <-liveRes, "the follower must get the lock within the head grace, not the 5-minute slot")
		require.NoError(t, live.Unlock(ctx))
	})
}

// H2: a waiter queued behind another while the lock is free must not poll
// Redis in a loop (Redisson's script replies 0 and its client retries at once).
func TestNoBusyPollingBehindFreeLock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		waiterRDB := b.Client(t)
		var evals atomic.Int64
		waiterRDB.AddHook(countHook{&evals})
		c := newClient(t, waiterRDB, fairlock.WithHeadGrace(time.Minute))
		enqueueDead(t, rdb, name, "slow-head:1", 5*time.Minute) // the lock is free, this head is not coming
		m := newMutex(t, c, name)
		wctx, cancel := context.WithCancel(ctx)
		res := make(chan error, 1)
		go func() { res <- m.Lock(wctx) }()
		waitQueued(t, rdb, name, 2)
		time.Sleep(300 * time.Millisecond) // a window in which a polling client would call thousands of times
		cancel()
		err := <-res
		assert.True(t, errors.Is(err, context.Canceled), "%v", err)
		// enqueue, one re-check after subscribing, and the give-up
		assert.LessOrEqual(t, evals.Load(), int64(4), "script calls while waiting behind a free lock")
		assert.Equal(t, []string{"slow-head:1"}, rdb.LRange(ctx, lua.KeysFor(name).Queue, 0, -1).Val())
	})
}

type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// H1: a head with no deadline (someone deleted the timeout zset) must not
// block the lock for ever.
func TestHeadWithoutDeadlineDoesNotBlock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		c := newClient(t, b.Client(t))
		enqueueDead(t, rdb, name, "ghost:1", 5*time.Minute)
		require.NoError(t, rdb.Del(ctx, lua.KeysFor(name).Timeouts).Err())
		m := newMutex(t, c, name)
		ok, err := m.TryLock(ctx)
		require.NoError(t, err)
		assert.True(t, ok, "a head without a deadline is stale")
		require.NoError(t, m.Unlock(ctx))
	})
}

func TestTryLockFailsWhileSomeoneIsQueued(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		c := newClient(t, b.Client(t))
		enqueueDead(t, rdb, name, "queued:1", 5*time.Minute)
		m := newMutex(t, c, name)
		ok, err := m.TryLock(ctx)
		require.NoError(t, err)
		assert.False(t, ok, "the lock is free but someone is queued: the queue goes first")
		assert.Equal(t, int64(1), rdb.LLen(ctx, lua.KeysFor(name).Queue).Val(), "TryLock never queues")
		locked, err := m.IsLocked(ctx)
		require.NoError(t, err)
		assert.False(t, locked)
	})
}

func TestReentrancy(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		c := newClient(t, b.Client(t))
		name := redistest.Prefix(t) + "lock"
		m, other := newMutex(t, c, name), newMutex(t, c, name)
		require.NoError(t, m.Lock(ctx))
		ok, err := m.TryLock(ctx)
		require.NoError(t, err)
		assert.True(t, ok)
		ok, err = m.TryLockFor(ctx, time.Second, 0)
		require.NoError(t, err)
		assert.True(t, ok)
		n, err := m.HoldCount(ctx)
		require.NoError(t, err)
		assert.Equal(t, 3, n)
		ok, err = other.TryLock(ctx)
		require.NoError(t, err)
		assert.False(t, ok)
		for i := 0; i < 3; i++ {
			require.NoError(t, m.Unlock(ctx))
		}
		err = m.Unlock(ctx)
		assert.True(t, errors.Is(err, fair.ErrNotHeld), "H4: unlocking a free fair lock is an error: %v", err)
	})
}

// recordMessages subscribes to every channel of the lock and records what
// is published.
func recordMessages(t testing.TB, rdb *redis.Client, name string) func() []string {
	t.Helper()
	ps := rdb.PSubscribe(context.Background(), lua.KeysFor(name).Channel+"*")
	t.Cleanup(func() { _ = ps.Close() })
	_, err := ps.Receive(context.Background()) // the confirmation
	require.NoError(t, err)
	var mu sync.Mutex
	var got []string
	go func() {
		for msg := range ps.Channel() {
			mu.Lock()
			got = append(got, msg.Channel+"="+msg.Payload)
			mu.Unlock()
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}

func TestUnlockWakesOnlyTheHead(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		messages := recordMessages(t, b.Client(t), name)
		c := newClient(t, b.Client(t))
		holder := newMutex(t, c, name)
		require.NoError(t, holder.Lock(ctx))
		var ms []*fair.Mutex
		res := make(chan error, 3)
		for i := 0; i < 3; i++ {
			m := newMutex(t, c, name)
			ms = append(ms, m)
			go func() {
				err := m.Lock(ctx)
				res <- err
			}()
			waitQueued(t, rdb, name, i+1)
		}
		require.NoError(t, holder.Unlock(ctx))
		require.NoError(t, <-res) // the head got it
		k := lua.KeysFor(name)
		require.Eventually(t, func() bool { return len(messages()) > 0 }, 10*time.Second, time.Millisecond)
		assert.Equal(t, []string{k.WaiterChannel(ms[0].Owner()) + "=0"}, messages(), "only the head is woken")
		held, err := ms[0].IsHeld(ctx)
		require.NoError(t, err)
		assert.True(t, held)
		require.NoError(t, ms[0].Unlock(ctx))
		require.NoError(t, <-res)
		require.NoError(t, ms[1].Unlock(ctx))
		require.NoError(t, <-res)
		require.NoError(t, ms[2].Unlock(ctx))
		got := messages()
		assert.Equal(t, []string{
			k.WaiterChannel(ms[0].Owner()) + "=0",
			k.WaiterChannel(ms[1].Owner()) + "=0",
			k.WaiterChannel(ms[2].Owner()) + "=0",
		}, got)
	})
}

func TestForceUnlockWakesTheHead(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		c := newClient(t, b.Client(t))
		holder, waiter, admin := newMutex(t, c, name), newMutex(t, c, name), newMutex(t, c, name)
		require.NoError(t, holder.LockWithLease(ctx, time.Minute))
		res := make(chan error, 1)
		go func() { res <- waiter.Lock(ctx) }()
		waitQueued(t, rdb, name, 1)
		ok, err := admin.ForceUnlock(ctx)
		require.NoError(t, err)
		assert.True(t, ok)
		require.NoError(t, <-res, "the head must be woken (its lease poll is a minute away)")
		require.NoError(t, waiter.Unlock(ctx))
	})
}

func TestWaitRunsOutLeavesQueue(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		c := newClient(t, b.Client(t))
		holder, waiter := newMutex(t, c, name), newMutex(t, c, name)
		require.NoError(t, holder.Lock(ctx))
		ok, err := waiter.TryLockFor(ctx, 100*time.Millisecond, 0)
		require.NoError(t, err)
		assert.False(t, ok)
		k := lua.KeysFor(name)
		assert.Zero(t, rdb.Exists(ctx, k.Queue, k.Timeouts).Val(), "the waiter left the queue")
		require.NoError(t, holder.Unlock(ctx))
	})
}

// cancelAfterHook lets a script run on the server and then reports the
// caller's context as cancelled: a waiter cancelled while being granted.
type cancelAfterHook struct {
	armed  *atomic.Bool
	cancel context.CancelFunc
}

func (h cancelAfterHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h cancelAfterHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if strings.HasPrefix(cmd.Name(), "eval") && h.armed.CompareAndSwap(true, false) {
			h.cancel()
			return ctx.Err()
		}
		return err
	}
}
func (h cancelAfterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestCanceledWhileGrantedReleases(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		wctx, cancel := context.WithCancel(ctx)
		armed := &atomic.Bool{}
		waiterRDB := b.Client(t)
		waiterRDB.AddHook(cancelAfterHook{armed: armed, cancel: cancel})
		c := newClient(t, waiterRDB)
		m := newMutex(t, c, name)
		armed.Store(true)
		err := m.Lock(wctx) // the script takes the lock, the caller sees a cancellation
		assert.True(t, errors.Is(err, context.Canceled), "%v", err)
		k := lua.KeysFor(name)
		assert.Zero(t, rdb.Exists(ctx, k.Name, k.Queue, k.Timeouts).Val(), "never a lock held by nobody")
	})
}

func TestBadInput(t *testing.T) {
	b := redistest.Mini(t)
	c := newClient(t, b.Client(t))
	ctx := testCtx(t)
	_, err := fair.New(c, "x", fair.WithWaitSlot(0))
	assert.True(t, errors.Is(err, fair.ErrInvalidValue), "%v", err)
	_, err = fair.New(c, "x", fair.WithWaitSlot(-time.Second))
	assert.True(t, errors.Is(err, fair.ErrInvalidValue), "%v", err)
	_, err = fair.New(c, "")
	assert.True(t, errors.Is(err, fair.ErrInvalidName), "%v", err)
	_, err = fair.New(c, "a{b")
	assert.True(t, errors.Is(err, fair.ErrInvalidName), "%v", err)
	m := newMutex(t, c, "x")
	_, err = m.Acquire(ctx, fair.AcquireOptions{Slot: -time.Second})
	assert.True(t, errors.Is(err, fair.ErrInvalidValue), "%v", err)
	_, err = m.TryLockFor(ctx, -time.Second, 0)
	assert.True(t, errors.Is(err, fair.ErrInvalidValue), "%v", err)
	assert.True(t, errors.Is(m.LockWithLease(ctx, 0), fair.ErrInvalidValue))
	assert.Empty(t, b.Mini.Keys())
}

// The Redisson-compatible engine refuses a lock whose queue the scalable
// engine keeps, before writing anything (the scalable engine refuses the
// reverse: see scalable_test.go).
func TestRedissonEngineRefusesScalableQueue(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		c := newClient(t, b.Client(t))
		holder := newMutex(t, c, name, fair.WithEngine(fair.Scalable))
		require.NoError(t, holder.LockWithLease(ctx, time.Minute))
		waiter := newMutex(t, c, name, fair.WithEngine(fair.Scalable))
		wctx, cancel := context.WithCancel(ctx)
		res := make(chan error, 1)
		go func() { res <- waiter.Lock(wctx) }()
		k := lua.KeysFor(name)
		require.Eventually(t, func() bool { return rdb.Exists(ctx, k.ScalableQueue()).Val() == 1 }, 10*time.Second, time.Millisecond)

		before, err := rdb.Keys(ctx, "*"+name+"*").Result()
		require.NoError(t, err)
		other := newMutex(t, c, name) // the default, Redisson-compatible engine
		_, err = other.TryLock(ctx)
		assert.True(t, errors.Is(err, fair.ErrMixedEngines), "%v", err)
		_, err = other.TryLockFor(ctx, 10*time.Millisecond, 0)
		assert.True(t, errors.Is(err, fair.ErrMixedEngines), "%v", err)
		assert.True(t, errors.Is(other.Unlock(ctx), fair.ErrMixedEngines))
		_, err = other.ForceUnlock(ctx)
		assert.True(t, errors.Is(err, fair.ErrMixedEngines), "%v", err)
		after, err := rdb.Keys(ctx, "*"+name+"*").Result()
		require.NoError(t, err)
		assert.ElementsMatch(t, before, after, "nothing written")
		assert.Zero(t, rdb.Exists(ctx, k.Queue, k.Timeouts).Val())

		cancel()
		<-res
		require.NoError(t, holder.Unlock(ctx))
	})
}
