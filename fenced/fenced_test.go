package fenced_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fenced"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

func TestMain(m *testing.M) { os.Exit(redistest.MainLeakCheck(m)) }

func newClient(t testing.TB, rdb redis.UniversalClient, opts ...fairlock.Option) *fairlock.Client {
	t.Helper()
	c, err := fairlock.NewClient(rdb, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newMutex(t testing.TB, c *fairlock.Client, name string) *fenced.Mutex {
	t.Helper()
	m, err := fenced.New(c, name)
	require.NoError(t, err)
	return m
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Redisson's rule (reference section 8): every successful acquisition
// INCRs the token, re-entries and plain Lock/TryLock included; Token is a
// GET of the key; the key is redisson_lock_token:{name}.
func TestTokens(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		c := newClient(t, rdb)
		name := redistest.Prefix(t) + "lock"
		m, o := newMutex(t, c, name), newMutex(t, c, name)
		assert.Equal(t, "redisson_lock_token:{"+name+"}", m.TokenKey())

		tok, err := m.Token(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(0), tok, "no token issued yet")

		t1, err := m.LockAndGetToken(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(1), t1)
		t2, err := m.LockAndGetToken(ctx) // re-entry: a new token
		require.NoError(t, err)
		assert.Equal(t, int64(2), t2)
		require.NoError(t, m.Lock(ctx)) // plain Lock INCRs too
		tok, err = m.Token(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(3), tok)
		n, _ := m.HoldCount(ctx)
		assert.Equal(t, 3, n)

		_, ok, err := o.TryLockAndGetToken(ctx, 0, 0)
		require.NoError(t, err)
		assert.False(t, ok, "held by another owner")
		tok, _ = m.Token(ctx)
		assert.Equal(t, int64(3), tok, "a failed attempt does not INCR")

		for range 3 {
			require.NoError(t, m.Unlock(ctx))
		}
		got, ok, err := o.TryLockAndGetToken(ctx, time.Second, 0)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, int64(4), got)
		ok, err = m.TryLock(ctx)
		require.NoError(t, err)
		assert.False(t, ok)
		require.NoError(t, o.Unlock(ctx))
		assert.Equal(t, "4", rdb.Get(ctx, m.TokenKey()).Val())
	})
}

// The lease of LockAndGetTokenWithLease is used (Redisson ignores it), and
// a holder whose lease ran out is followed by a strictly larger token.
func TestLeaseAndExpiry(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		c := newClient(t, rdb)
		name := redistest.Prefix(t) + "lock"
		m, o := newMutex(t, c, name), newMutex(t, c, name)
		t1, err := m.LockAndGetTokenWithLease(ctx, 10*time.Second)
		require.NoError(t, err)
		pttl := rdb.PTTL(ctx, name).Val()
		assert.Greater(t, pttl, 5*time.Second)
		assert.LessOrEqual(t, pttl, 10*time.Second, "the explicit lease, not the watchdog's 30 s")
		// The lease runs out (fast-forward, or a delete on the real server,
		// as Redis would expire it).
		if b.Mini != nil {
			b.Mini.FastForward(11 * time.Second)
		} else {
			rdb.Del(ctx, name)
		}
		t2, err := o.LockAndGetToken(ctx)
		require.NoError(t, err)
		assert.Greater(t, t2, t1, "the next owner's token is newer")
		require.NoError(t, o.Unlock(ctx))
		_, err = m.LockAndGetTokenWithLease(ctx, -time.Second)
		assert.ErrorIs(t, err, fenced.ErrInvalidValue)
		// Lease 0 is LockAndGetToken's: the watchdog keeps the lock.
		t3, err := m.LockAndGetTokenWithLease(ctx, 0)
		require.NoError(t, err)
		assert.Greater(t, t3, t2)
		left, err := m.RemainingLease(ctx)
		require.NoError(t, err)
		assert.Greater(t, left, 10*time.Second, "the watchdog's lease")
		require.NoError(t, m.Unlock(ctx))
	})
}

// Concurrent owners: each acquisition's token is unique and the tokens
// follow the order of the holds.
func TestTokensOrderHolds(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		name := redistest.Prefix(t) + "lock"
		var mu sync.Mutex
		var order []int64 // tokens in the order the holds ran
		var wg sync.WaitGroup
		for i := range 3 {
			c := newClient(t, b.Client(t))
			for range 3 {
				m := newMutex(t, c, name)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 4 {
						tok, err := m.LockAndGetToken(ctx)
						if !assert.NoError(t, err, "client %d", i) {
							return
						}
						mu.Lock()
						order = append(order, tok)
						mu.Unlock()
						assert.NoError(t, m.Unlock(ctx))
					}
				}()
			}
		}
		wg.Wait()
		require.Len(t, order, 36)
		for i := 1; i < len(order); i++ {
			assert.Greater(t, order[i], order[i-1], "holds ran in token order")
		}
	})
}

