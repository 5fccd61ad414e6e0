package pubsub_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/faultproxy"
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
	if w := h.Attach(ch, false); w != nil {
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
		w = h.Attach(ch, false)
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
	if w := h.Attach(ch, false); w != nil {
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
	if h.Has(ch) || h.Attach(ch, false) != nil {
		t.Fatal("the channel is kept without Linger")
	}
}

// CloseNow drops the channel at once on a hub with Linger (a channel the
// client's own releases publish on, issue 33), while Close keeps another.
func TestCloseNowDoesNotLinger(t *testing.T) {
	b := redistest.Real(t)
	rdb := b.Client(t)
	h := pubsub.New(rdb, 30*time.Second, pubsub.Linger(time.Minute))
	defer h.Close()
	kept, dropped := redistest.Prefix(t)+"kept", redistest.Prefix(t)+"dropped"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, ch := range []string{kept, dropped} {
		w, err := h.Subscribe(ctx, ch)
		if err != nil {
			t.Fatal(err)
		}
		if ch == kept {
			w.Close()
		} else {
			w.CloseNow()
		}
	}
	if h.Has(dropped) || h.Attach(dropped, false) != nil {
		t.Fatal("CloseNow kept the channel")
	}
	if !h.Has(kept) {
		t.Fatal("Close did not keep the channel on a hub with Linger")
	}
	numsub := func(ch string) int64 { return rdb.PubSubNumSub(ctx, ch).Val()[ch] }
	deadline := time.Now().Add(10 * time.Second)
	for numsub(dropped) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the server still counts a subscriber 10 s after CloseNow")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := numsub(kept); n != 1 {
		t.Fatalf("the kept channel has %d subscribers, want 1", n)
	}
}

// A waiter attached to a lingering channel never takes a note that was
// published before it attached (issue 33; the fault suite's position
// check caught one): the note was meant for its owner's previous wait,
// and its place is stale. Here the note is held back on the way to the
// hub (StallReplies) until after Attach; a note published after Attach
// still arrives.
func TestAttachSkipsNotesPublishedBefore(t *testing.T) {
	b := redistest.Real(t)
	p := faultproxy.Start(t, b.Addr)
	sub := redis.NewClient(&redis.Options{Addr: p.Addr})
	t.Cleanup(func() { _ = sub.Close() })
	pub := b.Client(t)
	h := pubsub.New(sub, 30*time.Second, pubsub.Linger(time.Minute))
	defer h.Close()
	ch := redistest.Prefix(t) + "ch"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, err := h.Subscribe(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	w.Close() // the channel lingers

	undo := p.StallReplies()
	if err := pub.Publish(ctx, ch, "s:5000:3").Err(); err != nil {
		t.Fatal(err)
	}
	w = h.Attach(ch, true)
	if w == nil {
		t.Fatal("the channel did not linger")
	}
	defer w.Close()
	time.Sleep(100 * time.Millisecond) // the Attach's own traffic, if any, is written
	undo()
	select {
	case <-w.C():
		n, _ := w.Note()
		t.Fatalf("the waiter took a message published before it attached (note %q)", n)
	case <-time.After(time.Second):
	}
	// A note published after Attach arrives (published again until it
	// does: one read before the PING's answer, on a slow machine, is
	// dropped like the stale one).
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := pub.Publish(ctx, ch, "s:4000:1").Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-w.C():
			if n, ok := w.Note(); !ok || n != "s:4000:1" {
				t.Fatalf("note %q (%v), want s:4000:1", n, ok)
			}
			return
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no note published after Attach arrived in 10 s")
		}
	}
}
