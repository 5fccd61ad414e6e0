package semaphore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/faultproxy"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/semaphore"
)

// Issue 30 item 2: the first copy of a fair-semaphore acquisition is
// granted, its reply is lost, and Redis stays away longer than the
// request's latch lives. The resend was refused ("owner already holds
// permits"), Acquire returned an error, and the give-back found no latch
// and gave nothing back: the permits stayed held by nobody until their
// lease ended. Now the resend recognises its own owner's grant and
// returns it; an acquisition that gives up instead (its ctx ended) gives
// the grant back. The latch lives 1 s here (WithLatchTTL) instead of 10 s.

const resendLatch = time.Second

// grantThenOutage starts acq through a proxy whose replies are held back,
// waits until Redis shows the grant (held reports it), then cuts the
// network for longer than the latch lives and restores it. It returns what
// acq returned.
func grantThenOutage(t *testing.T, p *faultproxy.Proxy, held func() bool, acq func() error) <-chan error {
	t.Helper()
	undoStall := p.StallReplies()
	done := make(chan error, 1)
	go func() { done <- acq() }()
	eventually(t, "the first copy is granted in Redis", held)
	undoCut := p.Cut() // the held-back reply is lost with its connection
	undoStall()
	time.Sleep(resendLatch + 2*time.Second) // the latch expires meanwhile
	undoCut()
	return done
}

func proxiedClient(t *testing.T, b *redistest.Backend) (*faultproxy.Proxy, *fairlock.Client) {
	t.Helper()
	p := faultproxy.Start(t, b.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, ReadTimeout: 500 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := fairlock.NewClient(rdb, fairlock.WithLatchTTL(resendLatch))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return p, c
}

func TestFairResendAfterTheLatchExpiredKeepsItsGrant(t *testing.T) {
	redistest.Long(t)
	b := redistest.Real(t)
	ctx := context.Background()
	p, c := proxiedClient(t, b)
	f, err := semaphore.NewFair(c, redistest.Prefix(t)+"fair")
	require.NoError(t, err)
	setPool(t, f, 1)
	other := sameFair(t, b, f)
	held := func() bool { return state(t, other).Holders == 1 }
	// The scripts are loaded (a stalled NOSCRIPT or "Function not found" would not come
	// back, and nothing would run).
	warm, err := f.Acquire(ctx, 1, 0)
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctx))

	t.Run("TheResendReturnsTheGrant", func(t *testing.T) {
		var permit *semaphore.Permit
		done := grantThenOutage(t, p, held, func() error {
			var err error
			permit, err = f.Acquire(ctx, 1, time.Minute)
			return err
		})
		select {
		case err := <-done:
			require.NoError(t, err, "the resend met its own grant")
		case <-time.After(30 * time.Second):
			t.Fatal("Acquire did not return")
		}
		require.NotNil(t, permit)
		assert.Positive(t, permit.Token())
		assert.Equal(t, 1, state(t, other).Holders)
		require.NoError(t, permit.Release(ctx))
		assert.Equal(t, 0, state(t, other).Holders, "released: the pool is whole")
	})

	t.Run("GivingUpGivesTheGrantBack", func(t *testing.T) {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second) // ends during the outage
		defer cancel()
		done := grantThenOutage(t, p, held, func() error {
			_, err := f.Acquire(actx, 1, time.Minute)
			return err
		})
		select {
		case err := <-done:
			require.ErrorIs(t, err, fairlock.ErrCanceled)
		case <-time.After(30 * time.Second):
			t.Fatal("Acquire did not return")
		}
		// The give-back runs in the background once Redis is back; the
		// bug kept the permit for its whole minute.
		start := time.Now()
		got, err := other.TryAcquire(ctx, 1, 20*time.Second, 0)
		require.NoError(t, err)
		require.NotNil(t, got, "the grant of the request given up was never given back")
		t.Logf("the permit came back %v after Redis did", time.Since(start))
		require.NoError(t, got.Release(ctx))
	})
}
