package pubsub_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

// Confirmation rests on the answer to a PING sent after the SUBSCRIBE; it
// reads differently in RESP2 (a pub/sub "pong" message) and RESP3 (a plain
// reply). Both must confirm, and a message published after Subscribe
// returned must arrive.
func TestSubscribeConfirmsOnBothProtocols(t *testing.T) {
	b := redistest.Real(t)
	pub := b.Client(t)
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: b.Addr, Protocol: proto})
			t.Cleanup(func() { _ = rdb.Close() })
			h := pubsub.New(rdb, 30*time.Second)
			defer h.Close()
			ch := redistest.Prefix(t) + "ch"
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			w, err := h.Subscribe(ctx, ch)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			select {
			case <-w.C():
				t.Fatalf("Subscribe returned unconfirmed after %v on a healthy connection", time.Since(start))
			default:
			}
			if err := pub.Publish(ctx, ch, "0").Err(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-w.C():
			case <-ctx.Done():
				t.Fatal("no wake-up")
			}
		})
	}
}

// BenchmarkSubscribeClose measures one waiter's Subscribe (to a channel no
// one else holds: a SUBSCRIBE and its confirmation) and Close (an
// UNSUBSCRIBE) on a real server, serially and from parallel goroutines.
func BenchmarkSubscribeClose(b *testing.B) {
	be := redistest.Real(b)
	rdb := be.Client(b)
	prefix := redistest.Prefix(b)
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		h := pubsub.New(rdb, 30*time.Second)
		defer h.Close()
		for i := 0; b.Loop(); i++ {
			w, err := h.Subscribe(ctx, fmt.Sprintf("%sserial%d", prefix, i%64))
			if err != nil {
				b.Fatal(err)
			}
			w.Close()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		h := pubsub.New(rdb, 30*time.Second)
		defer h.Close()
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				w, err := h.Subscribe(ctx, fmt.Sprintf("%spar%d", prefix, n.Add(1)%256))
				if err != nil {
					b.Error(err)
					return
				}
				w.Close()
			}
		})
	})
}

// A grant message (the scalable fair lock's direct handoff, "g:...") wakes
// every waiter of the channel and each keeps its payload until it takes it
// (Grant); a plain wake-up ("0") carries none.
func TestGrantReachesEveryWaiter(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		h := pubsub.New(rdb, 30*time.Second)
		defer h.Close()
		ch := redistest.Prefix(t) + "ch"
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w1, err := h.Subscribe(ctx, ch)
		if err != nil {
			t.Fatal(err)
		}
		defer w1.Close()
		w2, err := h.Subscribe(ctx, ch)
		if err != nil {
			t.Fatal(err)
		}
		defer w2.Close()
		wait := func(w *pubsub.Waiter) { t.Helper(); awaitWake(t, w, 10*time.Second, "a message") }
		if err := rdb.Publish(ctx, ch, "0").Err(); err != nil {
			t.Fatal(err)
		}
		wait(w1) // one waiter woken by "0"
		if p, ok := w1.Grant(); ok {
			t.Fatalf("a wake-up carried a grant %q", p)
		}
		const g = "g:7:1000:req"
		if err := rdb.Publish(ctx, ch, g).Err(); err != nil {
			t.Fatal(err)
		}
		wait(w2)
		wait(w1)
		for i, w := range []*pubsub.Waiter{w1, w2} {
			if p, ok := w.Grant(); !ok || p != g {
				t.Fatalf("waiter %d: grant %q %v, want %q", i+1, p, ok, g)
			}
			if p, ok := w.Grant(); ok {
				t.Fatalf("waiter %d: the grant %q was kept after it was taken", i+1, p)
			}
		}
	})
}

// A sleep message ("s:...", the scalable fair lock's wake-up that carries
// its reply) lets the waiter skip its attempt only when nothing else woke
// it: a plain wake-up pending before or after it is never hidden.
func TestNoteNeverHidesAWakeUp(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		h := pubsub.New(rdb, 30*time.Second)
		defer h.Close()
		ch, marker := redistest.Prefix(t)+"ch", redistest.Prefix(t)+"marker"
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sub := func(ch string) *pubsub.Waiter {
			w, err := h.Subscribe(ctx, ch)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(w.Close)
			return w
		}
		w1, w2, m := sub(ch), sub(ch), sub(marker)
		wait := func(w *pubsub.Waiter) { t.Helper(); awaitWake(t, w, 10*time.Second, "a message") }
		// publish sends the payloads in order and returns once the hub has
		// delivered them all (the marker comes after them on the connection).
		publish := func(payloads ...string) {
			t.Helper()
			for _, p := range payloads {
				if err := rdb.Publish(ctx, ch, p).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if err := rdb.Publish(ctx, marker, "0").Err(); err != nil {
				t.Fatal(err)
			}
			wait(m)
		}
		note := func(w *pubsub.Waiter, want string) {
			t.Helper()
			wait(w)
			w.Grant()
			p, ok := w.Note()
			if want == "" && ok {
				t.Fatalf("note %q, but a wake-up that asks for an attempt was pending", p)
			}
			if want != "" && (!ok || p != want) {
				t.Fatalf("note %q %v, want %q", p, ok, want)
			}
		}
		publish("s:100:0")
		note(w1, "s:100:0")
		note(w2, "s:100:0")
		publish("s:100:0", "s:50:0") // the later note replaces the earlier
		note(w1, "s:50:0")
		note(w2, "s:50:0")
		publish("s:100:0", "0") // the plain wake-up goes to w1, whose note it clears
		note(w1, "")
		note(w2, "s:100:0")
		publish("0", "s:100:0") // w1 has the plain wake-up pending: the note does not hide it
		note(w1, "")
		note(w2, "s:100:0")
		publish("s:100:0", "g:7:1000:req") // a grant asks for the grant's check (or an attempt)
		note(w1, "")
		note(w2, "")
		for _, w := range []*pubsub.Waiter{w1, w2} {
			select {
			case <-w.C():
				t.Fatal("a wake-up left over")
			default:
			}
		}
	})
}
