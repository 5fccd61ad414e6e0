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

// Issue 33: a scalable acquisition counts the Redisson keys with its own
// queue hash and the head grace key in one EXISTS, and takes a count of one
// with a queue head as "only the hash". Either Redisson key alone (no head
// in this engine's queue) is still refused, and a grace key alone, left
// while the lock is held by another and nobody is queued, is still deleted
// by a join (finish: no grace unless the lock is free with a head).
func TestScalableRefusesEitherRedissonKeyAlone(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		for _, which := range []string{"queue", "timeouts"} {
			name := redistest.Prefix(t) + which
			k := wire.KeysFor(name)
			if which == "queue" {
				require.NoError(t, rdb.RPush(ctx, k.Queue, "java:1").Err())
			} else {
				require.NoError(t, rdb.ZAdd(ctx, k.Timeouts, redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: "java:1"}).Err())
			}
			m := newMutex(t, newClient(t, b.Client(t)), name, scalable)
			ok, err := m.TryLock(ctx)
			assert.False(t, ok)
			assert.True(t, errors.Is(err, fair.ErrMixedEngines), "the Redisson %s alone: %v", which, err)
			assert.Zero(t, rdb.Exists(ctx, k.ScalableQueue()).Val(), "nothing written")
		}

		assertAttemptDeletesStaleGrace(t, b, scalable)
	})
}

// assertAttemptDeletesStaleGrace: a failed TryLock of a held lock (no
// give-up follows it, and a give-up deletes the key too) deletes a stale
// grace key that is the only key of the engines' refusal count but the lock.
func assertAttemptDeletesStaleGrace(t *testing.T, b *redistest.Backend, opts ...fair.Option) {
	t.Helper()
	ctx := testCtx(t)
	rdb := b.Client(t)
	name := redistest.Prefix(t) + "grace"
	k := wire.KeysFor(name)
	holder := newMutex(t, newClient(t, b.Client(t)), name, opts...)
	require.NoError(t, holder.Lock(ctx))
	require.NoError(t, rdb.Set(ctx, k.Grace(), "ghost:1", time.Minute).Err())
	waiter := newMutex(t, newClient(t, b.Client(t)), name, opts...)
	ok, err := waiter.TryLock(ctx)
	require.NoError(t, err)
	assert.False(t, ok, "the lock is held")
	assert.Zero(t, rdb.Exists(ctx, k.Grace()).Val(), "the attempt left the stale grace key")
	require.NoError(t, holder.Unlock(ctx))
}

// The Redisson engine's acquisitions count the scalable queue and the grace
// key in one EXISTS (q_refuse in queue_redisson.lua): a count of one must
// still tell which. The scalable queue alone refuses; a stale grace key
// alone is deleted by an attempt on a held lock.
func TestRedissonEngineTellsTheScalableQueueFromTheGrace(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "squeue"
		k := wire.KeysFor(name)
		require.NoError(t, rdb.HSet(ctx, k.ScalableQueue(), "h", "go:1").Err())
		m := newMutex(t, newClient(t, b.Client(t)), name)
		ok, err := m.TryLock(ctx)
		assert.False(t, ok)
		assert.True(t, errors.Is(err, fair.ErrMixedEngines), "the scalable queue alone: %v", err)
		assert.Zero(t, rdb.Exists(ctx, k.Name, k.Queue, k.Timeouts).Val(), "nothing written")
		assertAttemptDeletesStaleGrace(t, b)
	})
}

func TestEngineOptionValidated(t *testing.T) {
	c := newClient(t, redistest.Mini(t).Client(t))
	_, err := fair.New(c, "x", fair.WithEngine(fair.Engine(7)))
	assert.ErrorIs(t, err, fair.ErrInvalidValue)
}
