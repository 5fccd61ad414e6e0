package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
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
	nodes, closeNodes, err := primaries(rctx, rdb, o)
	if err != nil {
		fmt.Fprintf(stderr, "fairlock functions: %v\n", err)
		return 1
	}
	defer closeNodes()
	for _, node := range nodes {
		if len(nodes) > 1 {
			fmt.Fprintf(stdout, "primary %s:\n", node.Options().Addr)
		}
		if code := functionsOn(rctx, node, *prune, stdout, stderr); code != 0 {
			return code
		}
	}
	return 0
}

// primaries are the servers to read: rdb itself, or, when it is a node of
// a Redis Cluster, the cluster's primaries (each holds its own libraries;
// replicas copy their primary's), in address order. closeNodes releases
// what it opened.
func primaries(ctx context.Context, rdb *redis.Client, o *redis.Options) (nodes []*redis.Client, closeNodes func(), err error) {
	info, err := rdb.Info(ctx, "cluster").Result()
	if err != nil || !strings.Contains(info, "cluster_enabled:1") {
		// not a cluster (or an INFO the server refuses: read it as one)
		return []*redis.Client{rdb}, func() {}, nil
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{o.Addr}, Username: o.Username,
		Password: o.Password, TLSConfig: o.TLSConfig, DialTimeout: o.DialTimeout})
	var mu sync.Mutex
	err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		nodes = append(nodes, c)
		mu.Unlock()
		return nil
	})
	if err != nil {
		_ = cc.Close()
		return nil, nil, fmt.Errorf("the cluster's primaries: %w", err)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Options().Addr < nodes[j].Options().Addr })
	return nodes, func() { _ = cc.Close() }, nil
}

// functionsOn lists (and with prune deletes) the libraries of one server.
func functionsOn(ctx context.Context, rdb *redis.Client, prune bool, stdout, stderr io.Writer) int {
	libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{
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
	if !prune {
		if len(other) > 0 {
			fmt.Fprintln(stdout, "--prune deletes the ones not this build's (a client of another version loads its own again at its next call)")
		}
		return 0
	}
	for _, l := range other {
		if err := rdb.FunctionDelete(ctx, l.Name).Err(); err != nil {
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
