package wire_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	_ "github.com/fairlock-go/fairlock/lua" // the script sources

	"github.com/redis/go-redis/v9"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

func TestEveryScriptLoads(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		for _, f := range wire.Files {
			sc := wire.Default().Script(f)
			sha, err := sc.Load(context.Background(), rdb).Result()
			require.NoError(t, err, f)
			assert.Equal(t, sc.Hash(), sha, f)
		}
		for _, f := range wire.ScalableFiles {
			sc := wire.ScalableDefault().Script(f)
			sha, err := sc.Load(context.Background(), rdb).Result()
			require.NoError(t, err, f)
			assert.Equal(t, sc.Hash(), sha, f)
		}
		for _, f := range wire.SemFairFiles {
			sc := wire.SemFairDefault().Script(f)
			sha, err := sc.Load(context.Background(), rdb).Result()
			require.NoError(t, err, f)
			assert.Equal(t, sc.Hash(), sha, f)
		}
		for _, f := range wire.SeatsFiles {
			sc := wire.SeatsDefault().Script(f)
			sha, err := sc.Load(context.Background(), rdb).Result()
			require.NoError(t, err, f)
			assert.Equal(t, sc.Hash(), sha, f)
		}
	})
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "orders", "{order}:seat", "x{tag}y", "}a{b}"} {
		assert.NoError(t, wire.ValidateName(ok), ok)
	}
	for _, bad := range []string{"", "a{b", "a{}b", "a}b", "{"} {
		err := wire.ValidateName(bad)
		assert.True(t, errors.Is(err, wire.ErrInvalidName), "%q: %v", bad, err)
	}
}

func TestKeyNamesAreRedissons(t *testing.T) {
	k := wire.KeysFor("seats")
	assert.Equal(t, "seats", k.Name)
	assert.Equal(t, "redisson_lock__channel:{seats}", k.Channel)
	assert.Equal(t, "redisson_lock_queue:{seats}", k.Queue)
	assert.Equal(t, "redisson_lock_timeout:{seats}", k.Timeouts)
	assert.Equal(t, "redisson_unlock_latch:{seats}:abc", k.Latch("abc"))
	assert.Equal(t, "redisson_lock__channel:{seats}:u:7", k.WaiterChannel("u:7"))

	tagged := wire.KeysFor("{t}:seats")
	assert.Equal(t, "redisson_lock_queue:{t}:seats", tagged.Queue)
	assert.Equal(t, "redisson_lock__channel:{t}:seats", tagged.Channel)
}

// The reentrant scripts' basic contract, on both backends.
func TestReentrantScriptContract(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		k := wire.KeysFor(redistest.Prefix(t) + "lock")
		s := wire.Default()
		a := wire.Args{Owner: "u:1", LeaseMs: 30000, RequestID: "r1", LatchMs: 10000}
		other := wire.Args{Owner: "u:2", LeaseMs: 30000, RequestID: "r2", LatchMs: 10000}

		ok, _, err := s.Acquire(ctx, rdb, k, a)
		require.NoError(t, err)
		assert.True(t, ok)
		ok, ttl, err := s.Acquire(ctx, rdb, k, other)
		require.NoError(t, err)
		assert.False(t, ok)
		assert.InDelta(t, 30000, ttl, 1000)
		ok, _, err = s.Acquire(ctx, rdb, k, a) // re-entry
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, "2", rdb.HGet(ctx, k.Name, "u:1").Val())

		res, err := s.Unlock(ctx, rdb, k, other)
		require.NoError(t, err)
		assert.Equal(t, wire.NotHeld, res)
		res, err = s.Unlock(ctx, rdb, k, a)
		require.NoError(t, err)
		assert.Equal(t, wire.StillHeld, res)
		res, err = s.Unlock(ctx, rdb, k, a) // same request id: the latch answers
		require.NoError(t, err)
		assert.Equal(t, wire.StillHeld, res)
		assert.Equal(t, "1", rdb.HGet(ctx, k.Name, "u:1").Val())
		a.RequestID = "r3"
		res, err = s.Unlock(ctx, rdb, k, a)
		require.NoError(t, err)
		assert.Equal(t, wire.Released, res)
		assert.Zero(t, rdb.Exists(ctx, k.Name).Val())

		renewed, err := s.Renew(ctx, rdb, []string{k.Name}, []string{"u:1"}, 1000)
		require.NoError(t, err)
		assert.Equal(t, []bool{false}, renewed)
	})
}

