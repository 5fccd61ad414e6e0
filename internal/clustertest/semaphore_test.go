package clustertest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/semaphore"
)

// Issue 21 item 4: every key and channel of a semaphore (both kinds) hashes
// to the name's slot, by core.Slot and by the cluster's CLUSTER KEYSLOT.
func TestKeysOfASemaphoreShareASlot(t *testing.T) {
	cl := redistest.SharedCluster(t)
	cc := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := []string{"a", "seats", "{venue}:stalls", "x{tag}y", "名前", "with space"}
	for i := 0; i < 30; i++ {
		names = append(names, "sem-"+strconv.Itoa(i))
	}
	owner := wire.Owner("0b2c8a4e-3e0e-4c8e-9b7a-1d2f3a4b5c6d", 7)
	for _, name := range names {
		f := wire.SemFairKeysFor(name)
		e := wire.SemKeysFor(name)
		keys := []string{f.Holders, f.Leases, f.Permits, f.Queue, f.Wants, f.Grace, f.Token, f.Channel,
			f.WaiterChannel(owner), f.AcquireLatch(core.RequestID()), f.ReleaseLatch(core.RequestID()),
			e.Pool, e.Timeouts, e.Channel, e.Token}
		want := core.Slot(name)
		for _, key := range keys {
			if got := core.Slot(key); got != want {
				t.Errorf("%q: key %q in slot %d, semaphore in %d", name, key, got, want)
			}
			server, err := cc.ClusterKeySlot(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if int(server) != want {
				t.Errorf("%q: CLUSTER KEYSLOT %q = %d, core.Slot = %d", name, key, server, want)
			}
		}
	}
}

// A fair semaphore on every shard: waiters of another client are woken by
// sharded pub/sub and granted in order. The watchdog lease is long (60 s):
// a waiter could only be granted within the test's deadline by a wake-up.
func TestFairSemaphoreOnEveryShard(t *testing.T) {
	cl := redistest.SharedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	holderC := newClient(t, cl.Client(t), fairlock.WithShardedPubSub(true), fairlock.WithLease(60*time.Second))
	waiterC := newClient(t, cl.Client(t), fairlock.WithShardedPubSub(true), fairlock.WithLease(60*time.Second))
	for primary, ns := range namesOnEachPrimary(ctx, t, cl, redistest.Prefix(t), 1) {
		h, err := semaphore.NewFair(holderC, ns[0])
		if err != nil {
			t.Fatal(err)
		}
		w, err := semaphore.NewFair(waiterC, ns[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := h.SetPermits(ctx, 2); err != nil {
			t.Fatal(err)
		}
		all, err := h.Acquire(ctx, 2, 0)
		if err != nil {
			t.Fatal(err)
		}
		type res struct {
			p   *semaphore.Permit
			err error
		}
		done := make([]chan res, 2)
		for i := range done {
			done[i] = make(chan res, 1)
			go func() {
				p, err := w.Acquire(ctx, 1, 0)
				done[i] <- res{p, err}
			}()
			for { // queued one after the other
				st, err := w.State(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if st.Queued == i+1 {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("waiter %d on %s never queued", i, primary)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		if err := all.Release(ctx); err != nil {
			t.Fatal(err)
		}
		var last int64
		for i := range done {
			r := <-done[i]
			if r.err != nil {
				t.Fatalf("waiter %d on %s (primary %s): %v", i, ns[0], primary, r.err)
			}
			if r.p.Token() <= last {
				t.Errorf("waiter %d granted out of order: token %d after %d", i, r.p.Token(), last)
			}
			last = r.p.Token()
			if err := r.p.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := core.Of(waiterC).Hub.Conns(); n != 3 {
		t.Errorf("waiters' hub holds %d connections, want 3", n)
	}
}

// The watchdog renews semaphore holds on every shard, one call per slot
// (a call mixing slots would fail with CROSSSLOT): 60 permits of both
// kinds held for one and a half leases stay held.
func TestWatchdogRenewsSemaphoresPerSlot(t *testing.T) {
	redistest.Long(t)
	cl := redistest.SharedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const lease = 3 * time.Second
	c := newClient(t, cl.Client(t), fairlock.WithLease(lease))
	prefix := redistest.Prefix(t)
	var permits []*semaphore.Permit
	for i := 0; i < 30; i++ {
		f, err := semaphore.NewFair(c, prefix+"f"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		e, err := semaphore.NewExpirable(c, prefix+"e"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.SetPermits(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if err := e.SetPermits(ctx, 1); err != nil {
			t.Fatal(err)
		}
		for _, acq := range []func() (*semaphore.Permit, error){
			func() (*semaphore.Permit, error) { return f.Acquire(ctx, 1, 0) },
			func() (*semaphore.Permit, error) { return e.Acquire(ctx, 1, 0) },
		} {
			p, err := acq()
			if err != nil {
				t.Fatal(err)
			}
			permits = append(permits, p)
		}
	}
	time.Sleep(lease * 3 / 2) // longer than the lease: only renewals keep them
	for i, p := range permits {
		if p.Err() != nil {
			t.Fatalf("permit %d lost: %v", i, p.Err())
		}
	}
	for _, p := range permits {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
