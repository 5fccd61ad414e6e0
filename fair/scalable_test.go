package fair_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
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

var scalable = fair.WithEngine(fair.Scalable)

// scalableQueue reads the scalable engine's queue of name: the waiters head
// first and their absolute deadlines (the head's plus the deltas).
func scalableQueue(t testing.TB, rdb redis.UniversalClient, name string) ([]string, map[string]int64) {
	t.Helper()
	f, err := rdb.HGetAll(context.Background(), lua.KeysFor(name).ScalableQueue()).Result()
	require.NoError(t, err)
	deadlines := map[string]int64{}
	var order []string
	if len(f) == 0 {
		return order, deadlines
	}
	d, err := strconv.ParseInt(f["hd"], 10, 64)
	require.NoError(t, err)
	for o := f["h"]; o != "" && len(order) <= len(f); o = f["n:"+o] {
		delta, err := strconv.ParseInt(f["d:"+o], 10, 64)
		require.NoError(t, err)
		d += delta
		order = append(order, o)
		deadlines[o] = d
	}
	return order, deadlines
}

func waitScalableQueued(t testing.TB, rdb redis.UniversalClient, name string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		q, _ := scalableQueue(t, rdb, name)
		return len(q) == n
	}, 10*time.Second, time.Millisecond, "scalable queue of %s never reached %d", name, n)
}

func TestScalableScriptsLoad(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		for _, f := range lua.ScalableFiles {
			sc := lua.ScalableDefault.Script(f)
			sha, err := sc.Load(context.Background(), rdb).Result()
			require.NoError(t, err, f)
			assert.Equal(t, sc.Hash(), sha, f)
		}
	})
}

func TestScalableKeyName(t *testing.T) {
	assert.Equal(t, "fairlock_squeue:{seats}", lua.KeysFor("seats").ScalableQueue())
	assert.Equal(t, "fairlock_squeue:{t}:seats", lua.KeysFor("{t}:seats").ScalableQueue())
}

func TestScalableFIFOAcrossClients(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		clients := []*fairlock.Client{newClient(t, b.Client(t)), newClient(t, b.Client(t)), newClient(t, b.Client(t))}
		holder := newMutex(t, clients[0], name, scalable)
		require.NoError(t, holder.Lock(ctx))

		const n = 30
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := 0; i < n; i++ {
			m := newMutex(t, clients[i%3], name, scalable)
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
			waitScalableQueued(t, rdb, name, i+1)
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
		for _, k := range keys {
			assert.True(t, strings.HasPrefix(k, "redisson_unlock_latch:"), "left behind: %s", k)
		}
	})
}

func TestScalableCanceledWaiterShiftsFollowers(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		c := newClient(t, b.Client(t))
		name := redistest.Prefix(t) + "lock"
		holder := newMutex(t, c, name, scalable)
		require.NoError(t, holder.Lock(ctx))
		slot := time.Minute
		var ms []*fair.Mutex
		var cancels []context.CancelFunc
		var results []chan error
		for i := 0; i < 3; i++ {
			m := newMutex(t, c, name, scalable, fair.WithWaitSlot(slot))
			wctx, cancel := context.WithCancel(ctx)
			res := make(chan error, 1)
			go func() { res <- m.Lock(wctx) }()
			waitScalableQueued(t, rdb, name, i+1)
			ms, cancels, results = append(ms, m), append(cancels, cancel), append(results, res)
		}
		_, before := scalableQueue(t, rdb, name)

		cancels[1]() // the middle waiter gives up
		err := <-results[1]
		assert.True(t, errors.Is(err, fair.ErrCanceled) && errors.Is(err, context.Canceled), "%v", err)

		q, after := scalableQueue(t, rdb, name)
		assert.Equal(t, []string{ms[0].Owner(), ms[2].Owner()}, q)
		assert.Equal(t, before[ms[0].Owner()], after[ms[0].Owner()], "the waiter ahead keeps its deadline")
		assert.Equal(t, before[ms[2].Owner()]-slot.Milliseconds(), after[ms[2].Owner()], "the follower moves up one slot")
		assert.Equal(t, 2, core.Of(c).Hub.Channels(), "the canceled waiter's subscription is gone")

		require.NoError(t, holder.Unlock(ctx))
		for _, i := range []int{0, 2} {
			require.NoError(t, <-results[i])
			require.NoError(t, ms[i].Unlock(ctx))
		}
		cancels[0]()
		cancels[2]()
		assert.Zero(t, rdb.Exists(ctx, lua.KeysFor(name).ScalableQueue()).Val(), "an empty queue leaves no key")
	})
}