// The acquisition latch (latch_common.lua): copies of one request count once,
// and a request given up with Abandon does nothing when a copy arrives late.
// Every acquisition script of every engine keeps it.
func TestAcquisitionLatch(t *testing.T) {
	type acquire func(ctx context.Context, rdb *redis.Client, k wire.Keys, a wire.Args) (bool, error)
	scripts := map[string]acquire{
		"reentrant": func(ctx context.Context, rdb *redis.Client, k wire.Keys, a wire.Args) (bool, error) {
			ok, _, err := wire.Default().Acquire(ctx, rdb, k, a)
			return ok, err
		},
		"fair-try": func(ctx context.Context, rdb *redis.Client, k wire.Keys, a wire.Args) (bool, error) {
			return wire.Default().FairTryLock(ctx, rdb, k, a)
		},
		"fair-wait": func(ctx context.Context, rdb *redis.Client, k wire.Keys, a wire.Args) (bool, error) {
			ok, _, err := wire.Default().FairTryLockWait(ctx, rdb, k, a)
			return ok, err
		},
		"scalable-try": func(ctx context.Context, rdb *redis.Client, k wire.Keys, a wire.Args) (bool, error) {
			return wire.ScalableDefault().TryLock(ctx, rdb, k, a)
		},
		"scalable-wait": func(ctx context.Context, rdb *redis.Client, k wire.Keys, a wire.Args) (bool, error) {
			ok, _, err := wire.ScalableDefault().TryLockWait(ctx, rdb, k, a)
			return ok, err
		},
	}
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		for name, try := range scripts {
			t.Run(name, func(t *testing.T) {
				k := wire.KeysFor(redistest.Prefix(t) + "lock")
				now := int64(1_000_000)
				a := wire.Args{Owner: "u:1", LeaseMs: 30000, WaitMs: 60000, NowMs: now, AcquireID: "acq1", LatchMs: 10000}

				// Two copies of one request: one hold.
				for range 2 {
					ok, err := try(ctx, rdb, k, a)
					require.NoError(t, err)
					require.True(t, ok)
				}
				assert.Equal(t, "1", rdb.HGet(ctx, k.Name, "u:1").Val(), "a repeated request counts once")
				// A new request (re-entry) counts.
				a2 := a
				a2.AcquireID = "acq2"
				ok, err := try(ctx, rdb, k, a2)
				require.NoError(t, err)
				require.True(t, ok)
				assert.Equal(t, "2", rdb.HGet(ctx, k.Name, "u:1").Val())

				// Abandoning a request that took a hold reports it, and a late copy is refused.
				held, err := wire.Default().Abandon(ctx, rdb, k, a2)
				require.NoError(t, err)
				assert.True(t, held, "abandon reports the hold the request took")
				_, err = try(ctx, rdb, k, a2)
				require.ErrorIs(t, err, wire.ErrAbandoned)
				assert.Equal(t, "2", rdb.HGet(ctx, k.Name, "u:1").Val(), "an abandoned copy changes nothing")

				// Another owner's abandoned request neither takes the lock nor queues.
				require.NoError(t, rdb.Del(ctx, k.Name).Err())
				b := wire.Args{Owner: "u:2", LeaseMs: 30000, WaitMs: 60000, NowMs: now, AcquireID: "acq3", LatchMs: 10000}
				held, err = wire.Default().Abandon(ctx, rdb, k, b)
				require.NoError(t, err)
				assert.False(t, held)
				_, err = try(ctx, rdb, k, b)
				require.ErrorIs(t, err, wire.ErrAbandoned)
				assert.Zero(t, rdb.Exists(ctx, k.Name, k.Queue, k.Timeouts, k.ScalableQueue()).Val(), "nothing taken, nothing queued")
				ttl := rdb.PTTL(ctx, k.AcquireLatch("acq3")).Val()
				assert.True(t, ttl > 0 && ttl <= 10*time.Second, "the latch expires: %v", ttl)
			})
		}
	})
}

func TestParseGrant(t *testing.T) {
	g, ok := wire.ParseGrant("g:12:10000:abc:def")
	if !ok || g != (wire.Grant{Token: 12, TTLMs: 10000, RequestID: "abc:def"}) {
		t.Fatalf("got %+v %v", g, ok)
	}
	for _, p := range []string{"0", "", "g:", "g:1", "g:1:2", "g:x:2:r", "g:1:0:r", "g:1:-5:r", "h:1:2:r"} {
		if g, ok := wire.ParseGrant(p); ok {
			t.Errorf("%q parsed as %+v", p, g)
		}
	}
}
