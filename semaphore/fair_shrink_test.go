package semaphore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/semaphore"
)

// Issue 30 item 8: SetPermits (or AddPermits) shrinking the pool below the
// queued head's ask removes the head from the queue: it must be woken then,
// so that its Acquire returns ErrTooMany at once (it slept until the
// holder's lease ended, 29.65 s with the watchdog's).
func TestShrinkBelowTheHeadsAskWakesIt(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		for _, shrink := range []struct {
			name string
			do   func(f *semaphore.Fair) error
		}{
			{"SetPermits", func(f *semaphore.Fair) error { return f.SetPermits(ctx, 2) }},
			{"AddPermits", func(f *semaphore.Fair) error { _, err := f.AddPermits(ctx, -1); return err }},
		} {
			t.Run(shrink.name, func(t *testing.T) {
				f, _ := newFair(t, b, 3)
				holder, err := f.Acquire(ctx, 3, 0) // watchdog-kept: its lease ends in 30 s
				require.NoError(t, err)
				defer holder.Release(ctx)
				w := sameFair(t, b, f)
				ch := enqueue(t, ctx, w, 3)
				start := time.Now()
				require.NoError(t, shrink.do(f))
				select {
				case r := <-ch:
					assert.ErrorIs(t, r.err, semaphore.ErrTooMany)
					assert.Nil(t, r.p)
					// The bug was the holder's whole lease (30 s).
					assert.Less(t, time.Since(start), 10*time.Second)
				case <-time.After(20 * time.Second):
					t.Fatal("the waiter removed by the shrink was not woken: it still waits")
				}
			})
		}
	})
}
