package lockstate_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/lockstate"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// TestReadAllNothing: a name with no key of any kind is found to have
// none, latch keys (they expire by themselves) and other names' keys
// notwithstanding.
func TestReadAllNothing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "x"
		require.NoError(t, rdb.Set(ctx, wire.KeysFor(name).Latch("r1"), "1", time.Minute).Err())
		require.NoError(t, rdb.Set(ctx, wire.KeysFor(name).AcquireLatch("r2"), "held:1", time.Minute).Err())
		require.NoError(t, rdb.HSet(ctx, name+"y", "o:1", 1).Err())
		f, err := lockstate.ReadAll(ctx, rdb, name, time.Now())
		require.NoError(t, err)
		assert.False(t, f.Found())
		assert.Empty(t, f.Kinds)
		assert.Nil(t, f.Lock)
		assert.True(t, f.OK)
		assert.Positive(t, f.RedisTimeMs)
	})
}

// TestReadAllKeyOfNoKind: a key under the name of a type no kind writes
// is shown as the lock's, with its wrong type.
func TestReadAllKeyOfNoKind(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "x"
		require.NoError(t, rdb.RPush(ctx, name, "a").Err())
		f, err := lockstate.ReadAll(ctx, rdb, name, time.Now())
		require.NoError(t, err)
		assert.Equal(t, []string{lockstate.KindLock}, f.Kinds)
		assert.True(t, f.Lock.Has("wrong-type"))
		assert.False(t, f.OK)
	})
}

func TestReadAllBadName(t *testing.T) {
	_, err := lockstate.ReadAll(testCtx(t), nil, "a{b", time.Now())
	assert.ErrorIs(t, err, wire.ErrInvalidName)
}
