package fair_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

var scalable = fair.WithEngine(fair.Scalable)

func TestScalableKeyName(t *testing.T) {
	assert.Equal(t, "fairlock_squeue:{seats}", wire.KeysFor("seats").ScalableQueue())
	assert.Equal(t, "fairlock_squeue:{t}:seats", wire.KeysFor("{t}:seats").ScalableQueue())
}

// enqueueDeadScalable queues an owner that will never come back.
func enqueueDeadScalable(t testing.TB, rdb redis.UniversalClient, name, owner string, slot time.Duration) {
	t.Helper()
	ctx := context.Background()
	k := wire.KeysFor(name)
	free := rdb.Exists(ctx, k.Name).Val() == 0
	if free {
		require.NoError(t, rdb.HSet(ctx, k.Name, "placeholder:0", 1).Err())
	}
	ok, _, err := wire.ScalableDefault().TryLockWait(ctx, rdb, k, wire.Args{
		Owner: owner, LeaseMs: 30000, WaitMs: slot.Milliseconds(), NowMs: time.Now().UnixMilli(),
	})
	require.NoError(t, err)
	require.False(t, ok)
	if free {
		require.NoError(t, rdb.Del(ctx, k.Name).Err())
	}
}

// One name, one engine: the scalable scripts refuse to acquire a lock whose
// Redisson-compatible queue exists, and change nothing.
func TestScalableRefusesRedissonQueue(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		k := wire.KeysFor(name)
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
		// Giving up and releasing are never refused; an owner that is not
		// queued and holds nothing changes nothing.
		a := wire.Args{Owner: "x:1", WaitMs: 1000, NowMs: time.Now().UnixMilli(), RequestID: "r", LatchMs: 1000, LeaseMs: 1000}
		assert.NoError(t, wire.ScalableDefault().AcquireFailed(ctx, rdb, k, a))
		res, err := wire.ScalableDefault().Unlock(ctx, rdb, k, a)
		assert.NoError(t, err)
		assert.Equal(t, wire.NotHeld, res)

		assert.Equal(t, queue, rdb.LRange(ctx, k.Queue, 0, -1).Val(), "nothing changed")
		assert.Equal(t, timeouts, rdb.ZRangeWithScores(ctx, k.Timeouts, 0, -1).Val(), "nothing changed")
		assert.Zero(t, rdb.Exists(ctx, k.ScalableQueue(), k.Latch("r")).Val(), "nothing written")
	})
}

func TestEngineOptionValidated(t *testing.T) {
	c := newClient(t, redistest.Mini(t).Client(t))
	_, err := fair.New(c, "x", fair.WithEngine(fair.Engine(7)))
	assert.ErrorIs(t, err, fair.ErrInvalidValue)
}
