package demo

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

func TestMain(m *testing.M) { os.Exit(redistest.MainLeakCheck(m)) }

// TestChecksCatchAnUnfairQueue runs the demo on a fair lock whose queue is
// deliberately broken (newcomers join at the head: last come, first served)
// and checks that the demo's figures show it: inversions, grants out of
// turn, and queue reads that are not in arrival order.
func TestChecksCatchAnUnfairQueue(t *testing.T) {
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
