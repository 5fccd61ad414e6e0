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
// the keys' margin (10 s, res_sem.lua's SEM_KEEP), nothing of the
// semaphore is left but its pool and its token counter, the semaphore
// itself (they live until deleted, as Redisson's RSemaphore). Before, the
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

		for _, key := range []string{k.Holders, k.Leases, k.Queue, k.Wants} {
			ttl, err := rdb.PTTL(ctx, key).Result()
			require.NoError(t, err)
			// at least the last entry's end (lease 1 s; the waiter's
			// deadline about 2 s) plus the 10 s margin, less slack for a
			// loaded machine; at most the waiter's deadline plus the margin
			assert.Greater(t, ttl, 9*time.Second, "%s: TTL", key)
			assert.LessOrEqual(t, ttl, 12*time.Second+100*time.Millisecond, "%s: TTL", key)
		}

		left := func() []string {
			keys, err := rdb.Keys(ctx, "*"+f.Name()+"*").Result()
			require.NoError(t, err)
			slices.Sort(keys)
			return keys
		}
		want := []string{k.Permits, k.Token}
		slices.Sort(want)
		if b.Mini != nil {
			b.Mini.FastForward(13 * time.Second)
			assert.Equal(t, want, left(), "keys left after every entry's end plus the margin")
			return
		}
		deadline := time.Now().Add(40 * time.Second)
		for !slices.Equal(left(), want) && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		assert.Equal(t, want, left(), "keys left after every entry's end plus the margin")
	})
}