// A repeated copy of one acquisition request (the same request id, as
// go-redis resends after a timeout) replies the token the first copy got,
// without a second INCR or hold; abandoning it gives the hold back.
func TestRepeatedCopyKeepsItsToken(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		k := wire.KeysFor(redistest.Prefix(t) + "lock")
		a := wire.Args{Owner: "c:1", LeaseMs: 10000, AcquireID: "req1", LatchMs: 10000}
		ok, _, t1, err := wire.Default().FencedAcquire(ctx, rdb, k, a)
		require.NoError(t, err)
		require.True(t, ok)
		ok, _, t2, err := wire.Default().FencedAcquire(ctx, rdb, k, a)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, t1, t2, "a repeated copy gets the first copy's token")
		assert.Equal(t, "1", rdb.HGet(ctx, k.Name, "c:1").Val(), "one hold")
		assert.Equal(t, "1", rdb.Get(ctx, k.Token()).Val(), "one INCR")
		// A new request re-enters with a new token.
		a2 := a
		a2.AcquireID = "req2"
		_, _, t3, err := wire.Default().FencedAcquire(ctx, rdb, k, a2)
		require.NoError(t, err)
		assert.Equal(t, t1+1, t3)
		// Abandoning req2 ('held:<token>'): the hold is the caller's to give back.
		held, err := wire.Default().Abandon(ctx, rdb, k, a2)
		require.NoError(t, err)
		assert.True(t, held)
		ok, _, _, err = wire.Default().FencedAcquire(ctx, rdb, k, a2)
		assert.ErrorIs(t, err, wire.ErrAbandoned)
		assert.False(t, ok)
		// Another owner is refused with the holder's PTTL.
		ok, ttl, tok, err := wire.Default().FencedAcquire(ctx, rdb, k, wire.Args{Owner: "d:1", LeaseMs: 1000})
		require.NoError(t, err)
		assert.False(t, ok)
		assert.Equal(t, int64(0), tok)
		assert.Greater(t, ttl, int64(5000))
	})
}

func TestBadInput(t *testing.T) {
	rdb := redistest.Mini(t).Client(t)
	c := newClient(t, rdb)
	_, err := fenced.New(nil, "x")
	assert.ErrorIs(t, err, fenced.ErrInvalidValue)
	_, err = fenced.New(c, "")
	assert.ErrorIs(t, err, fenced.ErrInvalidName)
	m := newMutex(t, c, "x")
	_, _, err = m.TryLockAndGetToken(context.Background(), -1, 0)
	assert.ErrorIs(t, err, fenced.ErrInvalidValue)
	_, err = m.Token(nil) //nolint:staticcheck // the nil ctx is the point
	assert.ErrorIs(t, err, fenced.ErrInvalidValue)
	// A token key that holds no integer: the acquisition fails and writes
	// nothing.
	rdb.Set(context.Background(), m.TokenKey(), "junk", 0)
	_, err = m.LockAndGetToken(testCtx(t))
	require.Error(t, err)
	assert.Equal(t, int64(0), rdb.Exists(context.Background(), "x").Val())
}

// Issue 30, item 3: fencing tokens past 1e14 are exact and strictly
// increasing across a release to a waiting owner; the last exact token is
// 2^53: the acquisition that reaches it succeeds, every later one (a
// re-entry included: every fenced acquisition INCRs) returns an error at
// once and changes nothing, never a token that repeats or goes back.
func TestTokensPast1e14AndEnd(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		c := newClient(t, rdb)
		for _, start := range []int64{1e14 - 2, 123456789012345, 1<<53 - 3} {
			name := redistest.Prefix(t) + "lock"
			a, w := newMutex(t, c, name), newMutex(t, c, name)
			require.NoError(t, rdb.Set(ctx, a.TokenKey(), start, 0).Err())
			t1, err := a.LockAndGetToken(ctx)
			require.NoError(t, err)
			got := make(chan int64, 1)
			go func() {
				tok, err := w.LockAndGetToken(ctx)
				assert.NoError(t, err)
				got <- tok
			}()
			time.Sleep(50 * time.Millisecond) // (the waiter may or may not wait: order is what counts)
			require.NoError(t, a.Unlock(ctx))
			t2 := <-got
			require.NoError(t, w.Unlock(ctx))
			assert.Equal(t, []int64{start + 1, start + 2}, []int64{t1, t2}, "start %d", start)
		}

		const end = int64(1) << 53
		name := redistest.Prefix(t) + "lock"
		m := newMutex(t, c, name)
		require.NoError(t, rdb.Set(ctx, m.TokenKey(), end-1, 0).Err())
		tok, err := m.LockAndGetToken(ctx)
		require.NoError(t, err)
		assert.Equal(t, end, tok)
		start := time.Now()
		_, err = m.LockAndGetToken(ctx) // a re-entry INCRs: past 2^53
		require.Error(t, err)
		assert.Contains(t, err.Error(), "2^53")
		assert.Equal(t, "1", rdb.HGet(ctx, name, ownerOf(t, rdb, name)).Val(), "the refused re-entry added no hold")
		require.NoError(t, m.Unlock(ctx))
		_, _, err = m.TryLockAndGetToken(ctx, 0, 0)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "2^53")
		assert.Less(t, time.Since(start), 5*time.Second, "refused at once, not retried")
		assert.Zero(t, rdb.Exists(ctx, name).Val())
		assert.Equal(t, "9007199254740992", rdb.Get(ctx, m.TokenKey()).Val())
	})
}

// ownerOf is the one hold field of the lock hash name.
func ownerOf(t *testing.T, rdb *redis.Client, name string) string {
	t.Helper()
	f, err := rdb.HKeys(context.Background(), name).Result()
	require.NoError(t, err)
	require.Len(t, f, 1)
	return f[0]
}
