package demo

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

func TestMain(m *testing.M) { os.Exit(redistest.MainLeakCheck(m)) }

// TestChecksCatchAnUnfairQueue runs the demo on a fair lock whose queue is
// deliberately broken (newcomers join at the head: last come, first served)
// and checks that the demo's figures show it: inversions, grants out of
// turn, and queue reads that are not in arrival order.
func TestChecksCatchAnUnfairQueue(t *testing.T) {
	redistest.Long(t)
	const good = "redis.call('rpush', queue, owner)"
	broken := wire.Edit(func(file, src string) string {
		if file == wire.FileFairTryLockWait {
			require.Contains(t, src, good)
			return strings.Replace(src, good, "redis.call('lpush', queue, owner)", 1)
		}
		return src
	})
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// A generous bound: with the broken queue a waiter pushed back
		// from the head is not woken and finds out at its next check (a
		// lease, or the 5 s head grace, later); on a loaded machine a run
		// can take a few such rounds.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// The first holder keeps the lock 0.5-1.5 s while the three others
		// arrive (two round trips each, one at a time): the queue is at
		// least two long unless two arrivals take half a second, so the
		// unfair order shows on a loaded machine too. Few seats keep the
		// run short; a lease of 3 s outlasts every hold, so no hold
		// depends on a renewal arriving in time.
		c := Config{Clients: 1, Goroutines: 4, Seats: 3, Hold: time.Second,
			Kinds: []string{Fair}, Seed: 1, Redis: &redis.Options{Addr: b.Addr},
			Prefix: redistest.Prefix(t), Scripts: broken,
			Options: []fairlock.Option{fairlock.WithLease(3 * time.Second)}}
		rs, err := Run(ctx, c)
		require.NoError(t, err)
		r := rs[0]
		inv, _ := r.Inversions()
		assert.Positive(t, inv, "inversions")
		assert.Positive(t, r.OutOfTurn(), "grants out of turn")
		assert.Positive(t, r.QueueMismatches, "queue reads out of arrival order")
		// The lock still excludes: no seat is booked twice.
		assert.Zero(t, r.DoubleBookings)
		assert.Equal(t, c.Seats, r.Booked)
	})
}

// TestPermitsMode runs the --permits mode on both semaphores: the fair one
// grants in arrival order, neither lets more holders in than the pool, and
// every seat is booked once.
func TestPermitsMode(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c := Config{Clients: 2, Goroutines: 4, Seats: 40, Hold: 20 * time.Millisecond, Permits: 3,
			Kinds: []string{FairSemaphore, Semaphore}, Seed: 1, Redis: &redis.Options{Addr: b.Addr},
			Prefix: redistest.Prefix(t), Options: []fairlock.Option{fairlock.WithLease(5 * time.Second)}}
		rs, err := Run(ctx, c)
		require.NoError(t, err)
		require.Len(t, rs, 2)
		for _, r := range rs {
			assert.Equal(t, c.Seats, r.Booked, r.Kind)
			assert.Zero(t, r.DoubleBookings, r.Kind)
			assert.LessOrEqual(t, r.MaxHeld, c.Permits, r.Kind)
			assert.Positive(t, r.MaxHeld, r.Kind)
			assert.Empty(t, r.Leftover, r.Kind)
		}
		inv, _ := rs[0].Inversions()
		assert.Zero(t, inv, "the fair semaphore granted out of arrival order")
		assert.Zero(t, rs[0].OutOfTurn())
	})
}

