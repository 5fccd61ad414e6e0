package semaphore_test

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

// Issue 30 item 7: every key a primitive writes has a bounded life. A fair
// semaphore's holder and queued waiter whose clients die without a release
// or a leave: once the lease and the waiter's deadline have passed, plus
// the keys' margins (10 s for the holders, 60 s for the queue:
// res_sem.lua's SEM_KEEP and SEM_QUEUE_KEEP), nothing of the semaphore is
// left but its pool and its token counter, the semaphore itself (they
// live until deleted, as Redisson's RSemaphore; miniredis's FastForward,
// and on redis-server the TTLs and the holders' end). Before, the
// holders, leases, queue and asks keys had no TTL and stayed for ever when
// no call came on the name.
func TestFairKeysEndAfterTheirClientsDie(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, _ := newFair(t, b, 1)
		k := wire.SemFairKeysFor(f.Name())
		rdb := b.Client(t)

		// The holder: granted with a 1 s lease, then its client dies (the
		// scripts' calls as a client makes them, and nothing after: no
		// release, no renewal, no give-back of a live client's handle).
		sc := wire.SemFairDefault()
		r, err := sc.Acquire(ctx, rdb, k, wire.SemArgs{Owner: "dead-client:1", Permits: 1, LeaseMs: 1000,
			WaitMs: 1000, GraceMs: 1000, Queue: true, AcquireID: "req1", LatchMs: 3000})
		require.NoError(t, err)
		require.True(t, r.Granted)
		// The waiter: queued behind it, then its client dies (no leave).
		r, err = sc.Acquire(ctx, rdb, k, wire.SemArgs{Owner: "dead-client:2", Permits: 1, LeaseMs: 1000,
			WaitMs: 1000, GraceMs: 1000, Queue: true, AcquireID: "req2", LatchMs: 3000})
		require.NoError(t, err)
		require.False(t, r.Granted)

		for _, c := range []struct {
			keys     []string
			min, max time.Duration
		}{
			// the lease end (1 s) plus 10 s
			{[]string{k.Holders, k.Leases}, 9 * time.Second, 11*time.Second + 100*time.Millisecond},
			// the waiter's deadline (about 2 s) plus 60 s
			{[]string{k.Queue, k.Wants}, 59 * time.Second, 62*time.Second + 100*time.Millisecond},
		} {
			for _, key := range c.keys {
				ttl, err := rdb.PTTL(ctx, key).Result()
				require.NoError(t, err)
				assert.Greater(t, ttl, c.min, "%s: TTL", key)
				assert.LessOrEqual(t, ttl, c.max, "%s: TTL", key)
			}
		}
		for _, key := range []string{k.Permits, k.Token} {
			ttl, err := rdb.PTTL(ctx, key).Result()
			require.NoError(t, err)
			assert.Equal(t, time.Duration(-1), ttl, "%s: the semaphore itself, no TTL", key)
		}

		left := func() []string {
			keys, err := rdb.Keys(ctx, "*"+f.Name()+"*").Result()
			require.NoError(t, err)
			slices.Sort(keys)
			return keys
		}
		want := []string{k.Permits, k.Token}
		slices.Sort(want)
		if b.Mini == nil {
			// the holders' keys end on the server's clock (a 62 s wait for
			// the queue's is left to miniredis)
			deadline := time.Now().Add(40 * time.Second)
			for slices.Contains(left(), k.Holders) && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
			}
			assert.NotContains(t, left(), k.Holders, "the holders key after the lease plus 10 s")
			assert.NotContains(t, left(), k.Leases, "the leases key after the lease plus 10 s")
			return
		}
		b.Mini.FastForward(12 * time.Second)
		assert.NotContains(t, left(), k.Holders, "the holders key after the lease plus 10 s")
		assert.Contains(t, left(), k.Queue, "the queue outlives the waiter's deadline by 60 s")
		b.Mini.FastForward(51 * time.Second)
		assert.Equal(t, want, left(), "keys left after every entry's end plus the margin")
	})
}

// A renewal moves the keys' end with the lease it sets (sem_fair_renew.lua):
// a live holder's keys never end before its lease. A deterministic check
// beside the rapid machine's broken variant, which catches a renewal that
// leaves the end alone only when a sequence happens to reach it.
func TestFairRenewalMovesTheKeysEnd(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, _ := newFair(t, b, 1)
		k := wire.SemFairKeysFor(f.Name())
		rdb := b.Client(t)
		sc := wire.SemFairDefault()
		r, err := sc.Acquire(ctx, rdb, k, wire.SemArgs{Owner: "c:1", Permits: 1, LeaseMs: 1000,
			WaitMs: 1000, GraceMs: 1000, Queue: true, AcquireID: "req1", LatchMs: 3000})
		require.NoError(t, err)
		require.True(t, r.Granted)
		st, err := sc.RenewEach(ctx, rdb, []wire.SemFairKeys{k}, []string{"c:1"}, 120_000)
		require.NoError(t, err)
		require.Len(t, st, 1)
		for _, key := range []string{k.Holders, k.Leases} {
			ttl, err := rdb.PTTL(ctx, key).Result()
			require.NoError(t, err)
			assert.Greater(t, ttl, 120*time.Second, "%s: the renewed lease (2 min) plus the margin", key)
		}
	})
}
