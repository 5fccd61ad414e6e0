package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock/internal/faultproxy"
)

// TestGrantOutageEndsAtWait: with etcd never reachable (the proxy cut
// before the Client's first call), the acquisition's lease grant waits for
// a connection (etcd's client waits for one) and ends at the wait bound:
// not granted, no error (the wait ran out), not sooner and not much later.
func TestGrantOutageEndsAtWait(t *testing.T) {
	e := newEnv(t)
	p := faultproxy.Start(t, e.srv.Endpoint)
	t.Cleanup(p.Cut())
	c := e.client(p.Addr, WithTTL(3*time.Second))
	m := mustMutex(t, c, "grant-outage")
	start := time.Now()
	ok, err := m.Acquire(context.Background(), AcquireOptions{Wait: 2 * time.Second})
	d := time.Since(start)
	if ok || err != nil {
		t.Fatalf("Acquire(wait 2s) with etcd unreachable: ok=%v err=%v, want the wait to run out", ok, err)
	}
	if d < 2*time.Second || d > 2*time.Second+3*time.Second {
		t.Fatalf("Acquire(wait 2s) returned after %v", d)
	}
}

// TestLateGrantIsKeptAlive: a lease grant answered late (its reply held
// back 2.3 s of a 3 s TTL, so the session's validity, counted from the
// send, has about 0.7 s left when the reply comes) is refreshed at once,
// not left to lapse: the hold made on it stays valid while etcd answers.
// Before the fix the keep-alive loop waited min(TTL/3, validity left) and
// then found the validity passed without having sent a keep-alive: the
// hold was lost about 0.7 s after the grant (TestFaultPartitionedClient
// failed in CI this way when the healed Client's grant waited for gRPC's
// reconnect: "the healed Client did not take the lock again").
func TestLateGrantIsKeptAlive(t *testing.T) {
	e := newEnv(t)
	p := faultproxy.Start(t, e.srv.Endpoint)
	c := e.client(p.Addr, WithTTL(3*time.Second))
	m := mustMutex(t, c, "late-grant")
	undo := holdReplies(t, p)
	time.AfterFunc(2300*time.Millisecond, undo)
	ctx := context.Background()
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	select {
	case <-m.Done():
		t.Fatalf("the hold was lost %v after the grant, with etcd answering: %v", time.Since(granted), m.Err())
	case <-time.After(4 * time.Second):
	}
	if v := m.ValidUntil(); !v.After(time.Now().Add(time.Second)) {
		t.Fatalf("ValidUntil %v: not refreshed", time.Until(v))
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
