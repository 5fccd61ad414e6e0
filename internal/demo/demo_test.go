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
	"github.com/fairlock-go/fairlock/lua"
)

func TestMain(m *testing.M) { os.Exit(redistest.MainLeakCheck(m)) }

// TestChecksCatchAnUnfairQueue runs the demo on a fair lock whose queue is
// deliberately broken (newcomers join at the head: last come, first served)
// and checks that the demo's figures show it: inversions, grants out of
// turn, and queue reads that are not in arrival order.
func TestChecksCatchAnUnfairQueue(t *testing.T) {
	const good = "redis.call('rpush', queue, owner)"
	broken := lua.Edit(func(file, src string) string {
		if file == lua.FileFairTryLockWait {
			require.Contains(t, src, good)
			return strings.Replace(src, good, "redis.call('lpush', queue, owner)", 1)
		}
		return src
	})
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// The first holder keeps the lock 25-75 ms while the three others
		// arrive (one round trip each), so the queue is at least two long.
		c := Config{Clients: 1, Goroutines: 4, Seats: 8, Hold: 50 * time.Millisecond,
			Kinds: []string{Fair}, Seed: 1, Redis: &redis.Options{Addr: b.Addr},
			Prefix: redistest.Prefix(t), Scripts: broken,
			// A waiter pushed back from the head is not woken; it finds
			// out at its next check, a lease later: keep that short.
			Options: []fairlock.Option{fairlock.WithLease(time.Second)}}
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
