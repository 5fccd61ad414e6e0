package semaphore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/semaphore"
)

// Issue 30 item 4: a pool size beyond 2^53 (what a Lua number counts
// exactly) bricked a semaphore: SetPermits/AddPermits(2^60) returned nil
// and stored "1.152921504606847e+18"; every later fair-semaphore call
// failed, and the Expirable acquisition INCRed the token and died half
// way. Go refuses such counts (ErrInvalidValue, nothing sent) and so do
// the scripts (an error reply, nothing written).

const huge = 1 << 60

func TestPoolBeyond2To53IsRefusedInGo(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		s, _ := newSem(t, b)
		_, err := s.TrySetPermits(ctx, huge)
		assert.ErrorIs(t, err, fairlock.ErrInvalidValue, "TrySetPermits")
		assert.ErrorIs(t, s.SetPermits(ctx, huge), fairlock.ErrInvalidValue, "SetPermits")
		assert.ErrorIs(t, s.AddPermits(ctx, huge), fairlock.ErrInvalidValue, "AddPermits")
		assert.ErrorIs(t, s.AddPermits(ctx, -huge), fairlock.ErrInvalidValue, "AddPermits negative")
		_, err = s.TryAcquire(ctx, huge, 0, 0)
		assert.ErrorIs(t, err, fairlock.ErrInvalidValue, "TryAcquire")
		rdb := b.Client(t)
		n, err := rdb.Exists(ctx, s.Name()).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "nothing was written")
		require.NoError(t, s.SetPermits(ctx, semaphore.MaxPermits))
		a, _, _ := counts(t, s)
		assert.Equal(t, semaphore.MaxPermits, a, "2^53 itself is a pool")
		assert.ErrorIs(t, s.SetPermits(ctx, semaphore.MaxPermits+1), fairlock.ErrInvalidValue)
		// Large counts within range are stored with every digit (a Lua
		// number written as %.14g would store "1e+15").
		require.NoError(t, s.SetPermits(ctx, semaphore.MaxPermits-1))
		require.NoError(t, s.AddPermits(ctx, 1))
		a, _, _ = counts(t, s)
		assert.Equal(t, semaphore.MaxPermits, a)
		require.NoError(t, s.SetPermits(ctx, 1e15+7))
		a, _, _ = counts(t, s)
		assert.Equal(t, int(1e15+7), a)

		f, _ := newFair(t, b, -1)
		assert.ErrorIs(t, f.SetPermits(ctx, huge), fairlock.ErrInvalidValue, "Fair.SetPermits")
		require.NoError(t, f.SetPermits(ctx, 3))
		_, err = f.AddPermits(ctx, huge)
		assert.ErrorIs(t, err, fairlock.ErrInvalidValue, "Fair.AddPermits")
		_, err = f.TryAcquire(ctx, huge, 0, 0)
		assert.ErrorIs(t, err, fairlock.ErrInvalidValue, "Fair.TryAcquire")
		st, err := f.State(ctx)
		require.NoError(t, err, "the fair semaphore still works")
		assert.Equal(t, 3, st.Pool)
		require.NoError(t, f.SetPermits(ctx, 1e15+1))
		v, err := f.AddPermits(ctx, 1)
		require.NoError(t, err)
		assert.Equal(t, int(1e15+2), v)
		st, err = f.State(ctx)
		require.NoError(t, err)
		assert.Equal(t, int(1e15+2), st.Pool)
	})
}

func TestPoolBeyond2To53IsRefusedInLua(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		sc := wire.Default()
		k := wire.SemKeysFor(redistest.Prefix(t) + "sem")
		_, err := sc.SemTrySetPermits(ctx, rdb, k, huge, "")
		assert.Error(t, err, "sem_try_set_permits")
		assert.Error(t, sc.SemSetPermits(ctx, rdb, k, huge, ""), "sem_set_permits")
		assert.Error(t, sc.SemAddPermits(ctx, rdb, k, huge, ""), "sem_add_permits")
		n, err := rdb.Exists(ctx, k.Pool).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "nothing was written")
		// The sum out of range: refused, the pool kept.
		require.NoError(t, sc.SemSetPermits(ctx, rdb, k, semaphore.MaxPermits-1, ""))
		assert.Error(t, sc.SemAddPermits(ctx, rdb, k, 2, ""), "a pool pushed beyond 2^53")
		v, err := rdb.Get(ctx, k.Pool).Result()
		require.NoError(t, err)
		assert.Equal(t, "9007199254740991", v)
		// A pool written by someone else beyond 2^53: the acquisition is
		// refused before anything is written (the token is not INCRed).
		require.NoError(t, rdb.Set(ctx, k.Pool, "1.152921504606847e+18", 0).Err())
		_, _, err = sc.SemAcquire(ctx, rdb, k, wire.SemAcquireArgs{IDs: []string{"0123456789abcdef"}, LeaseMs: 1000, NowMs: wire.ServerClock})
		assert.Error(t, err)
		n, err = rdb.Exists(ctx, k.Token, k.Timeouts).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "the refused acquisition wrote nothing (no token INCR, no permit)")

		fs := wire.SemFairDefault()
		fk := wire.SemFairKeysFor(redistest.Prefix(t) + "fair")
		a := wire.SemArgs{GraceMs: 5000}
		_, _, err = fs.SetPermits(ctx, rdb, fk, huge, a)
		assert.Error(t, err, "sem_fair_set_permits")
		n, err = rdb.Exists(ctx, fk.Permits).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "nothing was written")
		_, _, err = fs.SetPermits(ctx, rdb, fk, 3, a)
		require.NoError(t, err)
		_, err = fs.AddPermits(ctx, rdb, fk, huge, a)
		assert.Error(t, err, "sem_fair_add_permits")
		st, err := fs.State(ctx, rdb, fk)
		require.NoError(t, err, "the fair semaphore still works")
		assert.Equal(t, int64(3), st.Pool)
	})
}
