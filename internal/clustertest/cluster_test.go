package clustertest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Every key and channel of a lock hashes to one slot, by core.Slot and by
// the cluster's own CLUSTER KEYSLOT.
func TestKeysOfALockShareASlot(t *testing.T) {
	redistest.Long(t)
	cl := redistest.SharedCluster(t)
	cc := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := []string{"a", "seats", "{order}:seat", "x{tag}y", "名前", "with space", "redisson_lock_queue"}
	for i := 0; i < 50; i++ {
		names = append(names, "lock-"+strconv.Itoa(i))
	}
	owner := wire.Owner("0b2c8a4e-3e0e-4c8e-9b7a-1d2f3a4b5c6d", 7)
	for _, name := range names {
		k := wire.KeysFor(name)
		want := core.Slot(name)
		for _, key := range []string{k.Name, k.Channel, k.Queue, k.Timeouts, k.Latch(core.RequestID()), k.WaiterChannel(owner), k.ScalableQueue()} {
			if got := core.Slot(key); got != want {
				t.Errorf("%q: key %q in slot %d, lock in %d", name, key, got, want)
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

// 200 fair locks spread over all three shards, each with a holder and three
// queued waiters: every lock is held by one owner at a time and handed on
// in arrival order, with wake-ups by sharded pub/sub. The watchdog lease is
// long (60 s) so that a waiter could only get its turn in time by a
// wake-up: a lost wake-up would leave it asleep past the test's deadline.
func TestManyLocksAcrossShards(t *testing.T) {
	cl := redistest.SharedCluster(t)
	cc := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	c := newClient(t, cc, fairlock.WithShardedPubSub(true), fairlock.WithLease(60*time.Second))
	prefix := redistest.Prefix(t)
	byPrimary := namesOnEachPrimary(ctx, t, cl, prefix, 67)
	var names []string
	for _, ns := range byPrimary {
		names = append(names, ns...)
	}
	names = names[:200]
	if len(byPrimary) != 3 {
		t.Fatalf("names on %d primaries, want 3", len(byPrimary))
	}
	scenes := make([]*queueScene, len(names))
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			scenes[i] = startScene(ctx, t, c, cc, name, 3)
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if n := core.Of(c).Hub.Conns(); n != 3 {
		t.Errorf("hub holds %d pub/sub connections, want one per primary (3)", n)
	}
	for _, s := range scenes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.release(ctx)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := core.Of(c).WaitChannels(); n != 0 {
		t.Errorf("%d channels still subscribed", n)
	}
}

// Sharded wake-ups reach a waiter on every shard, from a different client
// than the one that unlocks (so the message crosses the server).
func TestShardedWakeupsOnEveryShard(t *testing.T) {
	cl := redistest.SharedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holderC := newClient(t, cl.Client(t), fairlock.WithShardedPubSub(true), fairlock.WithLease(60*time.Second))
	waiterC := newClient(t, cl.Client(t), fairlock.WithShardedPubSub(true), fairlock.WithLease(60*time.Second))
	byPrimary := namesOnEachPrimary(ctx, t, cl, redistest.Prefix(t), 1)
	for primary, ns := range byPrimary {
		name := ns[0]
		h := newFair(t, holderC, name)
		w := newFair(t, waiterC, name)
		if err := h.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- w.Lock(ctx) }()
		waitQueued(ctx, t, cl.Client(t), name, w.Owner())
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("waiter on %s (primary %s): %v", name, primary, err)
		}
		if err := w.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := core.Of(waiterC).Hub.Conns(); n != 3 {
		t.Errorf("waiters' hub holds %d connections, want 3", n)
	}
}

// The watchdog renews locks on every shard (one renewal call per slot; a
// call mixing slots would fail with CROSSSLOT): 200 locks held for one and
// a half leases stay held.
func TestWatchdogRenewsPerSlot(t *testing.T) {
	redistest.Long(t)
	cl := redistest.SharedCluster(t)
	cc := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The watchdog renews slot after slot, one call each, within one
	// period (lease/3); 200 slots need a period well above 200 round trips
	// on a loaded machine (see the report on the watchdog's shared
	// per-tick deadline).
	const lease = 3 * time.Second
	c := newClient(t, cc, fairlock.WithLease(lease))
	prefix := redistest.Prefix(t)
	var locks []*fair.Mutex
	for i := 0; i < 200; i++ {
		m := newFair(t, c, prefix+strconv.Itoa(i))
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		locks = append(locks, m)
	}
	time.Sleep(lease * 3 / 2) // longer than the lease: only renewals keep them
	for _, m := range locks {
		held, err := m.IsHeld(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !held || m.Err() != nil {
			t.Fatalf("%s lost: held=%v err=%v", m.Name(), held, m.Err())
		}
	}
	for _, m := range locks {
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A slot is migrated to another primary while a fair queue waits on it.
// The holder releases in the middle of the migration (keys already moved:
// the scripts follow ASK) and after it; every waiter gets the lock, in
// order, one at a time.
func TestSlotMigrationWhileQueued(t *testing.T) {
	redistest.Long(t)
	for _, sharded := range []bool{false, true} {
		t.Run(fmt.Sprintf("sharded=%v", sharded), func(t *testing.T) {
			cl := redistest.SharedCluster(t)
			cc := cl.Client(t)
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			// A long lease: a waiter that missed its wake-up would sleep
			// past the test's deadline. With sharded pub/sub the waiters'
			// subscriptions are on the old primary, which drops them when
			// the slot leaves it; the hub must move them.
			c := newClient(t, cc, fairlock.WithShardedPubSub(sharded), fairlock.WithLease(60*time.Second))
			name := redistest.Prefix(t) + "migrating"
			slot := core.Slot(name)
			prims, err := cl.Primaries(ctx)
			if err != nil {
				t.Fatal(err)
			}
			src, err := cl.PrimaryOf(ctx, slot)
			if err != nil {
				t.Fatal(err)
			}
			dst := prims[0]
			if dst == src {
				dst = prims[1]
			}
			s := startScene(ctx, t, c, cc, name, 3)
			mig, err := newMigration(ctx, cl, slot, dst)
			if err != nil {
				t.Fatal(err)
			}
			defer mig.close()
			if err := mig.begin(ctx); err != nil {
				t.Fatal(err)
			}
			moved, err := mig.moveKeys(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if moved < 3 { // lock hash, queue, timeouts
				t.Fatalf("moved %d keys", moved)
			}
			// Release in the ASK window: every key of the lock is on the
			// importing node, but the unlock script also creates its
			// latch key, and Redis refuses a multi-key command whose keys
			// are partly missing during a migration (TRYAGAIN). So the
			// unlock retries until the migration finishes.
			start := time.Now()
			released := make(chan error, 1)
			go func() { released <- unlockRetry(ctx, s.holder) }()
			probe, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
			err = s.holder.Unlock(probe)
			pcancel()
			t.Logf("an unlock during the ASK window: %v", err)
			if err := mig.finish(ctx); err != nil {
				t.Fatal(err)
			}
			finished := time.Now()
			// The probe's unconfirmed unlock is retried in the background
			// too: whichever of the two reaches Redis second finds the lock
			// released (ErrNotHeld); the waiters' grants below show it was.
			if err := <-released; err != nil && !errors.Is(err, fairlock.ErrNotHeld) {
				t.Fatal(err)
			}
			if err := s.wait(); err != nil {
				t.Fatal(err)
			}
			t.Logf("slot %d moved %s -> %s with %d keys; released %v after the window opened; waiters acquired at %v after the migration finished",
				slot, src, dst, moved, time.Since(start).Round(time.Millisecond), s.offsets(finished))
			// Move it back so later tests see the usual layout.
			back, err := newMigration(ctx, cl, slot, src)
			if err != nil {
				t.Fatal(err)
			}
			defer back.close()
			if err := back.begin(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := back.moveKeys(ctx); err != nil {
				t.Fatal(err)
			}
			if err := back.finish(ctx); err != nil {
				t.Fatal(err)
			}
			if err := cl.WaitHealthy(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func (s *queueScene) snapshotOrder() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.order...)
}

func (s *queueScene) offsets(start time.Time) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Duration
	for _, at := range s.got {
		out = append(out, at.Sub(start).Round(time.Millisecond))
	}
	return out
}
