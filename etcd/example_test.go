package etcd_test

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fairlock-go/fairlock/etcd"
	"github.com/fairlock-go/fairlock/etcd/internal/embedded"
)

// A fair lock on etcd: the first Lock is granted at once, a second handle
// waits in arrival order and is granted when the first unlocks; each hold
// gets a fencing token (the key's create revision), larger than the last.
// The etcd server here is embedded on loopback; point clientv3 at your
// cluster instead.
func Example() {
	srv, err := embedded.Start(false)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cli.Close()
	c, err := etcd.New(cli, etcd.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer c.Close(ctx)

	first, _ := c.NewMutex("seat-12A")
	second, _ := c.NewMutex("seat-12A")
	t1, err := first.LockAndGetToken(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	got := make(chan int64, 1)
	go func() {
		t2, err := second.LockAndGetToken(ctx) // waits for first
		if err != nil {
			fmt.Println(err)
		}
		got <- t2
	}()
	time.Sleep(200 * time.Millisecond)
	var t2 int64
	select {
	case t2 = <-got:
		fmt.Println("second got the lock while first holds it: true")
	default:
		fmt.Println("second got the lock while first holds it: false")
	}
	if err := first.Unlock(ctx); err != nil {
		fmt.Println(err)
	}
	if t2 == 0 {
		t2 = <-got
	}
	fmt.Println("second's token is larger:", t2 > t1)
	if err := second.Unlock(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// second got the lock while first holds it: false
	// second's token is larger: true
}
