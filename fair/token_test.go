package fair_test

import (
	"strconv"
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

// Issue 30, item 3: tokens past 1e14 stay exact and strictly increasing
// across a release to a queued waiter (on the scalable engine a direct
// handoff, whose grant message and latch carry the token as text), a plain
// take and a fenced lock on the same name; up to 2^53 - 1 here, see
// TestFairTokensEndAt2p53 for 2^53 itself. Before the fix, on redis-server
// the handoff wrote the token with Lua's %.14g: the waiter got
// 123456789012350 while the counter was at ...347.
func TestFairTokensPast1e14(t *testing.T) {
	for _, start := range []int64{1e14 - 3, 123456789012345, 1<<53 - 5} {
		t.Run(strconv.FormatInt(start, 10), func(t *testing.T) {
			eachEngine(t, func(t *testing.T, b *redistest.Backend, e engineCase) {
				ctx := testCtx(t)
				rdb := b.Client(t)
				name := redistest.Prefix(t) + "lock"
				c := newClient(t, rdb)
				tokenKey := wire.KeysFor(name).Token()
				require.NoError(t, rdb.Set(ctx, tokenKey, start, 0).Err())
				holder, waiter := newMutex(t, c, name, e.opt), newMutex(t, c, name, e.opt)

				var toks []int64
				t1, err := holder.LockAndGetToken(ctx)
				require.NoError(t, err)
				toks = append(toks, t1)
				type res struct {
					tok int64
					err error
				}
				got := make(chan res, 1)
				go func() {
					tok, err := waiter.LockAndGetToken(ctx)
					got <- res{tok, err}
				}()
				e.waitQueued(t, rdb, name, 1)
				require.NoError(t, holder.Unlock(ctx))
				r := <-got
				require.NoError(t, r.err)
				toks = append(toks, r.tok)
				cur, err := waiter.Token(ctx)
				require.NoError(t, err)
				assert.Equal(t, r.tok, cur, "the waiter's token is the counter's value")
				require.NoError(t, waiter.Unlock(ctx))

				t3, err := holder.LockAndGetToken(ctx)
				require.NoError(t, err)
				toks = append(toks, t3)
				require.NoError(t, holder.Unlock(ctx))
				f, err := fenced.New(c, name)
				require.NoError(t, err)
				t4, err := f.LockAndGetToken(ctx)
				require.NoError(t, err)
				toks = append(toks, t4)
				require.NoError(t, f.Unlock(ctx))

				assert.Equal(t, []int64{start + 1, start + 2, start + 3, start + 4}, toks)
				assert.Equal(t, strconv.FormatInt(start+4, 10), rdb.Get(ctx, tokenKey).Val())
			})
		})
	}
}

// Issue 30, item 3: the last exact token is 2^53. The take that reaches
// it succeeds and its holder re-enters with it; every later acquisition
// (fair, both engines, and fenced) returns an error at once, never a token
// that repeats or goes back, and changes nothing.
func TestFairTokensEndAt2p53(t *testing.T) {
	const end = int64(1) << 53
	eachEngine(t, func(t *testing.T, b *redistest.Backend, e engineCase) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		c := newClient(t, rdb)
		tokenKey := wire.KeysFor(name).Token()
		require.NoError(t, rdb.Set(ctx, tokenKey, end-1, 0).Err())
		holder, other := newMutex(t, c, name, e.opt), newMutex(t, c, name, e.opt)
		t1, err := holder.LockAndGetToken(ctx)
		require.NoError(t, err)
		assert.Equal(t, end, t1)
		t2, err := holder.LockAndGetToken(ctx)
		require.NoError(t, err)
		assert.Equal(t, end, t2, "the re-entry keeps the holder's token")
		require.NoError(t, holder.Unlock(ctx))
		require.NoError(t, holder.Unlock(ctx))

		f, err := fenced.New(c, name)
		require.NoError(t, err)
		start := time.Now()
		for what, try := range map[string]func() error{
			"fair Lock":    func() error { _, err := other.LockAndGetToken(ctx); return err },
			"fair TryLock": func() error { _, err := other.TryLock(ctx); return err },
			"fair TryLockFor": func() error {
				_, _, err := other.TryLockAndGetToken(ctx, 5*time.Second, 0)
				return err
			},
			"fenced Lock": func() error { _, err := f.LockAndGetToken(ctx); return err },
		} {
			err := try()
			require.Error(t, err, what)
			assert.Contains(t, err.Error(), "2^53", what)
		}
		assert.Less(t, time.Since(start), 5*time.Second, "refused at once, not retried")
		assert.Equal(t, strconv.FormatInt(end, 10), rdb.Get(ctx, tokenKey).Val())
		assert.Zero(t, rdb.Exists(ctx, name).Val(), "nobody holds the lock")
	})
}
