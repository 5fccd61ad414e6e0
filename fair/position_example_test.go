package fair_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
)

// A waiter follows its place in the queue; anyone reads the queue.
func ExampleAcquireOptions_position() {
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

	holder, _ := fair.New(client, "box-office")
	_ = holder.Lock(ctx)
	done := make(chan bool, 2)
	for range 2 {
		m, _ := fair.New(client, "box-office")
		places := make(chan int, 64) // this waiter's reports
		go func() {
			ok, _ := m.Acquire(ctx, fair.AcquireOptions{Wait: fair.Forever, Position: func(p fairlock.Position) {
				places <- p.Ahead
			}})
			_ = m.Unlock(ctx)
			done <- ok
		}()
		fmt.Println("joined with", <-places, "ahead") // wait for its first report
	}
	st, _ := holder.State(ctx, 10)
	fmt.Println("queue length", st.QueueLen, "held:", st.Owner == holder.Owner())
	_ = holder.Unlock(ctx)
	fmt.Println(<-done, <-done)
	// Output:
	// joined with 0 ahead
	// joined with 1 ahead
	// queue length 2 held: true
	// true true
}
