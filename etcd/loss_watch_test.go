package etcd

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/faultproxy"
)

// holdState reads m's current hold without observing it (Done, Err, Key
// and the like open the loss watch): its key, lease and whether it ended.
func holdState(m *Mutex) (key string, lease clientv3.LeaseID, ended bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.last
	if h == nil {
		return "", 0, true
	}
	return h.key, h.sess.id, h.ended
}

// waitEnded waits (without observing the hold) until m's hold has ended.
func waitEnded(t *testing.T, m *Mutex, d time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if _, _, ended := holdState(m); ended {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the hold did not end within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLossWatchOpensByItself: the hold's loss watch is not opened in an
// uncontended cycle (TestRoundTripsUncontended), but a hold that nobody
// observes still opens it lossWatchDelay after its grant, from the grant's
// revision: a deletion of its key right after the grant, and an operator's
// revoke of its lease (a 30 s TTL: the keep-alives would tell only after
// 10 s), end it within seconds, with Err matching ErrLost.
func TestLossWatchOpensByItself(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c1, c2 := e.client("", WithTTL(30*time.Second)), e.client("", WithTTL(30*time.Second))
	m1, m2 := mustMutex(t, c1, "unobserved-delete"), mustMutex(t, c2, "unobserved-revoke")
	if err := m1.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	key, _, _ := holdState(m1)
	if _, err := e.raw.Delete(ctx, key); err != nil { // at once: before the watch opens
		t.Fatal(err)
	}
	if err := m2.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the watch has opened by itself
	_, lease, _ := holdState(m2)
	start := time.Now()
	if _, err := e.raw.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, m1, 3*time.Second, "key deleted right after the grant")
	waitEnded(t, m2, 3*time.Second, "lease revoked")
	t.Logf("revoke told after %v", time.Since(start))
	for _, m := range []*Mutex{m1, m2} {
		if !errors.Is(m.Err(), fairlock.ErrLost) {
			t.Fatalf("%s: Err %v, want ErrLost", m.Name(), m.Err())
		}
		if err := m.Unlock(ctx); !errors.Is(err, fairlock.ErrNotHeld) {
			t.Fatalf("%s: Unlock of a lost hold: %v", m.Name(), err)
		}
	}
}

// TestLossWatchOpensWhenObserved: with lossWatchDelay out of the way, a
// hold's loss watch opens when the hold is observed: a deleted key of an
// unobserved hold goes untold (which shows the watch is what tells), the
// first Err opens the watch (from the grant's revision, so the deletion
// before it is not missed) and Done closes within seconds; a hold whose
// Done was taken before the deletion is told as soon.
func TestLossWatchOpensWhenObserved(t *testing.T) {
	old := lossWatchDelay
	lossWatchDelay = time.Hour
	t.Cleanup(func() { lossWatchDelay = old })
	e := newEnv(t)
	ctx := context.Background()
	c1, c2 := e.client("", WithTTL(30*time.Second)), e.client("", WithTTL(30*time.Second))
	m1, m2 := mustMutex(t, c1, "observed-late"), mustMutex(t, c2, "observed-early")
	if err := m1.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m2.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	done2 := m2.Done() // observed: the watch opens now
	time.Sleep(200 * time.Millisecond)
	k1, _, _ := holdState(m1)
	k2, _, _ := holdState(m2)
	for _, k := range []string{k1, k2} {
		if _, err := e.raw.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	within(t, done2, 3*time.Second, "Done taken before the deletion")
	time.Sleep(time.Second)
	if _, _, ended := holdState(m1); ended {
		t.Fatal("an unobserved hold was told with the watch delay at an hour: the test cannot tell")
	}
	_ = m1.Err() // observes: the watch opens from the grant's revision
	within(t, m1.Done(), 3*time.Second, "Done after the first Err")
	for _, m := range []*Mutex{m1, m2} {
		if !errors.Is(m.Err(), fairlock.ErrLost) {
			t.Fatalf("%s: Err %v, want ErrLost", m.Name(), m.Err())
		}
	}
}

// TestUnconfirmedDeleteRenamesKey: Unlock's first delete is unfenced (a
// plain Delete). When it gets no reply it may still be applied later, so
// the handle's next hold (same lease) must not have the same key name, or
// that late delete would delete it. Here the delete runs but its reply is
// held back (the proxy's StallReplies) until Unlock gave up; the next hold's
// key differs, and a late delete of the old name leaves it held. (Fails
// with the renaming removed: "the newer hold has the key ... of the
// unconfirmed delete".)
func TestUnconfirmedDeleteRenamesKey(t *testing.T) {
	e := newEnv(t)
	p := faultproxy.Start(t, e.srv.Endpoint)
	c := e.client(p.Addr, WithTTL(30*time.Second))
	ctx := context.Background()
	m := mustMutex(t, c, "unconfirmed")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	oldKey, oldLease, _ := holdState(m)
	undo := p.StallReplies()
	uctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err := m.Unlock(uctx)
	cancel()
	undo()
	if err == nil {
		t.Fatal("Unlock with its replies held back returned nil")
	}
	lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
	defer lcancel()
	if err := m.Lock(lctx); err != nil {
		t.Fatal(err)
	}
	newKey, newLease, _ := holdState(m)
	if newLease != oldLease {
		t.Fatalf("the next hold is on another lease (%x, %x): the test needs the same one", newLease, oldLease)
	}
	if newKey == oldKey {
		t.Fatalf("the newer hold has the key %s of the unconfirmed delete", oldKey)
	}
	if _, err := e.raw.Delete(ctx, oldKey); err != nil { // the late delete
		t.Fatal(err)
	}
	if ok, err := m.IsHeld(ctx); !ok || err != nil {
		t.Fatalf("the newer hold is gone after a late delete of the old name: %v, %v", ok, err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
