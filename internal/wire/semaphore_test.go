package wire_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
	assert.Equal(t, "fairlock_acquire_latch:{seats}:r1", k.RequestLatch("r1"))
	assert.Equal(t, "redisson_unlock_latch:{seats}:r1", k.UnlockLatch("r1"))
	assert.Equal(t, "fairlock_sem_token:{seats}", k.Token)
	assert.Equal(t, "fairlock_sem_token:{t}:seats", wire.SemKeysFor("{t}:seats").Token)
	assert.Equal(t, "6964,6a", wire.SemOwner([]string{"id", "j"}))
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
		back, err := s.SemAbandon(ctx, rdb, k, late)
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

// The scripts of Go holds of permits: tokens, the release of a hold, the
// watchdog's renewal and the replica check, on both backends.
func TestSemaphoreHoldScripts(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "sem"
		k := wire.SemKeysFor(name)
		s := wire.Default()
		_, err := s.SemTrySetPermits(ctx, rdb, k, 3, "")
		require.NoError(t, err)

		a := wire.SemAcquireArgs{IDs: []string{"a1", "a2"}, Request: "r1", LeaseMs: 60_000, NowMs: wire.ServerClock, LatchMs: 60_000}
		ok, tok1, err := s.SemAcquire(ctx, rdb, k, a)
		require.NoError(t, err)
		require.True(t, ok)
		ok, again, err := s.SemAcquire(ctx, rdb, k, a)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, tok1, again, "a copy gets the first copy's token")
		exists, err := rdb.Exists(ctx, k.RequestLatch("r1")).Result()
		require.NoError(t, err)
		assert.Equal(t, int64(1), exists, "the latch is named by the request id")
		bID := wire.SemAcquireArgs{IDs: []string{"b1"}, Request: "r2", LeaseMs: 60_000, NowMs: wire.ServerClock, LatchMs: 60_000}
		ok, tok2, err := s.SemAcquire(ctx, rdb, k, bID)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Greater(t, tok2, tok1, "tokens increase")

		// Renewal: a's permits get the new lease; a hold with a permit gone
		// is reported gone and not renewed; a key of another type, broken.
		owner := wire.SemOwner(a.IDs)
		require.NoError(t, rdb.ZAdd(ctx, k.Timeouts, redis.Z{Score: 1, Member: "x1"}).Err()) // expired
		other := redistest.Prefix(t) + "notazset"
		require.NoError(t, rdb.Set(ctx, wire.SemKeysFor(other).Timeouts, "v", 0).Err())
		st, err := s.SemRenewEach(ctx, rdb, []string{name, name, other}, []string{owner, wire.SemOwner([]string{"a1", "x1"}), owner}, 3_600_000)
		require.NoError(t, err)
		assert.Equal(t, []wire.RenewStatus{wire.RenewOK, wire.RenewGone}, st[:2])
		assert.Equal(t, wire.RenewWrongType, st[2])
		require.NoError(t, rdb.ZRem(ctx, k.Timeouts, "x1").Err())
		lt, err := s.SemLeaseTime(ctx, rdb, k, "a2", wire.ServerClock, "")
		require.NoError(t, err)
		assert.InDelta(t, 3_600_000, lt, 60_000, "renewed to the new lease")

		// The replica check: 1 while held (the token counter unchanged).
		sc, keys, args := s.SemHeld(k, owner)
		v, err := sc.Run(ctx, rdb, keys, args...).Int64()
		require.NoError(t, err)
		assert.Equal(t, int64(1), v)
		tv, err := rdb.Get(ctx, k.Token).Int64()
		require.NoError(t, err)
		assert.Equal(t, tok2, tv)

		// Release of the hold: both back, once (the latch answers a retry).
		ok, err = s.SemReleaseHold(ctx, rdb, k, a.IDs, "u1", 60_000, wire.ServerClock, "")
		require.NoError(t, err)
		assert.True(t, ok)
		ok, err = s.SemReleaseHold(ctx, rdb, k, a.IDs, "u1", 60_000, wire.ServerClock, "")
		require.NoError(t, err)
		assert.True(t, ok, "a retry returns the first reply")
		ok, err = s.SemReleaseHold(ctx, rdb, k, a.IDs, "u2", 60_000, wire.ServerClock, "")
		require.NoError(t, err)
		assert.False(t, ok)
		c, err := s.SemCounts(ctx, rdb, k, wire.ServerClock, "")
		require.NoError(t, err)
		assert.Equal(t, wire.SemCounts{Available: 2, Acquired: 1, Exists: true}, c)
		v, err = sc.Run(ctx, rdb, keys, args...).Int64()
		require.NoError(t, err)
		assert.Equal(t, int64(0), v, "not held any more")
		// The latch of r1 says granted and over: a late copy takes nothing.
		_, _, err = s.SemAcquire(ctx, rdb, k, a)
		assert.ErrorIs(t, err, wire.ErrGrantOver)

		// A partial hold (one of b's ids released by id, a latch-less copy):
		// nothing taken, the time until the rest expires.
		cc := wire.SemAcquireArgs{IDs: []string{"c1", "c2"}, LeaseMs: 60_000, NowMs: wire.ServerClock}
		ok, _, err = s.SemAcquire(ctx, rdb, k, cc)
		require.NoError(t, err)
		require.True(t, ok)
		_, err = s.SemRelease(ctx, rdb, k, "c1", wire.ServerClock, "")
		require.NoError(t, err)
		ok, wait, err := s.SemAcquire(ctx, rdb, k, cc)
		require.NoError(t, err)
		assert.False(t, ok)
		assert.InDelta(t, 60_000, wait, 10_000)
		c, err = s.SemCounts(ctx, rdb, k, wire.ServerClock, "")
		require.NoError(t, err)
		assert.Equal(t, wire.SemCounts{Available: 1, Acquired: 2, Exists: true}, c)
	})
}
