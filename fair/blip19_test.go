package fair_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/faultproxy"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Issue 19 (e): a deadline key of the wrong type (the Redisson engine's
// zset; the scalable engine repairs its own queue key instead) fails the
// waiting call at once with the script's error. Leaving the queue fails on the same key
// for good, so it is not retried while the caller waits (it used to hold
// the caller for the whole cleanup timeout).
func TestWrongTypedQueueKeyIsReportedAtOnce(t *testing.T) {
	for _, e := range engineCases[:1] {
		t.Run(e.name, func(t *testing.T) {
			b := redistest.Real(t)
			ctx := testCtx(t)
			name := redistest.Prefix(t) + "lock"
			direct := b.Client(t)
			c := newClient(t, b.Client(t), fairlock.WithCleanupTimeout(5*time.Second))
			holder := newMutex(t, c, name, e.opt)
			require.NoError(t, holder.Lock(ctx))
			k := wire.KeysFor(name)
			require.NoError(t, direct.Set(ctx, k.Timeouts, "not a queue", 0).Err())
			m := newMutex(t, c, name, e.opt, fair.WithWaitSlot(time.Minute))
			start := time.Now()
			ok, err := m.TryLockFor(ctx, 10*time.Second, 0)
			took := time.Since(start)
			require.False(t, ok)
			require.Error(t, err)
			var re redis.Error
			assert.True(t, errors.As(err, &re), "the script's error is wrapped: %v", err)
			assert.Less(t, took, 2*time.Second, "reported after %v", took)
			require.NoError(t, holder.Unlock(ctx))
		})
	}
}

// Close while a handle's next Lock waits for the give-up of its previous,
// abandoned wait (stuck behind a stalled connection): the Lock returns
// ErrClosed at once, as every wait does at Close, not when its ctx ends.
// (faulttests TestReplicaFailover, seed 8732444046175496877: "a wait ended
// by Close did not return ErrClosed ... context deadline exceeded".)
func TestCloseEndsALockWaitingForAGiveUp(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	name := redistest.Prefix(t) + "lock"
	p := faultproxy.Start(t, b.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	holder := newMutex(t, newClient(t, b.Client(t)), name)
	require.NoError(t, holder.Lock(ctx))
	c, err := fairlock.NewClient(rdb)
	require.NoError(t, err)
	m := newMutex(t, c, name)

	first, cancel := context.WithCancel(ctx)
	res := make(chan error, 1)
	go func() { res <- m.Lock(first) }()
	direct := b.Client(t)
	require.Eventually(t, func() bool {
		return slices.Contains(direct.LRange(ctx, wire.KeysFor(name).Queue, 0, -1).Val(), m.Owner())
	}, 10*time.Second, time.Millisecond)
	undo := p.Stall() // the give-up cannot get through
	defer undo()
	cancel()
	require.ErrorIs(t, <-res, context.Canceled)

	second := make(chan error, 1)
	go func() { second <- m.Lock(ctx) }() // waits for the give-up
	time.Sleep(300 * time.Millisecond)
	closing := time.Now()
	closed := make(chan struct{})
	go func() { _ = c.Close(); close(closed) }()
	select {
	case err := <-second:
		assert.ErrorIs(t, err, fairlock.ErrClosed)
		assert.Less(t, time.Since(closing), 1500*time.Millisecond, "Lock returned %v after Close began", time.Since(closing))
	case <-time.After(15 * time.Second):
		t.Fatal("Lock did not return after Close")
	}
	undo()
	<-closed
	require.NoError(t, holder.Unlock(ctx))
}
