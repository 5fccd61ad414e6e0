package fair_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

// Issue 12, case 3: a waiter that gives up while Redis refuses writes
// (CLIENT PAUSE ... WRITE) cannot leave the queue then; its give-up is
// retried in the background, so once Redis takes writes again no ghost of
// it stays queued (a ghost head would cost every later arrival a grace).
func TestGiveUpDuringAnOutageLeavesTheQueue(t *testing.T) {
	redistest.Long(t)
	for _, e := range engineCases {
		t.Run(e.name, func(t *testing.T) {
			srv := redistest.StartT(t) // CLIENT PAUSE stops the whole server: a private one
			b := srv.Backend()
			ctx := testCtx(t)
			name := redistest.Prefix(t) + "lock"
			admin := b.Client(t)
			holder := newMutex(t, newClient(t, b.Client(t)), name, e.opt)
			require.NoError(t, holder.Lock(ctx))
			// No go-redis retries and a short read timeout: a write Redis
			// holds back is abandoned quickly, as by an impatient client.
			rdb := redis.NewClient(&redis.Options{Addr: b.Addr, MaxRetries: -1, ReadTimeout: time.Second})
			t.Cleanup(func() { _ = rdb.Close() })
			c := newClient(t, rdb, fairlock.WithCleanupTimeout(time.Second))
			waiter := newMutex(t, c, name, e.opt)
			got := make(chan error, 1)
			go func() {
				_, err := waiter.TryLockFor(ctx, 3*time.Second, 0)
				got <- err
			}()
			require.Eventually(t, func() bool {
				q, _ := e.queue(t, admin, name)
				return slices.Contains(q, waiter.Owner())
			}, 10*time.Second, 10*time.Millisecond, "the waiter queues")
			require.NoError(t, admin.Do(ctx, "client", "pause", 6000, "write").Err())
			select {
			case <-got: // gave up (the wait ran out, or its give-up could not be written)
			case <-time.After(15 * time.Second):
				t.Fatal("TryLockFor did not return")
			}
			require.NoError(t, admin.Do(ctx, "client", "unpause").Err())
			require.Eventually(t, func() bool {
				q, _ := e.queue(t, admin, name)
				return !slices.Contains(q, waiter.Owner())
			}, 15*time.Second, 50*time.Millisecond, "the departed waiter still queued after Redis takes writes again")
			require.NoError(t, holder.Unlock(context.Background()))
		})
	}
}
