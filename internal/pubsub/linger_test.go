package pubsub_test

import (
	"context"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock/internal/pubsub"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

// Linger (issue 33): a channel whose last waiter left stays subscribed for
// the linger time, Attach joins it without a round trip and gets every
// message published afterwards, a use restarts the idle time, and a channel
// left unused for the linger time is unsubscribed on the server. Attach
// returns nil for a channel the hub does not hold.
func TestLingerKeepsAndThenDropsTheSubscription(t *testing.T) {
	b := redistest.Real(t)
	rdb := b.Client(t)
	const linger = 300 * time.Millisecond
	h := pubsub.New(rdb, 30*time.Second, pubsub.Linger(linger))
	defer h.Close()
	ch := redistest.Prefix(t) + "ch"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if w := h.Attach(ch); w != nil {
		t.Fatal("Attach to a channel the hub does not hold returned a waiter")
	}
	w, err := h.Subscribe(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	numsub := func() int64 { return rdb.PubSubNumSub(ctx, ch).Val()[ch] }
	for i := 0; i < 3; i++ { // each use restarts the idle time
		time.Sleep(linger / 2)
		w = h.Attach(ch)
		if w == nil {
			t.Fatalf("round %d: the channel did not linger", i)
		}
		if err := rdb.Publish(ctx, ch, "0").Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-w.C():
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: an attached waiter missed a message", i)
		}
		w.Close()
	}
	if n := numsub(); n != 1 {
		t.Fatalf("%d subscribers while lingering, want 1", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for h.Has(ch) || numsub() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("still subscribed 10 s after the last use (hub %v, server %d)", h.Has(ch), numsub())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if w := h.Attach(ch); w != nil {
		t.Fatal("Attach after the linger ran out returned a waiter")
	}
}

// A hub without Linger unsubscribes when the last waiter leaves, as before.
func TestNoLingerByDefault(t *testing.T) {
	b := redistest.Real(t)
	rdb := b.Client(t)
	h := pubsub.New(rdb, 30*time.Second)
	defer h.Close()
	ch := redistest.Prefix(t) + "ch"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, err := h.Subscribe(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if h.Has(ch) || h.Attach(ch) != nil {
		t.Fatal("the channel is kept without Linger")
	}
}
