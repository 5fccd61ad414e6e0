package fenced_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fence"
	"github.com/fairlock-go/fairlock/fenced"
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

	alice, _ := fenced.New(client, "seat:12A")
	bob, _ := fenced.New(client, "seat:12A")

	aliceToken, _ := alice.LockAndGetToken(ctx)
	// ... alice stalls past her lease; here she just unlocks, and bob
	// takes the lock with a newer token and writes first.
	_ = alice.Unlock(ctx)
	bobToken, _ := bob.LockAndGetToken(ctx)
	r, _ := fence.Write(ctx, rdb, "seat:12A:holder", bobToken, fence.Set("bob"))
	fmt.Println("bob:", r)
	_ = bob.Unlock(ctx)

	// Alice's late write carries her older token: refused.
	r, _ = fence.Write(ctx, rdb, "seat:12A:holder", aliceToken, fence.Set("alice"))
	fmt.Println("alice:", r)
	fmt.Println("holder:", rdb.Get(ctx, "seat:12A:holder").Val())
	// Output:
	// bob: accepted (token 2)
	// alice: rejected (newer token 2 seen)
	// holder: bob
}
