package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

// fairlock functions lists the libraries the library loaded and, with
// --prune, deletes those this build does not use (an older version's),
// leaving this build's and every library not of fairlock; locks still work
// after. Its own server: libraries are server-wide.
func TestFunctionsListsAndPrunes(t *testing.T) {
	srv := redistest.StartT(t)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	c, err := fairlock.NewClient(rdb)
	require.NoError(t, err)
	defer c.Close()
	m, err := fair.New(c, "functions-test")
	require.NoError(t, err)
	cycle := func() {
		require.NoError(t, m.Lock(ctx))
		require.NoError(t, m.Unlock(ctx))
	}
	cycle() // loads this build's libraries for the scripts it ran
	const old = "fairlock_0000000000000000000000000000000000000000"
	libs := loadOldAndUsers(ctx, t, rdb, old)
	before := libs()
	ours := 0
	for n := range before {
		if strings.HasPrefix(n, "fairlock_") && n != old {
			ours++
		}
	}
	require.Positive(t, ours, "the lock loaded no library: %v", before)

	var out, errb bytes.Buffer
	require.Equal(t, 0, runCtx(ctx, []string{"functions", "--redis", srv.Addr}, &out, &errb), errb.String())
	assert.Contains(t, out.String(), old+"  ")
	assert.Regexp(t, `fairlock_0{40} +\d+ bytes  not this build's`, out.String())
	assert.Contains(t, out.String(), "used by this build")
	assert.NotContains(t, out.String(), "userlib")
	assert.Contains(t, out.String(), "1 not (")
	assert.Equal(t, before, libs(), "listing deleted something")

	out.Reset()
	require.Equal(t, 0, runCtx(ctx, []string{"functions", "--redis", srv.Addr, "--prune"}, &out, &errb), errb.String())
	assert.Contains(t, out.String(), "deleted "+old)
	after := libs()
	assert.False(t, after[old], "the old library is still there")
	assert.True(t, after["userlib"], "a library not of fairlock was deleted")
	for n := range before {
		if n != old {
			assert.True(t, after[n], "%s (this build's or the user's) was deleted", n)
		}
	}
	cycle()
}

// On a Redis Cluster every primary holds its own libraries (the library
// loads each on the primary of the lock's slot): fairlock functions, given
// any node, lists and prunes every primary's.
func TestFunctionsOnACluster(t *testing.T) {
	cl := redistest.ClusterT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prims, err := cl.Primaries(ctx)
	require.NoError(t, err)
	require.Len(t, prims, 3)
	const old = "fairlock_1111111111111111111111111111111111111111"
	libs := map[string]func() map[string]bool{}
	for _, addr := range prims {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		libs[addr] = loadOldAndUsers(ctx, t, rdb, old)
	}
	// A lock over a cluster client loads this build's libraries on its
	// slot's primary.
	cc := cl.Client(t)
	c, err := fairlock.NewClient(cc)
	require.NoError(t, err)
	defer c.Close()
	m, err := fair.New(c, "functions-cluster-test")
	require.NoError(t, err)
	require.NoError(t, m.Lock(ctx))
	require.NoError(t, m.Unlock(ctx))

	var out, errb bytes.Buffer
	// Given a replica's address: it still reads the primaries.
	replica := ""
	for _, a := range cl.Addrs() {
		if !slices.Contains(prims, a) {
			replica = a
		}
	}
	require.Equal(t, 0, runCtx(ctx, []string{"functions", "--redis", replica}, &out, &errb), errb.String())
	for _, addr := range prims {
		assert.Contains(t, out.String(), "primary "+addr+":\n")
	}
	assert.Equal(t, 3, strings.Count(out.String(), old+"  "), out.String())
	assert.Contains(t, out.String(), "used by this build")
	assert.NotContains(t, out.String(), "userlib")

	out.Reset()
	require.Equal(t, 0, runCtx(ctx, []string{"functions", "--redis", prims[0], "--prune"}, &out, &errb), errb.String())
	assert.Equal(t, 3, strings.Count(out.String(), "deleted "+old), out.String())
	ours := 0
	for _, addr := range prims {
		after := libs[addr]()
		assert.False(t, after[old], "%s: the old library is still there", addr)
		assert.True(t, after["userlib"], "%s: a library not of fairlock was deleted", addr)
		for n := range after {
			if strings.HasPrefix(n, "fairlock_") {
				ours++
			}
		}
	}
	assert.Positive(t, ours, "this build's libraries were deleted")
	require.NoError(t, m.Lock(ctx))
	require.NoError(t, m.Unlock(ctx))
}

func TestFunctionsUsageAndServersWithout(t *testing.T) {
	ctx := context.Background()
	var out, errb bytes.Buffer
	assert.Equal(t, 2, runCtx(ctx, []string{"functions"}, &out, &errb))
	assert.Contains(t, errb.String(), "--redis host:port is required")
	errb.Reset()
	assert.Equal(t, 2, runCtx(ctx, []string{"functions", "--redis", "127.0.0.1:1", "extra"}, &out, &errb))
	assert.Contains(t, errb.String(), "no arguments expected")
	errb.Reset()
	assert.Equal(t, 1, runCtx(ctx, []string{"functions", "--redis", "127.0.0.1:1"}, &out, &errb))
	// miniredis, like Redis 6, has no Functions: nothing to list.
	mr := miniredis.RunT(t)
	out.Reset()
	assert.Equal(t, 0, runCtx(ctx, []string{"functions", "--redis", mr.Addr()}, &out, &errb), errb.String())
	assert.Contains(t, out.String(), "has no Functions")
}

// loadOldAndUsers loads on rdb's server a fake library of another fairlock
// version, named old, and a user's library (userlib), and returns a reader
// of the names of the server's libraries.
func loadOldAndUsers(ctx context.Context, t *testing.T, rdb *redis.Client, old string) func() map[string]bool {
	t.Helper()
	require.NoError(t, rdb.FunctionLoad(ctx, "#!lua name="+old+
		"\nredis.register_function('"+old+"', function(keys, args) return 1 end)").Err())
	require.NoError(t, rdb.FunctionLoad(ctx,
		"#!lua name=userlib\nredis.register_function('userfn', function(keys, args) return 1 end)").Err())
	return func() map[string]bool {
		l, err := rdb.FunctionList(ctx, redis.FunctionListQuery{}).Result()
		require.NoError(t, err)
		names := map[string]bool{}
		for _, x := range l {
			names[x.Name] = true
		}
		return names
	}
}
