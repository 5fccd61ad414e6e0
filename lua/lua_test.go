package lua_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/lua"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

func TestEveryScriptLoads(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		for _, f := range lua.Files {
			sc := lua.Default.Script(f)
			sha, err := sc.Load(context.Background(), rdb).Result()
			require.NoError(t, err, f)
			assert.Equal(t, sc.Hash(), sha, f)
		}
		for _, f := range lua.ScalableFiles {
			sc := lua.ScalableDefault.Script(f)
			sha, err := sc.Load(context.Background(), rdb).Result()
			require.NoError(t, err, f)
			assert.Equal(t, sc.Hash(), sha, f)
		}
	})
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "orders", "{order}:seat", "x{tag}y", "}a{b}"} {
		assert.NoError(t, lua.ValidateName(ok), ok)
	}
	for _, bad := range []string{"", "a{b", "a{}b", "a}b", "{"} {
		err := lua.ValidateName(bad)
		assert.True(t, errors.Is(err, lua.ErrInvalidName), "%q: %v", bad, err)
	}
}

func TestKeyNamesAreRedissons(t *testing.T) {
	k := lua.KeysFor("seats")
	assert.Equal(t, "seats", k.Name)
	assert.Equal(t, "redisson_lock__channel:{seats}", k.Channel)
	assert.Equal(t, "redisson_lock_queue:{seats}", k.Queue)
	assert.Equal(t, "redisson_lock_timeout:{seats}", k.Timeouts)
	assert.Equal(t, "redisson_unlock_latch:{seats}:abc", k.Latch("abc"))
	assert.Equal(t, "redisson_lock__channel:{seats}:u:7", k.WaiterChannel("u:7"))

	tagged := lua.KeysFor("{t}:seats")
	assert.Equal(t, "redisson_lock_queue:{t}:seats", tagged.Queue)
	assert.Equal(t, "redisson_lock__channel:{t}:seats", tagged.Channel)
}

// The reentrant scripts' basic contract, on both backends.
func TestReentrantScriptContract(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		k := lua.KeysFor(redistest.Prefix(t) + "lock")
		s := lua.Default
		a := lua.Args{Owner: "u:1", LeaseMs: 30000, RequestID: "r1", LatchMs: 10000}
		other := lua.Args{Owner: "u:2", LeaseMs: 30000, RequestID: "r2", LatchMs: 10000}

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
		assert.Equal(t, lua.NotHeld, res)
		res, err = s.Unlock(ctx, rdb, k, a)
		require.NoError(t, err)
		assert.Equal(t, lua.StillHeld, res)
		res, err = s.Unlock(ctx, rdb, k, a) // same request id: the latch answers
		require.NoError(t, err)
		assert.Equal(t, lua.StillHeld, res)
		assert.Equal(t, "1", rdb.HGet(ctx, k.Name, "u:1").Val())
		a.RequestID = "r3"
		res, err = s.Unlock(ctx, rdb, k, a)
		require.NoError(t, err)
		assert.Equal(t, lua.Released, res)
		assert.Zero(t, rdb.Exists(ctx, k.Name).Val())

		renewed, err := s.Renew(ctx, rdb, []string{k.Name}, []string{"u:1"}, 1000)
		require.NoError(t, err)
		assert.Equal(t, []bool{false}, renewed)
	})
}
