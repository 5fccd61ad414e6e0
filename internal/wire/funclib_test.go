package wire_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Every script of every set is also a Redis Function library that a real
// Redis 7 loads (so that no script falls back to EVALSHA unnoticed).
func TestEveryScriptLoadsAsAFunction(t *testing.T) {
	rdb := redistest.Real(t).Client(t)
	ctx := context.Background()
	sets := []struct {
		files []string
		set   *wire.Scripts
	}{
		{wire.Files, wire.Default()},
		{wire.ScalableFiles, wire.ScalableDefault().Set()},
		{wire.SemFairFiles, wire.SemFairDefault().Set()},
		{wire.SeatsFiles, wire.SeatsDefault().Set()},
	}
	for _, s := range sets {
		for _, f := range s.files {
			name, lib, ok := s.set.Function(f)
			if !ok {
				t.Errorf("%s: no function", f)
				continue
			}
			err := rdb.FunctionLoadReplace(ctx, lib).Err()
			require.NoError(t, err, f)
			require.NoError(t, rdb.FunctionDelete(ctx, name).Err())
		}
	}
}

// The scripts run as functions on a Redis with Functions, and a server that
// lost them (FUNCTION FLUSH, a restart) is sent them again; on miniredis
// (no Functions) they run with EVALSHA. Every call is answered.
func TestScriptsRunAsFunctions(t *testing.T) {
	ctx := context.Background()
	srv := redistest.StartT(t)
	rdb := srv.Backend().Client(t)
	k := wire.KeysFor(redistest.Prefix(t) + "fn")
	a := wire.Args{Owner: "u:1", LeaseMs: 30000, RequestID: "r1", LatchMs: 5000}
	acquireFn, _, _ := wire.Default().Function(wire.FileAcquire)
	loaded := func() bool {
		libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: acquireFn}).Result()
		require.NoError(t, err)
		return len(libs) == 1
	}
	cycle := func(req string) {
		t.Helper()
		ok, _, err := wire.Default().Acquire(ctx, rdb, k, a)
		require.NoError(t, err)
		require.True(t, ok)
		a.RequestID = req
		r, err := wire.Default().Unlock(ctx, rdb, k, a)
		require.NoError(t, err)
		require.Equal(t, wire.Released, r)
	}
	require.False(t, loaded())
	cycle("r1")
	assert.True(t, loaded(), "the first call loads the script's library")

	require.NoError(t, rdb.FunctionFlush(ctx).Err())
	cycle("r2")
	assert.True(t, loaded(), "a flushed library is loaded again")

	require.NoError(t, srv.Restart())
	cycle("r3")
	assert.True(t, loaded(), "a restarted server is sent the library again")

	// Users not allowed FUNCTION LOAD, or FCALL itself: EVALSHA.
	require.NoError(t, rdb.FunctionFlush(ctx).Err())
	for _, acl := range []string{"-function", "-fcall"} {
		user := "u" + acl[1:]
		require.NoError(t, rdb.Do(ctx, "acl", "setuser", user, "on", ">pw", "~*", "&*", "+@all", acl).Err())
		limited := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: user, Password: "pw"})
		t.Cleanup(func() { _ = limited.Close() })
		a.RequestID = "r-" + user
		ok, _, err := wire.Default().Acquire(ctx, limited, k, a)
		require.NoError(t, err, acl)
		require.True(t, ok, acl)
		r, err := wire.Default().Unlock(ctx, limited, k, a)
		require.NoError(t, err, acl)
		require.Equal(t, wire.Released, r, acl)
		assert.False(t, loaded(), "%s: nothing loaded", acl)
	}

	mini := redistest.Mini(t).Client(t)
	ok, _, err := wire.Default().Acquire(ctx, mini, k, a)
	require.NoError(t, err)
	assert.True(t, ok, "miniredis (no Functions): EVALSHA")
	n, err := mini.Exists(ctx, k.Name).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
}
