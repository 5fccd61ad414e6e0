package wire_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

func TestSemKeyNamesAreRedissons(t *testing.T) {
	k := wire.SemKeysFor("seats")
	assert.Equal(t, "seats", k.Pool)
	assert.Equal(t, "{seats}:timeout", k.Timeouts)
	assert.Equal(t, "redisson_sc:{seats}", k.Channel)
	assert.Equal(t, "fairlock_acquire_latch:{seats}:6964", k.Latch("id"))
	tagged := wire.SemKeysFor("{t}:seats")
	assert.Equal(t, "{t}:seats:timeout", tagged.Timeouts)
	assert.Equal(t, "redisson_sc:{t}:seats", tagged.Channel)
}

// The semaphore scripts' contract on both backends, with the caller's
// clock (Redisson's) and with the server's.
func TestSemaphoreScriptContract(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		k := wire.SemKeysFor(redistest.Prefix(t) + "sem")
		s := wire.Default()
		const now = int64(1_700_000_000_000)

		ok, err := s.SemTrySetPermits(ctx, rdb, k, 2, "")
		require.NoError(t, err)
		assert.True(t, ok)
		ok, err = s.SemTrySetPermits(ctx, rdb, k, 5, "")
		require.NoError(t, err)
		assert.False(t, ok)

		a := wire.SemAcquireArgs{IDs: []string{"p1"}, LeaseMs: 1000, NowMs: now, LatchMs: 60000}
		got, _, err := s.SemAcquire(ctx, rdb, k, a)
		require.NoError(t, err)
		assert.True(t, got)
		// A copy of the same request does not take a second permit.
		got, _, err = s.SemAcquire(ctx, rdb, k, a)
		require.NoError(t, err)
		assert.True(t, got)
		c, err := s.SemCounts(ctx, rdb, k, now, "")
		require.NoError(t, err)
		assert.Equal(t, wire.SemCounts{Available: 1, Acquired: 1, Exists: true}, c)

		got, _, err = s.SemAcquire(ctx, rdb, k, wire.SemAcquireArgs{IDs: []string{"p2", "p3"}, LeaseMs: wire.NoLease, NowMs: now, LatchMs: 60000})
		require.NoError(t, err)
		assert.False(t, got)
		_, wait, err := s.SemAcquire(ctx, rdb, k, wire.SemAcquireArgs{IDs: []string{"p4", "p5"}, LeaseMs: wire.NoLease, NowMs: now + 400})
		require.NoError(t, err)
		assert.Equal(t, int64(600), wait, "time until p1 expires")

		// p1 expires at now+1000: an acquisition after it reclaims it.
		got, _, err = s.SemAcquire(ctx, rdb, k, wire.SemAcquireArgs{IDs: []string{"p6", "p7"}, LeaseMs: wire.NoLease, NowMs: now + 1000})
		require.NoError(t, err)
		assert.True(t, got)
		lt, err := s.SemLeaseTime(ctx, rdb, k, "p6", now+1000, "")
		require.NoError(t, err)
		assert.Equal(t, int64(-1), lt)
		ok, err = s.SemRelease(ctx, rdb, k, "p1", now+1000, "")
		require.NoError(t, err)
		assert.False(t, ok, "p1 was reclaimed")
		// The latch of p1's request says granted and over.
		_, _, err = s.SemAcquire(ctx, rdb, k, a)
		assert.True(t, errors.Is(err, wire.ErrGrantOver), "%v", err)

		n, err := s.SemReleaseMany(ctx, rdb, k, []string{"p6", "p7"}, now+1000, "")
		require.NoError(t, err)
		assert.Equal(t, int64(2), n)

		// Abandon: the permits come back and a late copy does nothing.
		late := wire.SemAcquireArgs{IDs: []string{"q1"}, LeaseMs: wire.NoLease, NowMs: now, LatchMs: 60000}
		got, _, err = s.SemAcquire(ctx, rdb, k, late)
		require.NoError(t, err)
		require.True(t, got)
		back, err := s.SemAbandon(ctx, rdb, k, late.IDs, 60000, "")
		require.NoError(t, err)
		assert.Equal(t, int64(1), back)
		_, _, err = s.SemAcquire(ctx, rdb, k, late)
		assert.True(t, errors.Is(err, wire.ErrAbandoned), "%v", err)
		c, err = s.SemCounts(ctx, rdb, k, now, "")
		require.NoError(t, err)
		assert.Equal(t, wire.SemCounts{Available: 2, Acquired: 0, Exists: true}, c)

		// The server's clock: a lease of 1 h from the server's now.
		got, _, err = s.SemAcquire(ctx, rdb, k, wire.SemAcquireArgs{IDs: []string{"s1"}, LeaseMs: 3_600_000, NowMs: wire.ServerClock})
		require.NoError(t, err)
		require.True(t, got)
		score, err := rdb.ZScore(ctx, k.Timeouts, "s1").Result()
		require.NoError(t, err)
		server, err := rdb.Time(ctx).Result()
		require.NoError(t, err)
		assert.InDelta(t, float64(server.Add(time.Hour).UnixMilli()), score, 60_000)
		lt, err = s.SemLeaseTime(ctx, rdb, k, "s1", wire.ServerClock, "")
		require.NoError(t, err)
		assert.InDelta(t, 3_600_000, lt, 60_000)
	})
}
