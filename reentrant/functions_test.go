package reentrant_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/reentrant"
)

// By default a lock on a Redis 7 server sends its scripts as functions (a
// library fairlock_<sha1> is loaded); WithFunctions(false) keeps them off
// the server's function libraries: EVALSHA only.
func TestWithFunctions(t *testing.T) {
	ctx := context.Background()
	for _, on := range []bool{true, false} {
		srv := redistest.StartT(t)
		rdb := srv.Backend().Client(t)
		c, err := fairlock.NewClient(rdb, fairlock.WithFunctions(on))
		require.NoError(t, err)
		m, err := reentrant.New(c, redistest.Prefix(t)+"fn")
		require.NoError(t, err)
		require.NoError(t, m.Lock(ctx))
		require.NoError(t, m.Unlock(ctx))
		require.NoError(t, c.Close())
		libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "fairlock_*"}).Result()
		require.NoError(t, err)
		if on {
			assert.NotEmpty(t, libs, "WithFunctions(true): the scripts' libraries are loaded")
		} else {
			assert.Empty(t, libs, "WithFunctions(false): no library loaded")
		}
	}
}
