package fair_test

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Seats are handed out in arrival order: each caller queues on the fair
// lock, takes the next free seat, and releases.
func ExampleMutex_Lock() {
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

	door, _ := fair.New(client, "concert") // held while the callers arrive
	_ = door.Lock(ctx)

	callers := []string{"ana", "bo", "cy", "dee"}
	seats := make(chan string, len(callers))
	for i, who := range callers {
		m, _ := fair.New(client, "concert") // one handle per caller
		go func() {
			if err := m.Lock(ctx); err != nil {
				panic(err)
			}
			seat := rdb.Incr(ctx, "concert:next-seat").Val()
			seats <- who + " gets seat " + strconv.FormatInt(seat, 10)
			_ = m.Unlock(ctx)
		}()
		// wait until this caller is queued before the next one arrives
		for rdb.LLen(ctx, wire.KeysFor("concert").Queue).Val() < int64(i+1) {
			time.Sleep(time.Millisecond)
		}
	}
	_ = door.Unlock(ctx)
	for range callers {
		fmt.Println(<-seats)
	}
	// Output:
	// ana gets seat 1
	// bo gets seat 2
	// cy gets seat 3
	// dee gets seat 4
}

func ExampleMutex_TryLockFor() {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	client, _ := fairlock.NewClient(rdb)
	defer client.Close()
	ctx := context.Background()

	holder, _ := fair.New(client, "printer")
	_ = holder.Lock(ctx)
	waiter, _ := fair.New(client, "printer")
	ok, err := waiter.TryLockFor(ctx, 50*time.Millisecond, 0)
	fmt.Println(ok, err)
	fmt.Println("queue left behind:", rdb.Exists(ctx, wire.KeysFor("printer").Queue).Val())
	_ = holder.Unlock(ctx)
	// Output:
	// false <nil>
	// queue left behind: 0
}
