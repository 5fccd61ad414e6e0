package clustertest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/multi"
)

// Issue 22 item 2 on a real cluster: every key and channel of a venue, and
// its seats' names, hash to the venue's slot, by core.Slot and by CLUSTER
// KEYSLOT.
func TestKeysOfAVenueShareASlot(t *testing.T) {
	cl := redistest.SharedCluster(t)
	cc := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	owner := wire.Owner("0b2c8a4e-3e0e-4c8e-9b7a-1d2f3a4b5c6d", 7)
	for _, tag := range []string{"venue", "hall-7", "名前", "with space", "a"} {
		k := wire.SeatsKeysFor(tag)
		keys := []string{k.Holds, k.Leases, k.Seat, k.Req, k.Queue, k.Grace, k.Token, k.Channel,
			k.WaiterChannel(owner), k.AcquireLatch(core.RequestID()), k.ReleaseLatch(core.RequestID()),
			"{" + tag + "}:12A", "row 3 {" + tag + "} seat 9"}
		want := core.Slot("{" + tag + "}")
		for _, key := range keys {
			if got := core.Slot(key); got != want {
				t.Errorf("venue %q: key %q in slot %d, venue in %d", tag, key, got, want)
			}
			server, err := cc.ClusterKeySlot(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if int(server) != want {
				t.Errorf("venue %q: CLUSTER KEYSLOT %q = %d, core.Slot = %d", tag, key, server, want)
			}
		}
	}
}

// A venue on every shard: overlapping requests of another client, queued
// one after the other, are granted in arrival order, each woken by sharded
// pub/sub. The watchdog lease (60 s) and the head grace (60 s) are long: a
// waiter sleeps up to one of them between polls, so a grant within the
// test's bound (10 s after the release that makes it possible) comes from a
// wake-up.
func TestSeatsOnEveryShard(t *testing.T) {
	cl := redistest.SharedCluster(t)
	cc := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	opts := []fairlock.Option{fairlock.WithShardedPubSub(true), fairlock.WithLease(60 * time.Second),
		fairlock.WithHeadGrace(60 * time.Second)}
	holderC := newClient(t, cl.Client(t), opts...)
	waiterC := newClient(t, cl.Client(t), opts...)
	for primary, ns := range namesOnEachPrimary(ctx, t, cl, redistest.Prefix(t), 1) {
		tag := ns[0]
		k := wire.SeatsKeysFor(tag)
		seats := func(c *fairlock.Client, ls ...string) *multi.Seats {
			var names []string
			for _, l := range ls {
				names = append(names, "{"+tag+"}:"+l)
			}
			s, err := multi.NewSeats(c, names...)
			if err != nil {
				t.Fatal(err)
			}
			if s.Mode() != multi.OneVenue {
				t.Fatalf("mode %v", s.Mode())
			}
			return s
		}
		door, err := seats(holderC, "A", "B", "C").Acquire(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		type res struct {
			h   *multi.SeatHold
			err error
		}
		// w1 wants A B, w2 B C (behind w1 on B), w3 C A (behind w1 on A,
		// w2 on C): granted one after the other.
		sets := [][]string{{"B", "A"}, {"C", "B"}, {"A", "C"}}
		done := make([]chan res, len(sets))
		for i, set := range sets {
			done[i] = make(chan res, 1)
			s := seats(waiterC, set...)
			go func() {
				h, err := s.Acquire(ctx, 0)
				done[i] <- res{h, err}
			}()
			waitRequests(ctx, t, cc, k, int64(i+2), primary)
		}
		release := door.Release
		last := door.Token()
		for i := range done {
			relAt := time.Now()
			if err := release(ctx); err != nil {
				t.Fatal(err)
			}
			var r res
			select {
			case r = <-done[i]:
			case <-time.After(10 * time.Second):
				t.Fatalf("waiter %d on %s (primary %s) not woken within 10 s", i, tag, primary)
			}
			if r.err != nil {
				t.Fatalf("waiter %d on %s (primary %s): %v", i, tag, primary, r.err)
			}
			if r.h.Token() <= last {
				t.Errorf("waiter %d granted out of order: token %d after %d", i, r.h.Token(), last)
			}
			for j := i + 1; j < len(done); j++ {
				select {
				case r := <-done[j]:
					t.Fatalf("waiter %d granted before waiter %d (err %v)", j, i+1, r.err)
				default:
				}
			}
			t.Logf("%s waiter %d granted %v after the release", primary, i, time.Since(relAt).Round(time.Millisecond))
			last = r.h.Token()
			release = r.h.Release
		}
		if err := release(ctx); err != nil {
			t.Fatal(err)
		}
		if n := cc.HLen(ctx, k.Req).Val(); n != 0 {
			t.Errorf("venue %s: %d requests left", tag, n)
		}
	}
	if n := core.Of(waiterC).Hub.Conns(); n != 3 {
		t.Errorf("waiters' hub holds %d connections, want 3", n)
	}
}

// waitRequests waits until the venue has n requests (queued or holding).
func waitRequests(ctx context.Context, t *testing.T, cc redis.Cmdable, k wire.SeatsKeys, n int64, where string) {
	t.Helper()
	for cc.HLen(ctx, k.Req).Val() < n {
		if ctx.Err() != nil {
			t.Fatalf("venue %s on %s: never %d requests", k.Venue, where, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Across venues on different shards: the fallback takes each venue's seats
// on its own shard; two requests naming the seats in opposite orders both
// finish, one after the other.
func TestSeatsAcrossShards(t *testing.T) {
	cl := redistest.SharedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c1 := newClient(t, cl.Client(t), fairlock.WithShardedPubSub(true))
	c2 := newClient(t, cl.Client(t), fairlock.WithShardedPubSub(true))
	var names []string
	for _, ns := range namesOnEachPrimary(ctx, t, cl, redistest.Prefix(t), 1) {
		names = append(names, "{"+ns[0]+"}:A")
	}
	rev := []string{names[2], names[1], names[0]}
	s1, err := multi.NewSeats(c1, names...)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := multi.NewSeats(c2, rev...)
	if err != nil {
		t.Fatal(err)
	}
	if s1.Mode() != multi.AcrossVenues {
		t.Fatalf("mode %v", s1.Mode())
	}
	h1, err := s1.Acquire(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		h2, err := s2.Acquire(ctx, 0)
		if err == nil {
			err = h2.Release(ctx)
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("granted while held (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := h1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the second request was not granted")
	}
}
