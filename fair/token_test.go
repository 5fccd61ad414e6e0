package fair_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/fenced"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// The fair lock's token (docs/design.md, "Fencing tokens"): the take (free
// -> held) INCRs redisson_lock_token:{name}; a re-entry returns the
// holder's token unchanged; the next owner's take gets a larger one; a
// fenced lock on the same name continues the same sequence.
func TestFairTokens(t *testing.T) {
	eachEngine(t, func(t *testing.T, b *redistest.Backend, e engineCase) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		c := newClient(t, rdb)
		name := redistest.Prefix(t) + "lock"
		m, o := newMutex(t, c, name, e.opt), newMutex(t, c, name, e.opt)

		tok, err := m.Token(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(0), tok)
		t1, err := m.LockAndGetToken(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(1), t1)
		t2, err := m.LockAndGetToken(ctx)
		require.NoError(t, err)
		assert.Equal(t, t1, t2, "a re-entry keeps the holder's token")
		ok, err := m.TryLock(ctx) // plain re-entry: no INCR either
		require.NoError(t, err)
		require.True(t, ok)
		tok, _ = m.Token(ctx)
		assert.Equal(t, t1, tok)

		_, ok, err = o.TryLockAndGetToken(ctx, 0, 0)
		require.NoError(t, err)
		assert.False(t, ok)
		for range 3 {
			require.NoError(t, m.Unlock(ctx))
		}
		t3, ok, err := o.TryLockAndGetToken(ctx, 5*time.Second, 0)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, t1+1, t3, "the next owner's take INCRs")
		require.NoError(t, o.Unlock(ctx))
		require.NoError(t, m.Lock(ctx)) // a plain take INCRs too
		tok, _ = m.Token(ctx)
		assert.Equal(t, t3+1, tok)
		require.NoError(t, m.Unlock(ctx))

		f, err := fenced.New(c, name)
		require.NoError(t, err)
		t5, err := f.LockAndGetToken(ctx)
		require.NoError(t, err)
		assert.Equal(t, tok+1, t5, "a fenced lock on the name shares the sequence")
		require.NoError(t, f.Unlock(ctx))
		assert.Equal(t, wire.KeysFor(name).Token(), f.TokenKey())
	})
}

// A repeated copy of a fair acquisition returns the token the first copy
// got; after the lease of a holder ran out, the next take's token is newer.
func TestFairTokenRepeatedCopyAndExpiry(t *testing.T) {
	for _, set := range []struct {
		name string
		fs   wire.FairSet
	}{{"redisson", wire.Default().Fair()}, {"scalable", wire.ScalableDefault().Fair()}} {
		t.Run(set.name, func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
				ctx := testCtx(t)
				rdb := b.Client(t)
				k := wire.KeysFor(redistest.Prefix(t) + "lock")
				a := wire.Args{Owner: "c:1", LeaseMs: 10000, WaitMs: 60000, NowMs: time.Now().UnixMilli(), AcquireID: "r1", LatchMs: 10000}
				ok, _, t1, err := set.fs.TryLockWaitToken(ctx, rdb, k, a)
				require.NoError(t, err)
				require.True(t, ok)
				ok, t2, err := set.fs.TryLockToken(ctx, rdb, k, a) // a copy, by the other script
				require.NoError(t, err)
				require.True(t, ok)
				assert.Equal(t, t1, t2)
				assert.Equal(t, "1", rdb.HGet(ctx, k.Name, "c:1").Val())
				held, err := wire.Default().Abandon(ctx, rdb, k, a)
				require.NoError(t, err)
				assert.True(t, held, "a 'held:<token>' latch is a hold to give back")
				rdb.Del(ctx, k.Name) // the lease runs out
				b2 := wire.Args{Owner: "d:1", LeaseMs: 10000, WaitMs: 60000, NowMs: time.Now().UnixMilli()}
				ok, t3, err := set.fs.TryLockToken(ctx, rdb, k, b2)
				require.NoError(t, err)
				require.True(t, ok)
				assert.Greater(t, t3, t1)
			})
		})
	}
}
