package reentrant_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/reentrant"
)

// grantThenStallHook, once armed, lets the first script call that takes
// the lock (acquire.lua's "acquired") run, then cancels the
// caller's ctx and holds the reply back for stall: the reply of a woken
// attempt that took the lock is lost to a ctx that ended meanwhile.
type grantThenStallHook struct {
	armed   *atomic.Bool
	refused *atomic.Int32 // acquire.lua's replies "held by another" (a TTL)
	cancel  context.CancelFunc
	stall   time.Duration
	done    <-chan struct{} // ends the stall early (the test's end)
}

func (h grantThenStallHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h grantThenStallHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		_, isScript := wire.ScriptCall(cmd)
		if c, ok := cmd.(*redis.Cmd); ok && isScript && err == nil {
			if _, ttl := c.Val().(int64); ttl {
				h.refused.Add(1)
			}
		}
		if isScript && acquired(cmd, err) && h.armed.CompareAndSwap(true, false) {
			h.cancel()
			select {
			case <-time.After(h.stall):
			case <-h.done:
			}
		}
		return err
	}
}

// acquired reports acquire.lua's "acquired" reply: nil or "OK".
func acquired(cmd redis.Cmder, err error) bool {
	if errors.Is(err, redis.Nil) {
		return true
	}
	c, ok := cmd.(*redis.Cmd)
	return ok && err == nil && c.Val() == "OK"
}

func (h grantThenStallHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Issue 33: a ctx that ends while a woken waiter's attempt is in flight
// (the attempt a wake-up asked for, after the holder's unlock; it took the
// lock, its reply is late) must still end Lock at once, with the grant
// given back: the caller was told it does not hold the lock, so nobody may
// hold it. (The guard of any change to how a woken attempt is sent: issue
// 33 tried sending it from a worker that received the wake-up.)
func TestCancelDuringWokenAttemptGivesBack(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		name := redistest.Prefix(t) + "lock"
		holder := newMutex(t, newClient(t, b.Client(t)), name)
		require.NoError(t, holder.Lock(ctx))

		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		armed := &atomic.Bool{}
		const stall = 6 * time.Second
		waiterRDB := b.Client(t)
		done := make(chan struct{})
		refused := &atomic.Int32{}
		waiterRDB.AddHook(grantThenStallHook{armed: armed, refused: refused, cancel: cancel, stall: stall, done: done})
		wc := newClient(t, waiterRDB)
		t.Cleanup(func() { close(done) }) // before the client's Close
		waiter := newMutex(t, wc, name)
		armed.Store(true) // the waiter's attempts fail until the holder's unlock: the first grant is the woken one
		got := make(chan error, 1)
		go func() { got <- waiter.Lock(wctx) }()
		waitSubscribed(t, b, wc)
		// Its first attempt and the re-check after subscribing were
		// refused: the next attempt is one a wake-up asks for.
		require.Eventually(t, func() bool { return refused.Load() >= 2 }, 10*time.Second, time.Millisecond)
		require.NoError(t, holder.Unlock(ctx))
		var err error
		select {
		case err = <-got:
		case <-time.After(stall / 2):
			t.Fatalf("Lock did not return within %v of its ctx's end during its woken attempt", stall/2)
		}
		assert.True(t, errors.Is(err, reentrant.ErrCanceled), "%v", err)
		assert.True(t, errors.Is(err, context.Canceled), "%v", err)
		assert.False(t, armed.Load(), "no attempt of the waiter took the lock (the case this test is about)")
		assert.ErrorIs(t, waiter.Unlock(ctx), reentrant.ErrNotHeld)
		// The grant the attempt took is given back in the background.
		assert.Eventually(t, func() bool {
			locked, err := holder.IsLocked(ctx)
			return err == nil && !locked
		}, 10*time.Second, 5*time.Millisecond,
			"the lock stays held by a waiter that was told it does not hold it")
	})
}
