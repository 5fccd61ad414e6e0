package multi_test

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
	"github.com/fairlock-go/fairlock/multi"
)

// Issue 30 item 2, the multi-seat hold: the first copy of an acquisition
// is granted, its reply is lost, and Redis stays away longer than the
// request's latch lives. The resend was refused ("owner already holds
// seats"), Acquire returned an error, and the give-back found no latch and
// gave nothing back: the seats stayed held by nobody until their lease
// ended. Now the resend recognises its own owner's grant and returns it;
// an acquisition that gives up instead gives the grant back. The latch
// lives 1 s here (WithLatchTTL) instead of 10 s.
func TestSeatsResendAfterTheLatchExpiredKeepsItsGrant(t *testing.T) {
	redistest.Long(t)
	b := redistest.Real(t)
	ctx := testCtx(t)
	const latch = time.Second
	v := newVenue(t, b)
	p := faultproxy.Start(t, b.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, ReadTimeout: 500 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb, fairlock.WithLatchTTL(latch))
	s, err := multi.NewSeats(c, v.seat("A"), v.seat("B"))
	require.NoError(t, err)
	other := v.seats(v.client(), "A", "B")
	holders := func() int64 {
		n, err := v.rdb.HLen(ctx, v.k.Holds).Result()
		require.NoError(t, err)
		return n
	}
	// The scripts are loaded (a stalled NOSCRIPT or "Function not found" would not come
	// back, and nothing would run).
	warm, err := s.Acquire(ctx, 0)
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctx))

	grantThenOutage := func(acq func() error) <-chan error {
		undoStall := p.StallReplies()
		done := make(chan error, 1)
		go func() { done <- acq() }()
		require.Eventually(t, func() bool { return holders() == 1 }, 30*time.Second, 5*time.Millisecond,
			"the first copy is granted in Redis")
		undoCut := p.Cut() // the held-back reply is lost with its connection
		undoStall()
		time.Sleep(latch + 2*time.Second) // the latch expires meanwhile
		undoCut()
		return done
	}

	t.Run("TheResendReturnsTheGrant", func(t *testing.T) {
		var hold *multi.SeatHold
		done := grantThenOutage(func() error {
			var err error
			hold, err = s.Acquire(ctx, time.Minute)
			return err
		})
		select {
		case err := <-done:
			require.NoError(t, err, "the resend met its own grant")
		case <-time.After(30 * time.Second):
			t.Fatal("Acquire did not return")
		}
		require.NotNil(t, hold)
		assert.Positive(t, hold.Token())
		require.NoError(t, hold.Release(ctx))
		assert.Zero(t, holders(), "released: the seats are free")
	})

	t.Run("GivingUpGivesTheGrantBack", func(t *testing.T) {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second) // ends during the outage
		defer cancel()
		done := grantThenOutage(func() error {
			_, err := s.Acquire(actx, time.Minute)
			return err
		})
		select {
		case err := <-done:
			require.ErrorIs(t, err, fairlock.ErrCanceled)
		case <-time.After(30 * time.Second):
			t.Fatal("Acquire did not return")
		}
		// The give-back runs in the background once Redis is back; the
		// bug kept the seats for their whole minute.
		start := time.Now()
		got, err := other.TryAcquire(ctx, 20*time.Second, 0)
		require.NoError(t, err)
		require.NotNil(t, got, "the grant of the request given up was never given back")
		t.Logf("the seats came back %v after Redis did", time.Since(start))
		require.NoError(t, got.Release(ctx))
	})
}
