package multi_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Issue 30 item 7: every key a primitive writes has a bounded life. A seat
// venue's holder and queued waiter whose clients die without a release or
// a leave: each of the venue's keys gets a TTL no shorter than the latest
// moment an entry matters (the lease end; the waiter's next call, within a
// grace) plus the margin (60 s, seats_common.lua's SEATS_KEEP) and no
// longer; once it has passed nothing of the venue is left but its token
// counter (miniredis's FastForward; on redis-server the TTLs are checked,
// a 60 s wait being too long for a test). Before, the venue's keys had no
// TTL and stayed for ever when no call came on the venue.
func TestSeatsKeysEndAfterTheirClientsDie(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		venue := redistest.Prefix(t) + "venue"
		k := wire.SeatsKeysFor(venue)
		seat := func(s string) string { return "{" + venue + "}:" + s }
		sc := wire.SeatsDefault()

		// The holder: seats A and B for 1 s, then its client dies (the
		// script calls as a client makes them, and nothing after).
		r, err := sc.Acquire(ctx, rdb, k, wire.SeatsArgs{Owner: "dead-client:1", Seats: []string{seat("A"), seat("B")},
			LeaseMs: 1000, GraceMs: 1000, Queue: true, AcquireID: "req1", LatchMs: 3000})
		require.NoError(t, err)
		require.True(t, r.Granted)
		// The waiter: queued for B and C behind it, then its client dies.
		r, err = sc.Acquire(ctx, rdb, k, wire.SeatsArgs{Owner: "dead-client:2", Seats: []string{seat("B"), seat("C")},
			LeaseMs: 1000, GraceMs: 1000, Queue: true, AcquireID: "req2", LatchMs: 3000})
		require.NoError(t, err)
		require.False(t, r.Granted)

		for _, key := range []string{k.Holds, k.Leases, k.Seat, k.Req, k.Queue} {
			ttl, err := rdb.PTTL(ctx, key).Result()
			require.NoError(t, err)
			// the lease end and the waiter's grace (1 s each) plus 60 s,
			// less slack for a loaded machine
			assert.Greater(t, ttl, 59*time.Second, "%s: TTL", key)
			assert.LessOrEqual(t, ttl, 61*time.Second+100*time.Millisecond, "%s: TTL", key)
		}
		ttl, err := rdb.PTTL(ctx, k.Token).Result()
		require.NoError(t, err)
		assert.Equal(t, time.Duration(-1), ttl, "the token counter is the venue's: no TTL")
		if b.Mini == nil {
			return
		}
		b.Mini.FastForward(62 * time.Second)
		keys, err := rdb.Keys(ctx, "*"+venue+"*").Result()
		require.NoError(t, err)
		slices.Sort(keys)
		assert.Equal(t, []string{k.Token}, keys, "keys left after every entry's end plus the margin")
	})
}

// A renewal moves the venue keys' end with the lease it sets
// (seats_renew.lua), deterministically (the rapid machine's broken variant
// is caught only when a sequence reaches the old end).
func TestSeatsRenewalMovesTheKeysEnd(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		venue := redistest.Prefix(t) + "venue"
		k := wire.SeatsKeysFor(venue)
		seat := func(s string) string { return "{" + venue + "}:" + s }
		sc := wire.SeatsDefault()
		r, err := sc.Acquire(ctx, rdb, k, wire.SeatsArgs{Owner: "c:1", Seats: []string{seat("A")},
			LeaseMs: 1000, GraceMs: 1000, Queue: true, AcquireID: "req1", LatchMs: 3000})
		require.NoError(t, err)
		require.True(t, r.Granted)
		st, err := sc.RenewEach(ctx, rdb, []wire.SeatsKeys{k}, []string{"c:1"}, 180_000)
		require.NoError(t, err)
		require.Len(t, st, 1)
		for _, key := range []string{k.Holds, k.Leases, k.Seat, k.Req} {
			ttl, err := rdb.PTTL(ctx, key).Result()
			require.NoError(t, err)
			assert.Greater(t, ttl, 180*time.Second, "%s: the renewed lease (3 min) plus the margin", key)
		}
	})
}
