package reentrant_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/reentrant"
)

func ExampleMutex_Lock() {
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
	m, err := reentrant.New(client, "invoice:42")
	if err != nil {
		panic(err)
	}
	if err := m.Lock(ctx); err != nil { // waits; the watchdog keeps the lease
		panic(err)
	}
	_ = m.Lock(ctx) // the same owner re-enters
	n, _ := m.HoldCount(ctx)
	fmt.Println("holds:", n)

	other, _ := reentrant.New(client, "invoice:42") // another owner
	ok, _ := other.TryLock(ctx)
	fmt.Println("other got it:", ok)

	_ = m.Unlock(ctx)
	_ = m.Unlock(ctx)
	ok, _ = other.TryLock(ctx)
	fmt.Println("other got it after two unlocks:", ok)
	_ = other.Unlock(ctx)
	// Output:
	// holds: 2
	// other got it: false
	// other got it after two unlocks: true
}

func ExampleMutex_Done() {
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
	m, _ := reentrant.New(client, "report")
	if err := m.Lock(ctx); err != nil {
		panic(err)
	}
	work := make(chan struct{})
	go func() { close(work) }() // the work done under the lock
	select {
	case <-work:
		fmt.Println("work done")
	case <-m.Done(): // the lock was lost: stop working
		fmt.Println("lost:", m.Err())
	}
	_ = m.Unlock(ctx)
	<-m.Done()
	fmt.Println("after unlock, Err:", m.Err())
	// Output:
	// work done
	// after unlock, Err: <nil>
}
