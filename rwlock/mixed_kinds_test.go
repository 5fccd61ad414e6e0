package rwlock_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/fenced"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/reentrant"
	"github.com/fairlock-go/fairlock/rwlock"
)

// otherKind is a lock of another kind on the same name.
type otherKind struct {
	name   string
	lock   func(ctx context.Context) (bool, error)
	unlock func(ctx context.Context) error
	held   func(ctx context.Context) (bool, error)
	done   func() <-chan struct{}
}

func otherKinds(t *testing.T, c *fairlock.Client, name string) []otherKind {
	re, err := reentrant.New(c, name)
	require.NoError(t, err)
	fa, err := fair.New(c, name)
	require.NoError(t, err)
	fs, err := fair.New(c, name, fair.WithEngine(fair.Scalable))
	require.NoError(t, err)
	fe, err := fenced.New(c, name)
	require.NoError(t, err)
	return []otherKind{
		{"reentrant", re.TryLock, re.Unlock, re.IsHeld, re.Done},
		{"fair", fa.TryLock, fa.Unlock, fa.IsHeld, fa.Done},
		{"fair-scalable", fs.TryLock, fs.Unlock, fs.IsHeld, fs.Done},
		{"fenced", fe.TryLock, fe.Unlock, fe.IsHeld, fe.Done},
	}
}

// Holder-knows (d), mixing kinds: a lock hash with no "mode" field is held
// by a lock of another kind (reentrant, fair, fenced); it keeps both halves
// of a read-write lock on the same name out, and the read-write lock's calls
// leave it alone. Before, the reader's TryLock succeeded, wrote "mode" into
// the reentrant holder's hash, and its unlock deleted the key: the reentrant
// holder's IsHeld turned false while its Done stayed open.
func TestOtherKindKeepsTheRWLockOut(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		base := redistest.Prefix(t)
		c := newClient(t, b.Client(t))
		for i, k := range []string{"reentrant", "fair", "fair-scalable", "fenced"} {
			name := base + k
			kind := otherKinds(t, c, name)[i]
			rw := newRW(t, newClient(t, b.Client(t)), name)
			ok, err := kind.lock(ctx)
			require.NoError(t, err)
			require.True(t, ok, k)
			for _, l := range []*rwlock.Lock{rw.ReadLock(), rw.WriteLock()} {
				ok, err := l.TryLock(ctx)
				require.NoError(t, err)
				assert.False(t, ok, "%s: the %s half got in beside a %s holder", k, half(l, rw), k)
				if ok {
					_ = l.Unlock(ctx)
				}
				_ = l.Unlock(ctx) // not held: changes nothing
				forced, err := l.ForceUnlock(ctx)
				require.NoError(t, err)
				assert.False(t, forced, "%s: the %s half's ForceUnlock deleted a %s lock", k, half(l, rw), k)
			}
			held, err := kind.held(ctx)
			require.NoError(t, err)
			assert.True(t, held, "%s: the holder no longer holds after the read-write lock's calls", k)
			select {
			case <-kind.done():
				t.Errorf("%s: the holder's Done closed", k)
			default:
			}
			require.NoError(t, kind.unlock(ctx))
			// Freed: the read-write lock gets in, and the other kind is kept
			// out in turn.
			for _, l := range []*rwlock.Lock{rw.ReadLock(), rw.WriteLock()} {
				ok, err := l.TryLock(ctx)
				require.NoError(t, err)
				require.True(t, ok, "%s: the %s half is refused a free lock", k, half(l, rw))
				ok, err = kind.lock(ctx)
				require.NoError(t, err)
				assert.False(t, ok, "%s got in beside the %s half", k, half(l, rw))
				require.NoError(t, l.Unlock(ctx))
			}
		}
	})
}

func half(l *rwlock.Lock, rw *rwlock.RWMutex) string {
	if l == rw.ReadLock() {
		return "read"
	}
	return "write"
}
