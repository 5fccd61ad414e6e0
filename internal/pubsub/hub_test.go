package pubsub_test

import (
	"context"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock/internal/pubsub"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

// A Subscribe cut short by its context must not leave anything that makes a
// later Subscribe to the same channel wait for a confirmation that never
// comes (the hub once counted a SUBSCRIBE whose write the dead context had
// stopped). Found by the client-level property test.
func TestSubscribeAfterCanceledSubscribe(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		h := pubsub.New(rdb, 30*time.Second)
		defer h.Close()
		ch := redistest.Prefix(t) + "ch"
		for i := 0; i < 20; i++ {
			dead, cancel := context.WithCancel(context.Background())
			cancel()
			if w, err := h.Subscribe(dead, ch); err == nil {
				w.Close()
			}
			ctx, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
			w, err := h.Subscribe(ctx, ch)
			cancel2()
			if err != nil {
				t.Fatalf("round %d: Subscribe after a canceled one: %v", i, err)
			}
			if err := rdb.Publish(context.Background(), ch, "0").Err(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-w.C():
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: no wake-up", i)
			}
			w.Close()
		}
		if n := h.Channels(); n != 0 {
			t.Fatalf("%d channels left", n)
		}
	})
}
