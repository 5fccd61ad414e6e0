package etcd

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fence"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

// TestTokenWithFence: the etcd Mutex's tokens are usable with package
// fence (a Redis write a stale token cannot make). Holders of one etcd lock
// on two Clients in turn each write the same Redis key through fence with
// their token; a first holder that lost its lease (revoked by an operator,
// as a holder paused past its lease loses it) and a holder that has
// unlocked both make a late write with their old token: refused, the
// value and the fence stay the newer holder's. Run on miniredis and on a
// private redis-server.
func TestTokenWithFence(t *testing.T) {
	e := newEnv(t)
	run := func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		key := redistest.Prefix(t) + "seat"
		a, bc := e.client(e.srv.Endpoint), e.client(e.srv.Endpoint)
		name := "fence-" + t.Name()
		write := func(who string, tok int64, wantAccepted bool) {
			t.Helper()
			res, err := fence.Write(ctx, rdb, key, tok, fence.Set(who))
			if err != nil {
				t.Fatalf("%s: fenced write with token %d: %v", who, tok, err)
			}
			if res.Accepted != wantAccepted {
				t.Fatalf("%s: fenced write with token %d: %v, want accepted=%v", who, tok, res, wantAccepted)
			}
		}
		value := func(want string) {
			t.Helper()
			if v, err := rdb.Get(ctx, key).Result(); err != nil || v != want {
				t.Fatalf("resource holds %q (%v), want %q", v, err, want)
			}
		}

		// Holder 1 on Client a writes with its token.
		m1 := mustMutex(t, a, name)
		t1, err := m1.LockAndGetToken(ctx)
		if err != nil {
			t.Fatal(err)
		}
		write("h1", t1, true)
		// The operator revokes holder 1's lease: its hold is over (told by
		// Done), though a paused holder would not have looked yet.
		ks, err := e.raw.Get(ctx, m1.Key())
		if err != nil || len(ks.Kvs) != 1 {
			t.Fatalf("holder 1's key: %v, %v", ks, err)
		}
		if _, err := e.raw.Revoke(ctx, clientv3.LeaseID(ks.Kvs[0].Lease)); err != nil {
			t.Fatal(err)
		}
		// Holder 2 on Client b takes the lock and writes.
		m2 := mustMutex(t, bc, name)
		t2, ok, err := m2.TryLockAndGetToken(ctx, 10*time.Second, 0)
		if err != nil || !ok {
			t.Fatalf("holder 2: %v, %v", ok, err)
		}
		if t2 <= t1 {
			t.Fatalf("holder 2's token %d is not greater than holder 1's %d", t2, t1)
		}
		write("h2", t2, true)
		select {
		case <-m1.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("holder 1 not told its lease was revoked")
		}
		if !errors.Is(m1.Err(), fairlock.ErrLost) {
			t.Fatalf("holder 1's Err: %v, want ErrLost", m1.Err())
		}
		// Holder 1's late write with its old token is refused.
		write("h1-late", t1, false)
		value("h2")
		if last, err := fence.Last(ctx, rdb, key); err != nil || last != t2 {
			t.Fatalf("fence after the refused write: %d, %v; want %d", last, err, t2)
		}
		// Holder 2 writes again with its token (equal tokens are accepted),
		// unlocks; holder 3 (Client a, a new handle) takes the lock; holder
		// 2's late write is refused.
		write("h2-again", t2, true)
		if err := m2.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		m3 := mustMutex(t, a, name)
		t3, err := m3.LockAndGetToken(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if t3 <= t2 {
			t.Fatalf("holder 3's token %d is not greater than holder 2's %d", t3, t2)
		}
		// A re-entry returns the hold's token; Token reads it too.
		if again, err := m3.LockAndGetToken(ctx); err != nil || again != t3 {
			t.Fatalf("re-entry token %d, %v; want %d", again, err, t3)
		}
		_ = m3.Unlock(ctx)
		if cur, err := m3.Token(ctx); err != nil || cur != t3 {
			t.Fatalf("Token %d, %v; want %d", cur, err, t3)
		}
		write("h3", t3, true)
		write("h2-late", t2, false)
		write("h1-later", t1, false)
		value("h3")
		if err := m3.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("miniredis", func(t *testing.T) { run(t, redistest.Mini(t)) })
	t.Run("redis-server", func(t *testing.T) { run(t, redistest.StartT(t).Backend()) })
}
