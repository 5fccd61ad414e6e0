package rwlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/redistest"
)

// Issue 30, item 11: a re-entry of either half with a shorter lease keeps
// the lock for max(TTL, lease) (the H6 row of docs/design.md): the longer
// hold goes on, so the holder's validity must not drop to the re-entry's
// lease, nor may the client give the hold back when that lease ends. Before
// the fix another owner took the write lock 1.0 s into a 6 s write hold
// (Redisson's testWriteLockExpiration expects the hold past its lease's
// re-entry).
func TestReentryWithShorterLeaseKeepsTheHold(t *testing.T) {
	const lease, short = 6 * time.Second, time.Second
	for _, half := range []string{"write", "read"} {
		t.Run(half, func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
				ctx := testCtx(t)
				name := redistest.Prefix(t) + "rw"
				holder := newRW(t, newClient(t, b.Client(t)), name)
				other := newRW(t, newClient(t, b.Client(t)), name)
				l := holder.WriteLock()
				if half == "read" {
					l = holder.ReadLock()
				}
				start := time.Now()
				require.NoError(t, l.LockWithLease(ctx, lease))
				first := l.ValidUntil()
				ok, err := l.TryLockFor(ctx, short, short) // the re-entry
				require.NoError(t, err)
				require.True(t, ok)
				assert.False(t, l.ValidUntil().Before(first), "the re-entry cut the validity: %v < %v", l.ValidUntil(), first)

				// Another owner's writer tries for 3 s: the hold lasts 6 s.
				got, err := other.WriteLock().TryLockFor(ctx, 3*time.Second, 0)
				require.NoError(t, err)
				if got {
					t.Fatalf("another owner took the write lock %v into a %v hold", time.Since(start).Round(100*time.Millisecond), lease)
				}
				select {
				case <-l.Done():
					t.Fatalf("the hold ended at %v: %v", time.Since(start).Round(100*time.Millisecond), l.Err())
				default:
				}
				held, err := l.IsHeld(ctx)
				require.NoError(t, err)
				assert.True(t, held)
				n, err := l.HoldCount(ctx)
				require.NoError(t, err)
				assert.Equal(t, 2, n)
				require.NoError(t, l.Unlock(ctx))
				require.NoError(t, l.Unlock(ctx))
				got, err = other.WriteLock().TryLock(ctx)
				require.NoError(t, err)
				assert.True(t, got, "released: the other owner takes it")
				require.NoError(t, other.WriteLock().Unlock(ctx))
			})
		})
	}
}
