package clustertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/pubsub"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// The hub's view of the cluster is stale (a slot moved after it loaded the
// slot map): the SSUBSCRIBE goes to the old primary, is refused with
// MOVED, and the hub re-subscribes on the new primary. The subscription is
// confirmed and a message published afterwards arrives.
func TestHubFollowsMoved(t *testing.T) {
	cl := redistest.SharedCluster(t)
	cc := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := pubsub.New(cc, 30*time.Second, pubsub.Sharded(true, core.Slot))
	defer h.Close()
	name := redistest.Prefix(t) + "moved"
	ch := wire.KeysFor(name).Channel
	slot := core.Slot(ch)
	// Load the slot map, and a connection to every primary.
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	src, err := cl.PrimaryOf(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	prims, err := cl.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dst := prims[0]
	if dst == src {
		dst = prims[1]
	}
	mig, err := newMigration(ctx, cl, slot, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer mig.close()
	if err := mig.begin(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mig.finish(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := cc.MasterForKey(ctx, ch); got == nil || got.Options().Addr != src {
		t.Fatalf("the client's view already moved on; the test needs a stale one")
	}
	w, err := h.Subscribe(ctx, ch)
	if err != nil {
		t.Fatalf("subscribe through a stale slot map: %v", err)
	}
	defer w.Close()
	if n := h.Conns(); n != 2 {
		t.Errorf("hub holds %d connections, want 2 (the refused one and the new primary's)", n)
	}
	if err := retryUntil(ctx, func() error { return cc.SPublish(ctx, ch, wire.UnlockMessage).Err() }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.C():
	case <-ctx.Done():
		t.Fatal("no wake-up after the move")
	}
	// move it back
	back, err := newMigration(ctx, cl, slot, src)
	if err != nil {
		t.Fatal(err)
	}
	defer back.close()
	if err := back.begin(ctx); err != nil {
		t.Fatal(err)
	}
	if err := back.finish(ctx); err != nil {
		t.Fatal(err)
	}
}

// Sharded pub/sub also works on a single Redis 7 server (SPUBLISH and
// SSUBSCRIBE exist outside cluster mode): a queued waiter is woken.
func TestShardedOnSingleServer(t *testing.T) {
	rdb := redistest.Real(t).Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := newClient(t, rdb, fairlock.WithShardedPubSub(true), fairlock.WithLease(60*time.Second))
	s := startScene(ctx, t, c, rdb, redistest.Prefix(t)+"single", 3)
	if err := s.release(ctx); err != nil {
		t.Fatal(err)
	}
}

// By default a client over a ClusterClient uses sharded pub/sub when the
// servers have it (Redis 7+; Redisson's AUTO): the waiter's subscription is
// a shard subscription on the lock's primary, and the wake-up reaches it.
// WithShardedPubSub(false) keeps classic pub/sub; a plain client defaults to
// classic.
func TestShardedByDefaultOnCluster(t *testing.T) {
	cl := redistest.SharedCluster(t)
	cc := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name    string
		opts    []fairlock.Option
		sharded bool
	}{
		{"default", nil, true},
		{"explicit off", []fairlock.Option{fairlock.WithShardedPubSub(false)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, cc, append(tc.opts, fairlock.WithLease(60*time.Second))...)
			name := redistest.Prefix(t) + "auto"
			h := newFair(t, c, name)
			w := newFair(t, c, name)
			if err := h.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			if got := core.Of(c).Hub.Sharded(); got != tc.sharded {
				t.Fatalf("Sharded() = %v, want %v", got, tc.sharded)
			}
			done := make(chan error, 1)
			go func() { done <- w.Lock(ctx) }()
			waitQueued(ctx, t, cc, name, w.Owner())
			ch := wire.KeysFor(name).WaiterChannel(w.Owner())
			primary, err := cc.MasterForKey(ctx, ch)
			if err != nil {
				t.Fatal(err)
			}
			if err := retryUntil(ctx, func() error {
				n, err := primary.PubSubShardNumSub(ctx, ch).Result()
				if err == nil && (n[ch] == 1) != tc.sharded {
					err = errors.New("subscription not (yet) of the expected kind")
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if err := h.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if err := w.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("plain client", func(t *testing.T) {
		c := newClient(t, redistest.Real(t).Client(t))
		if core.Of(c).Hub.Sharded() {
			t.Fatal("a plain client defaults to sharded pub/sub")
		}
	})
}
