package fairlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/reentrant"
)

// One Client per process, over any go-redis client; each lock package's New
// takes it. Options set the defaults every lock of the client uses.
func ExampleNewClient() {
	srv := miniredis.NewMiniRedis() // any Redis: a *redis.Client, ClusterClient, ...
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	client, err := fairlock.NewClient(rdb, fairlock.WithLease(30*time.Second))
	if err != nil {
		panic(err)
	}
	defer client.Close() // ends the client's holds and waits

	ctx := context.Background()
	m, err := reentrant.New(client, "report:daily")
	if err != nil {
		panic(err)
	}
	if err := m.Lock(ctx); err != nil { // the watchdog renews the lease while it is held
		panic(err)
	}
	fmt.Println("valid for a while:", time.Until(m.ValidUntil()) > 0)
	if err := m.Unlock(ctx); err != nil {
		panic(err)
	}
	err = m.Unlock(ctx)
	fmt.Println("second unlock:", errors.Is(err, fairlock.ErrNotHeld))
	// Output:
	// valid for a while: true
	// second unlock: true
}

// An Observer gets every lock's events on a goroutine of its own, in the
// order they happened (package observe logs them with log/slog).
func ExampleWithObserver() {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	events := make(chan fairlock.Event, 16)
	client, err := fairlock.NewClient(rdb, fairlock.WithObserver(fairlock.ObserverFunc(func(e fairlock.Event) {
		events <- e
	})))
	if err != nil {
		panic(err)
	}
	defer client.Close()

	ctx := context.Background()
	m, _ := reentrant.New(client, "report:daily")
	if err := m.Lock(ctx); err != nil {
		panic(err)
	}
	if err := m.Unlock(ctx); err != nil {
		panic(err)
	}
	for range 2 {
		e := <-events
		fmt.Println(e.Kind, e.Name, e.LockKind)
	}
	// Output:
	// granted report:daily reentrant
	// released report:daily reentrant
}
