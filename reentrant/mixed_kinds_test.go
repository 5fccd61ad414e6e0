package reentrant_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

// A fair waiter queued behind a reentrant holder on the same name is woken
// by the reentrant Unlock and ForceUnlock (it listens on its own channel,
// not the plain one): it gets the lock long before the holder's 30 s lease
// would have told it to look again.
func TestReentrantReleaseWakesAFairWaiter(t *testing.T) {
	for _, engine := range []fair.Engine{fair.Redisson, fair.Scalable} {
		for _, force := range []bool{false, true} {
			name := "unlock"
			if force {
				name = "force"
			}
			if engine == fair.Scalable {
				name += "-scalable"
			}
			t.Run(name, func(t *testing.T) {
				redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
					ctx := testCtx(t)
					lock := redistest.Prefix(t) + "lock"
					c := newClient(t, b.Client(t))
					holder := newMutex(t, c, lock)
					require.NoError(t, holder.Lock(ctx))
					waiter, err := fair.New(newClient(t, b.Client(t)), lock, fair.WithEngine(engine))
					require.NoError(t, err)
					got := make(chan error, 1)
					go func() {
						wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
						defer cancel()
						got <- waiter.Lock(wctx)
					}()
					rdb := b.Client(t)
					k := waiter.Name()
					require.Eventually(t, func() bool {
						return rdb.Exists(ctx, "redisson_lock_queue:{"+k+"}", "fairlock_squeue:{"+k+"}").Val() == 1
					}, 10*time.Second, 10*time.Millisecond, "the fair waiter queues")
					time.Sleep(200 * time.Millisecond) // let it subscribe and go to sleep
					if force {
						_, err = holder.ForceUnlock(ctx)
					} else {
						err = holder.Unlock(ctx)
					}
					require.NoError(t, err)
					require.NoError(t, <-got, "the fair waiter gets the lock after the reentrant release")
					require.NoError(t, waiter.Unlock(ctx))
				})
			})
		}
	}
}
