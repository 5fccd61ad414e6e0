package semaphore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/semaphore"
)

// A fair semaphore: a pool of permits shared by every process, handed out
// in arrival order; a Permit is held until Release (the watchdog renews it
// while its process lives).
func ExampleFair() {
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
	pool, err := semaphore.NewFair(client, "exports")
	if err != nil {
		panic(err)
	}
	if err := pool.SetPermits(ctx, 2); err != nil { // once, by anyone
		panic(err)
	}
	a, err := pool.Acquire(ctx, 1, 0) // waits for a permit; lease 0: the watchdog's
	if err != nil {
		panic(err)
	}
	b, _ := pool.Acquire(ctx, 1, 0)
	c, err := pool.TryAcquire(ctx, 1, 100*time.Millisecond, 0) // none left: gives up
	fmt.Println("third permit:", c != nil, err)

	_ = a.Release(ctx)
	c, _ = pool.TryAcquire(ctx, 1, time.Second, 0)
	fmt.Println("after a release:", c != nil)
	_ = b.Release(ctx)
	_ = c.Release(ctx)
	// Output:
	// third permit: false <nil>
	// after a release: true
}

// Redisson's RPermitExpirableSemaphore: each permit has an id and may have
// a lease after which it comes back to the pool by itself.
func ExampleExpirable() {
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
	pool, err := semaphore.NewExpirable(client, "uploads")
	if err != nil {
		panic(err)
	}
	if err := pool.SetPermits(ctx, 3); err != nil {
		panic(err)
	}
	p, err := pool.Acquire(ctx, 2, time.Minute) // two permits for at most a minute
	if err != nil {
		panic(err)
	}
	free, _ := pool.AvailablePermits(ctx)
	fmt.Println("permits:", len(p.IDs()), "left:", free)
	if err := p.Release(ctx); err != nil {
		panic(err)
	}
	free, _ = pool.AvailablePermits(ctx)
	fmt.Println("left after release:", free)
	// Output:
	// permits: 2 left: 1
	// left after release: 3
}
