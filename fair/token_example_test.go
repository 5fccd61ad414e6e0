package fair_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/fence"
)

func ExampleMutex_LockAndGetToken() {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	client, err := fairlock.NewClient(rdb)
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx := context.Background()

	m, _ := fair.New(client, "seat:7C")
	token, _ := m.LockAndGetToken(ctx) // the take: a new token
	again, _ := m.LockAndGetToken(ctx) // a re-entry: the same token
	fmt.Println(token, again)
	r, _ := fence.Write(ctx, rdb, "seat:7C:holder", token, fence.Set("ann"))
	fmt.Println(r.Accepted)
	_ = m.Unlock(ctx)
	_ = m.Unlock(ctx)
	// Output:
	// 1 1
	// true
}
