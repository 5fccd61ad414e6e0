package faultproxy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/faultproxy"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

// A group puts a client behind a proxy per server; a fault set on the
// group reaches a proxy made while it lasts, and a cut group refuses to
// dial.
func TestGroup(t *testing.T) {
	a, b := redistest.StartT(t), redistest.StartT(t)
	g := faultproxy.StartGroup(t)
	ctx := context.Background()
	ra := redis.NewClient(&redis.Options{Addr: a.Addr, Dialer: g.Dialer, ReadTimeout: 300 * time.Millisecond, MaxRetries: -1})
	rb := redis.NewClient(&redis.Options{Addr: b.Addr, Dialer: g.Dialer, ReadTimeout: 300 * time.Millisecond, MaxRetries: -1})
	defer ra.Close()
	defer rb.Close()
	if err := ra.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// b's proxy is made while the stall lasts: it is stalled too
	undo := g.Stall()
	if err := ra.Ping(ctx).Err(); err == nil {
		t.Error("ping through a stalled group answered")
	}
	if err := rb.Ping(ctx).Err(); err == nil {
		t.Error("ping through a proxy made during the stall answered")
	}
	undo()
	for _, r := range []*redis.Client{ra, rb} {
		deadline := time.Now().Add(10 * time.Second)
		for r.Ping(ctx).Err() != nil {
			if time.Now().After(deadline) {
				t.Fatal("no answer after the stall ended")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	restore := g.Cut()
	if err := ra.Ping(ctx).Err(); err == nil {
		t.Error("ping through a cut group answered")
	}
	if _, err := g.Dialer(ctx, "tcp", "127.0.0.1:1"); !errors.Is(err, faultproxy.ErrCut) {
		t.Errorf("dial while cut: %v, want ErrCut", err)
	}
	restore()
	deadline := time.Now().Add(10 * time.Second)
	for ra.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("no answer after the cut was undone")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
