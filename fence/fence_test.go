package fence_test

import (
	"context"
	"errors"
	"math"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/fence"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.MainLeakCheck(m)) }

func TestKey(t *testing.T) {
	for _, c := range []struct{ key, want string }{
		{"seat:12", "fairlock_fence:{seat:12}"},
		{"{flight7}:seat:12", "fairlock_fence:{flight7}:seat:12"},
		{"a{b", "fairlock_fence:{a{b}"},
	} {
		got, err := fence.Key(c.key)
		require.NoError(t, err, c.key)
		assert.Equal(t, c.want, got)
		// Same slot, by Redis's own rule (CLUSTER KEYSLOT is checked on a
		// real server below).
	}
	for _, bad := range []string{"", "a}b", "a{}b"} {
		_, err := fence.Key(bad)
		assert.ErrorIs(t, err, fence.ErrInvalidKey, bad)
	}
}

// The fence key hashes to its resource's slot (Redis Cluster's rule, as
// internal/core computes it for the locks' own keys).
func TestKeySameSlot(t *testing.T) {
	for _, key := range []string{"seat:12", "{flight7}:seat:12", "a{b", "x{y}z{w}", "{}{a}", "é{ü}"} {
		fk, err := fence.Key(key)
		if err != nil {
			continue
		}
		assert.Equal(t, core.Slot(key), core.Slot(fk), "%q and its fence %q", key, fk)
	}
}

func TestWrite(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		ctx := context.Background()
		key := redistest.Prefix(t) + "seat"

		r, err := fence.Write(ctx, rdb, key, 5, fence.Set("alice"))
		require.NoError(t, err)
		assert.Equal(t, fence.Result{Accepted: true, Last: 5}, r)
		// The same token again: accepted (one holder writes twice).
		r, err = fence.Write(ctx, rdb, key, 5, fence.Set("alice2"))
		require.NoError(t, err)
		assert.True(t, r.Accepted)
		// An older token: rejected, nothing written, the newer token told.
		r, err = fence.Write(ctx, rdb, key, 4, fence.Set("stale"))
		require.NoError(t, err)
		assert.Equal(t, fence.Result{Accepted: false, Last: 5}, r)
		v, _ := rdb.Get(ctx, key).Result()
		assert.Equal(t, "alice2", v)
		// A newer token: accepted, the fence moves.
		r, err = fence.Write(ctx, rdb, key, 9, fence.Set("bob"))
		require.NoError(t, err)
		assert.Equal(t, fence.Result{Accepted: true, Last: 9}, r)
		last, err := fence.Last(ctx, rdb, key)
		require.NoError(t, err)
		assert.Equal(t, int64(9), last)
		r, err = fence.Write(ctx, rdb, key, 5, fence.Set("alice3"))
		require.NoError(t, err)
		assert.False(t, r.Accepted)
		v, _ = rdb.Get(ctx, key).Result()
		assert.Equal(t, "bob", v)

		h := key + ":h"
		_, err = fence.Write(ctx, rdb, h, 1, fence.HSet("holder", "a", "fence", "1"))
		require.NoError(t, err)
		m, _ := rdb.HGetAll(ctx, h).Result()
		assert.Equal(t, map[string]string{"holder": "a", "fence": "1"}, m)

		l := key + ":log"
		for _, tok := range []int64{1, 3, 2, 3} {
			_, err = fence.Write(ctx, rdb, l, tok, fence.RPush("w"+string(rune('0'+tok))))
			require.NoError(t, err)
		}
		got, _ := rdb.LRange(ctx, l, 0, -1).Result()
		assert.Equal(t, []string{"w1", "w3", "w3"}, got)
	})
}

