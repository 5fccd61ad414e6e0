package semaphore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/semaphore"
)

// Issue 33: a release hands the permits to the head that fits directly
// (its client returns on the grant message, without an attempt), and a
// waiter woken while the head cannot be granted is sent its attempt's
// reply (a note), which its client takes without an attempt either.

// acquireCounter counts the fair semaphore's acquisition scripts a client
// sends.
type acquireCounter struct{ n atomic.Int64 }

func (c *acquireCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *acquireCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	sha := wire.SemFairDefault().Script(wire.FileSemFairAcquire).Hash()
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if s, isScript := wire.ScriptCall(cmd); isScript && s == sha && !wire.NotRun(err) {
			c.n.Add(1)
		}
		return err
	}
}

func (c *acquireCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// countedFair is a handle on f's semaphore through a client of its own
// whose acquisition scripts are counted.
func countedFair(t *testing.T, b *redistest.Backend, f *semaphore.Fair, opts ...fairlock.Option) (*semaphore.Fair, *acquireCounter) {
	t.Helper()
	rdb := b.Client(t)
	cnt := &acquireCounter{}
	rdb.AddHook(cnt)
	c, err := fairlock.NewClient(rdb, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	g, err := semaphore.NewFair(c, f.Name())
	require.NoError(t, err)
	return g, cnt
}

func TestFairReleaseHandsOffWithoutAnAttempt(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, _ := newFair(t, b, 1)
		held, err := f.Acquire(ctx, 1, 0)
		require.NoError(t, err)
		w1, c1 := countedFair(t, b, f)
		w2, c2 := countedFair(t, b, f)
		first := enqueue(t, ctx, w1, 1)
		second := enqueue(t, ctx, w2, 1)
		// Both are queued; their first attempt and the one after subscribing
		// are done once the queue shows them and the counts settle.
		time.Sleep(300 * time.Millisecond)
		n1, n2 := c1.n.Load(), c2.n.Load()
		require.NoError(t, held.Release(ctx))
		p := got(t, first)
		assert.Less(t, held.Token(), p.Token(), "the grant's token follows the holder's")
		assert.Equal(t, semaphore.State{Pool: 1, Available: 0, Holders: 1, Queued: 1}, state(t, f))
		// The grant came with the release: the first waiter sent no
		// attempt after it; the second, now the head of a full pool, was
		// sent its reply and sent none either.
		time.Sleep(300 * time.Millisecond)
		assert.Equal(t, n1, c1.n.Load(), "the granted waiter ran an acquisition script after the release")
		assert.Equal(t, n2, c2.n.Load(), "the waiter behind it ran an acquisition script after the release")
		assert.True(t, pending(second))
		// The handed-off permit is a permit: its release hands on.
		require.NoError(t, p.Release(ctx))
		q := got(t, second)
		assert.Less(t, p.Token(), q.Token())
		require.NoError(t, q.Release(ctx))
		assert.Equal(t, semaphore.State{Pool: 1, Available: 1}, state(t, f))
	})
}

// A handed-off grant lasts min(lease, 2 graces) in Redis until its holder
// claims it (sets its full lease): with the watchdog's lease, the claim
// runs a third of the way into the grant; the permit then outlives the two
// graces.
func TestFairHandedOffGrantIsClaimed(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.RealClock(t, b)
		ctx := context.Background()
		// the releaser's grace sets the grant's TTL: 2 x 500 ms
		f, _ := newFair(t, b, 1, fairlock.WithHeadGrace(500*time.Millisecond))
		held, err := f.Acquire(ctx, 1, 0)
		require.NoError(t, err)
		w, _ := countedFair(t, b, f, fairlock.WithLease(30*time.Second))
		ch := enqueue(t, ctx, w, 1)
		require.NoError(t, held.Release(ctx))
		p := got(t, ch)
		// two graces are 1 s; well past them the permit is still held,
		// with a lease near the watchdog's
		time.Sleep(2500 * time.Millisecond)
		assert.Equal(t, 1, state(t, f).Holders, "the handed-off permit ended with its two graces")
		rdb := b.Client(t)
		k := wire.SemFairKeysFor(f.Name())
		ends, err := rdb.ZRangeWithScores(ctx, k.Leases, 0, -1).Result()
		require.NoError(t, err)
		require.Len(t, ends, 1)
		now, err := rdb.Time(ctx).Result()
		require.NoError(t, err)
		assert.Greater(t, int64(ends[0].Score)-now.UnixMilli(), int64(20_000), "the lease was not set to the watchdog's")
		require.NoError(t, p.Release(ctx))
	})
}

// The re-check after subscribing is two reads for a waiter behind the
// first two places (sem_fair_queued.lua): no message can have been sent to
// it, so its first attempt's reply stands; the head and the waiter behind
// it make the attempt.
func TestFairRecheckBehindTheFrontRunsNoAttempt(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, _ := newFair(t, b, 1)
		held, err := f.Acquire(ctx, 1, 0)
		require.NoError(t, err)
		var chs []<-chan acquired
		var cnts []*acquireCounter
		for range 3 {
			w, c := countedFair(t, b, f)
			chs = append(chs, enqueue(t, ctx, w, 1))
			cnts = append(cnts, c)
		}
		time.Sleep(300 * time.Millisecond)
		// the head and the second: the attempt, then the re-check (and
		// attempts on wake-ups as others join); the third: the attempt only
		assert.GreaterOrEqual(t, cnts[0].n.Load(), int64(2), "the head's attempts")
		assert.GreaterOrEqual(t, cnts[1].n.Load(), int64(2), "the second's attempts")
		assert.Equal(t, int64(1), cnts[2].n.Load(), "the third's attempts")
		// and nothing is lost: all three are granted in order
		p := held
		for _, ch := range chs {
			require.NoError(t, p.Release(ctx))
			q := got(t, ch)
			assert.Less(t, p.Token(), q.Token())
			p = q
		}
		require.NoError(t, p.Release(ctx))
	})
}
