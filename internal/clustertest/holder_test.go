package clustertest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/reentrant"
)

// The lease timer of an acquisition counts from the request's send, through
// the replica wait: with the replica paused past the lease, the acquisition
// that waited for it is given back, and LockWithLease returns only with a
// hold that is still valid (here: taken again once the replica is back).
func TestAcquisitionLeaseCountsFromTheSend(t *testing.T) {
	redistest.Long(t)
	st := redistest.SentinelsT(t)
	rdb := redis.NewClient(&redis.Options{Addr: st.Primary.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lease := 2 * time.Second
	// The ack timeout stays under go-redis's 3 s read timeout.
	c := newClient(t, rdb, fairlock.WithReplicaAck(2800*time.Millisecond))
	m, err := reentrant.New(c, redistest.Prefix(t)+"lock")
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := st.Replica.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := make(chan struct{})
	go func() {
		defer close(resumed)
		time.Sleep(lease + 400*time.Millisecond)
		_ = st.Replica.Resume()
	}()
	t.Cleanup(func() { <-resumed })
	start := time.Now()
	err = m.LockWithLease(ctx, lease)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("LockWithLease: %v", err)
	}
	held, herr := rdb.HExists(ctx, m.Name(), m.Owner()).Result()
	if herr != nil {
		t.Fatal(herr)
	}
	if !held {
		t.Fatalf("LockWithLease(%v) returned after %v with a hold Redis no longer has", lease, took)
	}
	if v := m.ValidUntil(); !time.Now().Before(v) {
		t.Fatalf("returned a hold whose validity already ran out (%v)", v)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// One unresponsive primary delays only the locks it serves: the watchdog
// keeps renewing the locks on the other primaries while it is stopped, and
// the locks on it are reported lost within their lease.
func TestStoppedPrimaryDelaysOnlyItsLocks(t *testing.T) {
	redistest.Long(t)
	cl := redistest.ClusterT(t)
	cc := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lease := 1500 * time.Millisecond // a renewal every 500 ms
	c := newClient(t, cc, fairlock.WithLease(lease), fairlock.WithReplicaAck(-1))
	byPrimary := namesOnEachPrimary(ctx, t, cl, redistest.Prefix(t), 6)
	var stopped string
	locks := map[string][]*reentrant.Mutex{}
	for addr, names := range byPrimary {
		if stopped == "" {
			stopped = addr
		}
		for _, n := range names {
			m, err := reentrant.New(c, n)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			locks[addr] = append(locks[addr], m)
		}
	}
	before := map[*reentrant.Mutex]time.Time{}
	for _, ms := range locks {
		for _, m := range ms {
			before[m] = m.ValidUntil()
		}
	}
	node := cl.Node(stopped)
	if err := node.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = node.Resume()
		}
	}
	defer resume()
	// Stay under the cluster's node timeout: no failover.
	time.Sleep(redistest.NodeTimeout * 8 / 10)
	renewedDuringPause := map[*reentrant.Mutex]bool{}
	for _, ms := range locks {
		for _, m := range ms {
			renewedDuringPause[m] = m.ValidUntil().After(before[m])
		}
	}
	for _, m := range locks[stopped] {
		select {
		case <-m.Done():
		default:
			if time.Now().After(m.ValidUntil()) {
				t.Errorf("%s: validity ran out but Done is open", m.Name())
			}
		}
	}
	resume()
	for addr, ms := range locks {
		if addr == stopped {
			continue
		}
		for _, m := range ms {
			select {
			case <-m.Done():
				t.Errorf("%s on a healthy primary ended while another was stopped: %v", m.Name(), m.Err())
			default:
			}
			if !renewedDuringPause[m] {
				t.Errorf("%s on a healthy primary was not renewed while another primary was stopped", m.Name())
			}
		}
	}
}

// A ForceUnlock while an acquisition waits for its replica's
// acknowledgement deletes the hold that acquisition took: the acquisition
// must not then return as the holder, since another owner may already hold
// the lock (found by faulttests' TestReplicaFailover: "two owners believe
// they hold the lock for 801ms").
func TestForceUnlockDuringReplicaWaitIsSeen(t *testing.T) {
	redistest.Long(t)
	st := redistest.SentinelsT(t)
	rdb := redis.NewClient(&redis.Options{Addr: st.Primary.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newClient(t, rdb, fairlock.WithReplicaAck(2800*time.Millisecond))
	name := redistest.Prefix(t) + "lock"
	a, err := reentrant.New(c, name)
	if err != nil {
		t.Fatal(err)
	}
	b, err := reentrant.New(c, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := st.Replica.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = st.Replica.Resume()
		}
	})
	got := make(chan error, 1)
	go func() { got <- a.LockWithLease(ctx, 20*time.Second) }()
	// a's script has run and a now waits for the paused replica: a client
	// blocked in WAIT.
	deadline := time.Now().Add(10 * time.Second)
	for {
		held, err := rdb.HExists(ctx, name, a.Owner()).Result()
		if err != nil {
			t.Fatal(err)
		}
		list, err := rdb.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if held && strings.Contains(list, "cmd=wait") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a's acquisition never reached Redis")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := rdb.Del(ctx, name).Result(); err != nil { // what ForceUnlock does
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, name, b.Owner(), 1).Err(); err != nil { // another owner takes it
		t.Fatal(err)
	}
	resumed = true
	if err := st.Replica.Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		held, _ := rdb.HExists(ctx, name, a.Owner()).Result()
		t.Fatalf("a's Lock returned (%v; a in Redis: %v) while %s holds the lock", err, held, b.Owner())
	case <-time.After(2 * time.Second):
		// a goes on waiting: its acquisition was lost, not granted
	}
	// b releases as a reentrant unlock does; a then takes the lock.
	if err := rdb.Del(ctx, name).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Publish(ctx, wire.KeysFor(name).Channel, wire.UnlockMessage).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("a's Lock after b's release: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a was not granted the lock within 20s of b's release")
	}
	held, err := rdb.HExists(ctx, name, a.Owner()).Result()
	if err != nil || !held {
		t.Fatalf("a's Lock returned but a does not hold the lock in Redis (%v)", err)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