func TestWriteBadInput(t *testing.T) {
	rdb := redistest.Mini(t).Client(t)
	ctx := context.Background()
	_, err := fence.Write(ctx, rdb, "k", 0, fence.Set("v"))
	assert.ErrorIs(t, err, fence.ErrInvalidToken)
	_, err = fence.Write(ctx, rdb, "k", -3, fence.Set("v"))
	assert.ErrorIs(t, err, fence.ErrInvalidToken)
	_, err = fence.Write(ctx, rdb, "", 1, fence.Set("v"))
	assert.ErrorIs(t, err, fence.ErrInvalidKey)
	_, err = fence.Write(nil, rdb, "k", 1, fence.Set("v")) //nolint:staticcheck // the nil ctx is the point
	assert.ErrorIs(t, err, fence.ErrInvalidValue)
	_, err = fence.Write(ctx, nil, "k", 1, fence.Set("v"))
	assert.ErrorIs(t, err, fence.ErrInvalidValue)
	var nilClient *redis.Client
	_, err = fence.Write(ctx, nilClient, "k", 1, fence.Set("v"))
	assert.ErrorIs(t, err, fence.ErrInvalidValue)
	_, err = fence.Write(ctx, rdb, "k", 1, fence.Op{})
	assert.ErrorIs(t, err, fence.ErrInvalidValue)
	_, err = fence.Write(ctx, rdb, "k", 1, fence.HSet("a", "b", "c"))
	assert.ErrorIs(t, err, fence.ErrInvalidValue)
	// A fence that holds no integer: an error, nothing written.
	fk, _ := fence.Key("k")
	rdb.Set(ctx, fk, "junk", 0)
	_, err = fence.Write(ctx, rdb, "k", 1, fence.Set("v"))
	require.Error(t, err)
	assert.False(t, errors.Is(err, fence.ErrInvalidToken))
	assert.Equal(t, int64(0), rdb.Exists(ctx, "k").Val())
	// Fences that are not canonical int64 decimals (they cannot be compared
	// exactly as strings): errors, nothing written.
	for _, bad := range []string{"9223372036854775808", "007", "-1", "5.0", "1e3"} {
		rdb.Set(ctx, fk, bad, 0)
		_, err = fence.Write(ctx, rdb, "k", 1, fence.Set("v"))
		require.Error(t, err, "fence %q", bad)
		assert.Equal(t, int64(0), rdb.Exists(ctx, "k").Val(), "fence %q", bad)
	}
}

// Issue 19, case 6: tokens are compared exactly over the whole int64
// range. Above 2^53 a Lua number (a double) cannot tell 2^53 from 2^53+1,
// so an older token compared equal to a newer one and its write was
// applied.
func TestWriteComparesLargeTokensExactly(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		ctx := context.Background()
		key := redistest.Prefix(t) + "seat"
		const big = int64(1) << 53
		for _, c := range []struct{ newer, older int64 }{
			{big + 1, big},
			{big + 2, big + 1},
			{math.MaxInt64, math.MaxInt64 - 1},
			{1000000000000000001, 999999999999999999}, // lengths differ
		} {
			require.NoError(t, rdb.Del(ctx, key).Err())
			fk, _ := fence.Key(key)
			require.NoError(t, rdb.Del(ctx, fk).Err())
			r, err := fence.Write(ctx, rdb, key, c.newer, fence.Set("new"))
			require.NoError(t, err)
			assert.Equal(t, fence.Result{Accepted: true, Last: c.newer}, r, "token %d", c.newer)
			r, err = fence.Write(ctx, rdb, key, c.older, fence.Set("stale"))
			require.NoError(t, err)
			assert.Equal(t, fence.Result{Accepted: false, Last: c.newer}, r, "token %d after %d", c.older, c.newer)
			v, _ := rdb.Get(ctx, key).Result()
			assert.Equal(t, "new", v, "the older token %d wrote over the newer %d", c.older, c.newer)
			last, err := fence.Last(ctx, rdb, key)
			require.NoError(t, err)
			assert.Equal(t, c.newer, last)
			// The same token again is accepted, and a newer one moves the
			// fence exactly.
			r, err = fence.Write(ctx, rdb, key, c.newer, fence.Set("again"))
			require.NoError(t, err)
			assert.Equal(t, fence.Result{Accepted: true, Last: c.newer}, r)
		}
		// Above 2^53 on a fresh fence: accepted, and the fence is that
		// token exactly.
		fk, _ := fence.Key(key)
		require.NoError(t, rdb.Del(ctx, key, fk).Err())
		r, err := fence.Write(ctx, rdb, key, big+3, fence.Set("x"))
		require.NoError(t, err)
		assert.Equal(t, fence.Result{Accepted: true, Last: big + 3}, r)
		last, err := fence.Last(ctx, rdb, key)
		require.NoError(t, err)
		assert.Equal(t, big+3, last)
	})
}