// TestPermitsModeCatchesAnUnfairSemaphore: the same run on a fair
// semaphore whose acquisition ignores the queue (whoever finds a permit free
// takes it) and whose release hands nothing off (so that permits are free
// while waiters are queued, as they are with Redisson's semaphore): the
// demo's figures show the inversions.
func TestPermitsModeCatchesAnUnfairSemaphore(t *testing.T) {
	const good = "        if head and head ~= owner then\n            return false, false"
	const handoff = "if ARGV[5] then\n    local h = q_front()"
	broken := wire.EditSemFair(func(file, src string) string {
		switch file {
		case wire.FileSemFairAcquire:
			require.Contains(t, src, good)
			// whoever finds a permit free takes it, queued or not
			return strings.Replace(src, good, "        if false then\n            return false, false", 1)
		case wire.FileSemFairRelease:
			require.Contains(t, src, handoff)
			return strings.Replace(src, handoff, "if false then\n    local h = q_front()", 1)
		}
		return src
	})
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c := Config{Clients: 2, Goroutines: 4, Seats: 60, Hold: 20 * time.Millisecond, Permits: 2,
			Kinds: []string{FairSemaphore}, Seed: 1, Redis: &redis.Options{Addr: b.Addr},
			Prefix: redistest.Prefix(t), SemFairScripts: broken,
			Options: []fairlock.Option{fairlock.WithLease(5 * time.Second)}}
		rs, err := Run(ctx, c)
		require.NoError(t, err)
		r := rs[0]
		inv, _ := r.Inversions()
		assert.Positive(t, inv, "inversions")
		assert.LessOrEqual(t, r.MaxHeld, c.Permits)
	})
}

// TestQueueCheckOnEachEngine shows that the queue check fails on a queue
// out of arrival order, on either engine's keys: each queue is written by
// hand (the Redisson engine's list; the scalable engine's hash, linked from
// its head, lua/queue_scalable.lua), not by the library.
func TestQueueCheckOnEachEngine(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		for _, engine := range []fair.Engine{fair.Redisson, fair.Scalable} {
			name := redistest.Prefix(t) + "q" + fmt.Sprint(engine)
			keys := wire.KeysFor(name)
			write := func(owners ...string) {
				require.NoError(t, rdb.Del(ctx, keys.Name, keys.Queue, keys.ScalableQueue()).Err())
				if engine == fair.Redisson {
					require.NoError(t, rdb.RPush(ctx, keys.Queue, owners).Err())
					return
				}
				h := map[string]any{"h": owners[0], "t": owners[len(owners)-1]}
				for i, o := range owners {
					next := ""
					if i+1 < len(owners) {
						next = owners[i+1]
					}
					h["n:"+o] = next
				}
				require.NoError(t, rdb.HSet(ctx, keys.ScalableQueue(), h).Err())
			}
			r := &run{c: Config{Engine: engine}, keys: keys, observer: rdb,
				seqOf: map[string]int{"a": 1, "b": 2, "c": 3}, result: &Result{}}
			check := func(owner string, owners ...string) int {
				write(owners...)
				before := r.result.QueueMismatches
				r.checkQueue(ctx, owner)
				return r.result.QueueMismatches - before
			}
			assert.Equal(t, 0, check("c", "a", "b", "c"), "engine %d: in arrival order", engine)
			assert.Equal(t, 1, check("c", "b", "a", "c"), "engine %d: a before b", engine)
			assert.Equal(t, 1, check("b", "a", "c", "b"), "engine %d: the newcomer behind a later arrival", engine)
			assert.Equal(t, 1, check("c", "a", "x", "c"), "engine %d: a waiter that never arrived", engine)
			assert.Equal(t, 1, check("c", "a", "b"), "engine %d: the newcomer missing and not holding", engine)
			if engine == fair.Scalable {
				// a link back to the head: the walk ends, c is missed
				write("a", "b", "c")
				require.NoError(t, rdb.HSet(ctx, keys.ScalableQueue(), "n:b", "a").Err())
				q, _, err := r.readQueue(ctx, "c")
				require.NoError(t, err)
				assert.Equal(t, []string{"a", "b"}, q, "a loop")
			}
			require.NoError(t, rdb.HSet(ctx, keys.Name, "c", 1).Err())
			r.checkQueue(ctx, "c")
			assert.Equal(t, 4, r.result.QueueMismatches, "engine %d: granted meanwhile: the newcomer holds the lock", engine)
			assert.Equal(t, 6, r.result.QueueChecks)
			require.NoError(t, rdb.Del(ctx, keys.Name, keys.Queue, keys.ScalableQueue()).Err())
		}
	})
}
