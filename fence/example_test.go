package fence_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/fence"
)

func ExampleWrite() {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	// Tokens come from a lock (fenced.Mutex.LockAndGetToken,
	// fair.Mutex.LockAndGetToken); here they are given.
	r, _ := fence.Write(ctx, rdb, "seat:12A", 7, fence.HSet("holder", "bob", "token", "7"))
	fmt.Println(r)
	r, _ = fence.Write(ctx, rdb, "seat:12A", 6, fence.HSet("holder", "ann", "token", "6")) // a stale holder
	fmt.Println(r)
	fmt.Println(rdb.HGet(ctx, "seat:12A", "holder").Val())
	k, _ := fence.Key("seat:12A")
	fmt.Println(k)
	// Output:
	// accepted (token 7)
	// rejected (newer token 7 seen)
	// bob
	// fairlock_fence:{seat:12A}
}