// enqueueDeadScalable queues an owner that will never come back.
func enqueueDeadScalable(t testing.TB, rdb redis.UniversalClient, name, owner string, slot time.Duration) {
	t.Helper()
	ctx := context.Background()
	k := lua.KeysFor(name)
	free := rdb.Exists(ctx, k.Name).Val() == 0
	if free {
		require.NoError(t, rdb.HSet(ctx, k.Name, "placeholder:0", 1).Err())
	}
	ok, _, err := lua.ScalableDefault.TryLockWait(ctx, rdb, k, lua.Args{
		Owner: owner, LeaseMs: 30000, WaitMs: slot.Milliseconds(), NowMs: time.Now().UnixMilli(),
	})
	require.NoError(t, err)
	require.False(t, ok)
	if free {
		require.NoError(t, rdb.Del(ctx, k.Name).Err())
	}
}

func TestScalableDeadWaiterIsPruned(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		c := newClient(t, b.Client(t), fairlock.WithHeadGrace(-1)) // Redisson's rules only
		holder := newMutex(t, c, name, scalable)
		require.NoError(t, holder.LockWithLease(ctx, 300*time.Millisecond)) // and its holder dies too
		enqueueDeadScalable(t, rdb, name, "dead-client:1", 300*time.Millisecond)
		live := newMutex(t, c, name, scalable)
		liveRes := make(chan error, 1)
		go func() { liveRes <- live.Lock(ctx) }()
		waitScalableQueued(t, rdb, name, 2)
		if b.Mini != nil {
			b.Mini.FastForward(300 * time.Millisecond) // the holder's lease
		}
		require.NoError(t, <-liveRes, "the live waiter must get the lock once the dead one is pruned")
		q, _ := scalableQueue(t, rdb, name)
		assert.Empty(t, q)
		require.NoError(t, live.Unlock(ctx))
	})
}

func TestScalableDeadHeadDoesNotStallForItsSlot(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		c := newClient(t, b.Client(t), fairlock.WithHeadGrace(200*time.Millisecond))
		holder := newMutex(t, c, name, scalable)
		require.NoError(t, holder.LockWithLease(ctx, time.Minute))
		enqueueDeadScalable(t, rdb, name, "dead-client:1", 5*time.Minute)
		live := newMutex(t, c, name, scalable)
		liveRes := make(chan error, 1)
		go func() { liveRes <- live.Lock(ctx) }()
		waitScalableQueued(t, rdb, name, 2)
		require.NoError(t, holder.Unlock(ctx))
		require.NoError(t, <-liveRes, "the follower must get the lock within the head grace, not the 5-minute slot")
		require.NoError(t, live.Unlock(ctx))
		err := live.Unlock(ctx)
		assert.True(t, errors.Is(err, fair.ErrNotHeld), "H4: %v", err)
	})
}

// One name, one engine: the scalable scripts refuse a lock whose
// Redisson-compatible queue exists, and change nothing.
func TestScalableRefusesRedissonQueue(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		k := lua.KeysFor(name)
		c := newClient(t, b.Client(t))
		enqueueDead(t, rdb, name, "java:1", 5*time.Minute) // a Redisson waiter
		queue := rdb.LRange(ctx, k.Queue, 0, -1).Val()
		timeouts := rdb.ZRangeWithScores(ctx, k.Timeouts, 0, -1).Val()

		m := newMutex(t, c, name, scalable)
		ok, err := m.TryLock(ctx)
		assert.False(t, ok)
		assert.True(t, errors.Is(err, fair.ErrMixedEngines), "%v", err)
		assert.Contains(t, err.Error(), "is used by the Redisson-compatible fair engine")
		err = m.Lock(ctx)
		assert.True(t, errors.Is(err, fair.ErrMixedEngines), "%v", err)
		_, err = m.ForceUnlock(ctx)
		assert.True(t, errors.Is(err, fair.ErrMixedEngines), "%v", err)
		a := lua.Args{Owner: "x:1", WaitMs: 1000, NowMs: time.Now().UnixMilli(), RequestID: "r", LatchMs: 1000, LeaseMs: 1000}
		assert.ErrorIs(t, lua.ScalableDefault.AcquireFailed(ctx, rdb, k, a), lua.ErrMixedEngines)
		_, err = lua.ScalableDefault.Unlock(ctx, rdb, k, a)
		assert.ErrorIs(t, err, lua.ErrMixedEngines)

		assert.Equal(t, queue, rdb.LRange(ctx, k.Queue, 0, -1).Val(), "nothing changed")
		assert.Equal(t, timeouts, rdb.ZRangeWithScores(ctx, k.Timeouts, 0, -1).Val(), "nothing changed")
		assert.Zero(t, rdb.Exists(ctx, k.Name, k.ScalableQueue(), k.Latch("r")).Val(), "nothing written")
	})
}

func TestEngineOptionValidated(t *testing.T) {
	c := newClient(t, redistest.Mini(t).Client(t))
	_, err := fair.New(c, "x", fair.WithEngine(fair.Engine(7)))
	assert.ErrorIs(t, err, fair.ErrInvalidValue)
}
