package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/wire"
)

// runFunctions is `fairlock functions`: the Redis function libraries the
// library loaded on a server (one per script, named fairlock_<sha1>), which
// of them this build's scripts use, and with --prune the deletion of the
// others (the libraries an earlier or later version loaded stay on the
// server until deleted, each some tens of KB of its memory).
func runFunctions(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("functions", stderr)
	addr := fs.String("redis", "", "")
	prune := fs.Bool("prune", false, "")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	bad := usageError("functions", stderr)
	switch {
	case len(pos) > 0:
		return bad("no arguments expected, got %q", pos)
	case *addr == "":
		return bad("--redis host:port is required")
	}
	o, err := redisOptions(*addr)
	if err != nil {
		return bad("--redis: %v", err)
	}
	if err := ping(ctx, o); err != nil {
		fmt.Fprintf(stderr, "fairlock functions: %v\n", err)
		return 1
	}
	rdb := redis.NewClient(o)
	defer rdb.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	libs, err := rdb.FunctionList(rctx, redis.FunctionListQuery{
		LibraryNamePattern: wire.LibraryPrefix + "*", WithCode: true}).Result()
	if err != nil {
		if wire.NoFunctions(err) {
			fmt.Fprintln(stdout, "this Redis has no Functions (Redis 6 or older): the library sends its scripts with EVALSHA and loads no function library")
			return 0
		}
		fmt.Fprintf(stderr, "fairlock functions: %v\n", err)
		return 1
	}
	sort.Slice(libs, func(i, j int) bool { return libs[i].Name < libs[j].Name })
	ours := wire.LibraryNames()
	var other []redis.Library
	otherBytes := 0
	for _, l := range libs {
		state := "used by this build"
		if !ours[l.Name] {
			state = "not this build's"
			other = append(other, l)
			otherBytes += len(l.Code)
		}
		fmt.Fprintf(stdout, "%s  %7d bytes  %s\n", l.Name, len(l.Code), state)
	}
	fmt.Fprintf(stdout, "%d function libraries of fairlock: %d used by this build, %d not (%d bytes of code)\n",
		len(libs), len(libs)-len(other), len(other), otherBytes)
	if !*prune {
		if len(other) > 0 {
			fmt.Fprintln(stdout, "--prune deletes the ones not this build's (a client of another version loads its own again at its next call)")
		}
		return 0
	}
	for _, l := range other {
		if err := rdb.FunctionDelete(rctx, l.Name).Err(); err != nil {
			if strings.Contains(err.Error(), "Library not found") {
				continue // deleted meanwhile
			}
			fmt.Fprintf(stderr, "fairlock functions: deleting %s: %v\n", l.Name, err)
			return 1
		}
		fmt.Fprintf(stdout, "deleted %s\n", l.Name)
	}
	return 0
}
