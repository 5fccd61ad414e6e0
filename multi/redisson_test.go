package multi_test

// Redisson's RedissonMultiLockTest scenarios, through the Go API. Redisson
// makes one owner per thread over shared RLock objects; here each caller
// has its own handles (a handle is an owner).

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/multi"
)

// testLockUnlock: lock(10 s) holds every member; unlock releases them.
func TestRedissonLockUnlock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		c := newClient(t, b.Client(t))
		ns := names(t, 3)
		l := newMulti(t, handles(t, kinds[0], c, ns)...)
		require.NoError(t, l.LockWithLease(ctx, 10*time.Second))
		held, err := l.IsHeld(ctx)
		require.NoError(t, err)
		require.True(t, held)
		require.Len(t, locked(t, ctx, c, ns), 3)
		require.NoError(t, l.Unlock(ctx))
		held, err = l.IsHeld(ctx)
		require.NoError(t, err)
		require.False(t, held)
		require.Empty(t, locked(t, ctx, c, ns))
	})
}

// testWaitAndLeaseTimeouts: ten owners tryLock(no wait, 10 s) at once on
// the same three locks: exactly one gets them.
func TestRedissonWaitAndLeaseTimeouts(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		c := newClient(t, b.Client(t))
		ns := names(t, 3)
		var got atomic.Int32
		var wg sync.WaitGroup
		winners := make(chan *multi.MultiLock, 10)
		for i := range 10 {
			order := ns
			if i%2 == 1 {
				order = reversed(ns)
			}
			l := newMulti(t, handles(t, kinds[0], c, order)...)
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := l.TryLockFor(ctx, 0, 10*time.Second)
				if err == nil && ok {
					got.Add(1)
					winners <- l
				}
			}()
		}
		wg.Wait()
		close(winners)
		require.EqualValues(t, 1, got.Load())
		for l := range winners {
			require.NoError(t, l.Unlock(ctx))
		}
	})
}

// testMultiThreads: a second owner's lock() waits for the first's unlock.
func TestRedissonMultiThreads(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		ns := names(t, 3)
		first := newMulti(t, handles(t, kinds[1], newClient(t, b.Client(t)), ns)...)
		second := newMulti(t, handles(t, kinds[1], newClient(t, b.Client(t)), reversed(ns))...)
		require.NoError(t, first.Lock(ctx))
		var released atomic.Bool
		go func() {
			time.Sleep(500 * time.Millisecond)
			released.Store(true)
			_ = first.Unlock(ctx)
		}()
		require.NoError(t, second.Lock(ctx))
		require.True(t, released.Load(), "the second owner got the locks only after the first released them")
		require.NoError(t, second.Unlock(ctx))
	})
}

// test: one member on each of three deployments; while held, another
// owner's tryLock() fails, twice.
func TestRedissonThreeDeployments(t *testing.T) {
	for _, real := range []bool{false, true} {
		t.Run(map[bool]string{false: "miniredis", true: "redis-server"}[real], func(t *testing.T) {
			ctx := testCtx(t)
			ds := deployments(t, 3, real)
			ns := names(t, 3)
			mine, theirs := make([]multi.Member, 3), make([]multi.Member, 3)
			for i, d := range ds {
				mine[i] = kinds[0].make(t, newClient(t, d.Client(t)), ns[i])
				theirs[i] = kinds[0].make(t, newClient(t, d.Client(t)), ns[i])
			}
			l := newMulti(t, mine...)
			require.NoError(t, l.Lock(ctx))
			other := newMulti(t, theirs...)
			for range 2 {
				ok, err := other.TryLock(ctx)
				require.NoError(t, err)
				require.False(t, ok)
			}
			require.NoError(t, l.Unlock(ctx))
			ok, err := other.TryLock(ctx)
			require.NoError(t, err)
			require.True(t, ok)
			require.NoError(t, other.Unlock(ctx))
		})
	}
}

// deployments returns n independent Redis deployments: miniredis instances,
// or redis-servers started for t (stopped at its end).
func deployments(t *testing.T, n int, real bool) []*redistest.Backend {
	out := make([]*redistest.Backend, n)
	for i := range out {
		if real {
			out[i] = redistest.StartT(t).Backend()
		} else {
			out[i] = redistest.Mini(t)
		}
	}
	return out
}

var _ = context.Background
