package rwlock_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/rwlock"
)

func ExampleRWMutex() {
	srv := miniredis.NewMiniRedis() // any Redis: a *redis.Client, ClusterClient, ...
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	client, err := fairlock.NewClient(rdb) // one per process
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx := context.Background()

	alice, _ := rwlock.New(client, "seat-map") // one handle per owner
	bob, _ := rwlock.New(client, "seat-map")
	writer, _ := rwlock.New(client, "seat-map")

	_ = alice.ReadLock().Lock(ctx)
	_ = bob.ReadLock().Lock(ctx) // readers share
	ok, _ := writer.WriteLock().TryLock(ctx)
	fmt.Println("writer while two read:", ok)

	_ = alice.ReadLock().Unlock(ctx)
	_ = bob.ReadLock().Unlock(ctx)
	ok, _ = writer.WriteLock().TryLock(ctx)
	fmt.Println("writer once they left:", ok)

	ok, _ = alice.ReadLock().TryLock(ctx)
	fmt.Println("reader while one writes:", ok)
	_ = writer.ReadLock().Lock(ctx) // the writer may read
	_ = writer.WriteLock().Unlock(ctx)
	ok, _ = alice.ReadLock().TryLock(ctx) // the writer's read is left: readers share again
	fmt.Println("reader beside the former writer's read:", ok)
	// Output:
	// writer while two read: false
	// writer once they left: true
	// reader while one writes: false
	// reader beside the former writer's read: true
}
