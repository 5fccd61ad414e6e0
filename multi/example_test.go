package multi_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/multi"
	"github.com/fairlock-go/fairlock/reentrant"
)

// A MultiLock holds several locks at once, all or none: here the two
// accounts of a transfer, taken in one canonical order whatever order the
// caller lists them in, so that two transfers in opposite directions
// cannot deadlock.
func ExampleMultiLock() {
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
	from, _ := reentrant.New(client, "account:alice")
	to, _ := reentrant.New(client, "account:bob")
	transfer, err := multi.New(from, to)
	if err != nil {
		panic(err)
	}
	if err := transfer.Lock(ctx); err != nil {
		panic(err)
	}
	other, _ := reentrant.New(client, "account:bob")
	ok, _ := other.TryLock(ctx)
	fmt.Println("bob's account free during the transfer:", ok)
	if err := transfer.Unlock(ctx); err != nil {
		panic(err)
	}
	ok, _ = other.TryLock(ctx)
	fmt.Println("after it:", ok)
	_ = other.Unlock(ctx)
	// Output:
	// bob's account free during the transfer: false
	// after it: true
}

// Seats holds several seats of one venue at once, fairly: a request for
// seats waits in one queue with every other request that shares one of
// them, served in arrival order.
func ExampleSeats() {
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
	// names sharing the hash tag {hall} are one venue, held by one script
	seats, err := multi.NewSeats(client, "{hall}:12A", "{hall}:12B")
	if err != nil {
		panic(err)
	}
	hold, err := seats.Acquire(ctx, 0) // waits; lease 0: the watchdog's
	if err != nil {
		panic(err)
	}
	fmt.Println(seats.Mode() == multi.OneVenue, hold.Names())

	one, _ := multi.NewSeats(client, "{hall}:12B")
	h, _ := one.TryAcquire(ctx, 0, 0) // taken: no wait
	fmt.Println("12B alone while held:", h != nil)
	_ = hold.Release(ctx)
	// Output:
	// true [{hall}:12A {hall}:12B]
	// 12B alone while held: false
}
