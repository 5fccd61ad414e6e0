package fair_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/faultproxy"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

// An Unlock that Redis never saw (the connection was cut) must not leave
// the lock held by the watchdog: the hold ends, the release is retried in
// the background, and the lock is free once Redis is reachable again (at
// the latest when the lease ends). Reentrant: an unconfirmed Unlock of one
// count of two keeps the hold, one count fewer.
func TestUnconfirmedUnlockStopsRenewingAndIsRetried(t *testing.T) {
	redistest.Long(t)
	for _, e := range engineCases {
		t.Run(e.name, func(t *testing.T) {
			b := redistest.Real(t)
			ctx := testCtx(t)
			name := redistest.Prefix(t) + "lock"
			p := faultproxy.Start(t, b.Addr)
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr})
			t.Cleanup(func() { _ = rdb.Close() })
			// The watchdog's lease (renewed every 10 s): long enough that the key
			// cannot expire by itself before the background release reaches it on
			// a loaded machine (an expiry is no confirmed release, and the loss
			// would rightly stay).
			const lease = 30 * time.Second
			c := newClient(t, rdb, fairlock.WithLease(lease), fairlock.WithCleanupTimeout(time.Second))
			m := newMutex(t, c, name, e.opt)
			other := newMutex(t, newClient(t, b.Client(t)), name, e.opt)

			require.NoError(t, m.Lock(ctx))
			require.NoError(t, m.Lock(ctx)) // two counts
			undo := p.Cut()                 // what was sent is lost, as on a primary that died
			uctx, cancel := context.WithTimeout(ctx, time.Second)
			require.Error(t, m.Unlock(uctx), "Redis never saw the unlock")
			cancel()
			assert.Nil(t, m.Err(), "one count of two: still held")
			uctx, cancel = context.WithTimeout(ctx, time.Second)
			require.Error(t, m.Unlock(uctx), "Redis never saw the unlock")
			cancel()
			undo()
			select {
			case <-m.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the hold whose unlock was sent still looks held: its watchdog renews it")
			}
			ok, err := other.TryLockFor(ctx, 3*lease, 0)
			require.NoError(t, err)
			require.True(t, ok, "the lock never came free")
			require.NoError(t, other.Unlock(ctx))
			assert.Eventually(t, func() bool { return m.Err() == nil }, 30*time.Second, 10*time.Millisecond,
				"the background release was confirmed: the loss is withdrawn")
		})
	}
}

// Two unconfirmed Unlocks of one hold (two counts), confirmed out of order:
// the second reached Redis first (one count of two, its reply lost), then
// the first one's background retry freed the lock. That retry is the hold's
// confirmed release, so the loss reported at the second Unlock is withdrawn,
// though the second's own retry then finds the lock free.
func TestUnconfirmedUnlocksConfirmedOutOfOrder(t *testing.T) {
	redistest.Long(t)
	for _, e := range engineCases {
		t.Run(e.name, func(t *testing.T) {
			b := redistest.Real(t)
			ctx := testCtx(t)
			name := redistest.Prefix(t) + "lock"
			p := faultproxy.Start(t, b.Addr)
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr})
			t.Cleanup(func() { _ = rdb.Close() })
			c := newClient(t, rdb, fairlock.WithLease(30*time.Second), fairlock.WithCleanupTimeout(time.Second))
			m := newMutex(t, c, name, e.opt)
			other := newMutex(t, newClient(t, b.Client(t)), name, e.opt)

			// Once through, so that Redis knows the unlock script (a first call's
			// NOSCRIPT or "Function not found" reply would be held back below).
			require.NoError(t, m.Lock(ctx))
			require.NoError(t, m.Unlock(ctx))
			require.NoError(t, m.Lock(ctx))
			require.NoError(t, m.Lock(ctx))
			undoCut := p.Cut() // the first Unlock never reaches Redis
			uctx, cancel := context.WithTimeout(ctx, time.Second)
			require.Error(t, m.Unlock(uctx))
			cancel()
			// Its background retries back off (0.1, 0.2, 0.4, 0.8, 1.6 s...):
			// the next one after these 2 s comes about a second later, once
			// the second Unlock has reached Redis.
			time.Sleep(2 * time.Second)
			undoCut()
			// A held-back reply stalls a new connection's handshake: open
			// connections first, while replies still come.
			var warm sync.WaitGroup
			for range 10 {
				warm.Add(1)
				go func() { defer warm.Done(); _ = rdb.Ping(ctx).Err() }()
			}
			warm.Wait()
			undoStall := p.StallReplies() // the second reaches Redis, its reply does not come back
			uctx, cancel = context.WithTimeout(ctx, time.Second)
			require.Error(t, m.Unlock(uctx))
			cancel()
			require.ErrorIs(t, m.Err(), fairlock.ErrLost, "the last count's unlock was not confirmed")
			// The first Unlock's background retry reaches Redis meanwhile and
			// frees the lock (its reply held back too).
			require.Eventually(t, func() bool {
				ok, err := other.TryLock(ctx)
				if err != nil || !ok {
					return false
				}
				require.NoError(t, other.Unlock(ctx))
				return true
			}, 15*time.Second, 50*time.Millisecond, "the first unlock's retry never freed the lock")
			undoStall()
			assert.Eventually(t, func() bool { return m.Err() == nil }, 20*time.Second, 10*time.Millisecond,
				"the hold's release was confirmed (by the first unlock's retry): the loss is withdrawn")
		})
	}
}
