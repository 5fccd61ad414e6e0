package fair_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/faultproxy"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// A wait that Close ends returns ErrClosed (Client.Close's promise), even
// when its give-back cannot reach Redis and runs on until the wait's ctx
// ends: what ended the wait is what it was when it ended, not what the
// ctx says after the give-back. (The fault suite's TestPositionFaults
// caught a Lock whose client was cut off and then closed returning "lock
// wait ended by its context: context deadline exceeded" 1.2 s after Close.)
func TestCloseEndsAWaitWhoseGiveBackCannotReachRedis(t *testing.T) {
	for _, fault := range []string{"cut", "stall"} {
		for _, e := range engineCases {
			t.Run(fault+"/"+e.name, func(t *testing.T) {
				b := redistest.Real(t)
				ctx := testCtx(t)
				name := redistest.Prefix(t) + "lock"
				holder := newMutex(t, newClient(t, b.Client(t)), name, e.opt)
				require.NoError(t, holder.Lock(ctx))

				p := faultproxy.Start(t, b.Addr)
				rdb := redis.NewClient(&redis.Options{Addr: p.Addr})
				t.Cleanup(func() { _ = rdb.Close() })
				c, err := fairlock.NewClient(rdb, fairlock.WithCleanupTimeout(10*time.Second))
				require.NoError(t, err)
				m := newMutex(t, c, name, e.opt)

				// The wait's ctx ends well after Close but before the give-back
				// of a cut-off client would give up by itself.
				wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				done := make(chan error, 1)
				go func() { done <- m.Lock(wctx) }()
				require.Eventually(t, func() bool {
					k := wire.KeysFor(name)
					n, err := b.Client(t).Exists(ctx, k.Queue, k.ScalableQueue()).Result()
					return err == nil && n > 0
				}, 10*time.Second, 10*time.Millisecond, "the waiter never queued")
				undo := p.Cut
				if fault == "stall" {
					undo = p.Stall
				}
				defer undo()()
				time.Sleep(300 * time.Millisecond)
				_ = c.Close()
				select {
				case err := <-done:
					assert.True(t, errors.Is(err, fairlock.ErrClosed), "a wait ended by Close: %v", err)
				case <-time.After(20 * time.Second):
					t.Fatal("the wait never returned")
				}
				require.NoError(t, holder.Unlock(ctx))
			})
		}
	}
}
