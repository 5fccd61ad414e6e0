package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/etcd/internal/etcdtest"
	"github.com/fairlock-go/fairlock/internal/faultproxy"
	"github.com/fairlock-go/fairlock/multi"
)

var _ multi.Member = (*Mutex)(nil)

// env is one embedded etcd member and a way to make Clients on it.
type env struct {
	t   *testing.T
	srv *etcdtest.Server
	raw *clientv3.Client // an operator's client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := etcdtest.Start(t, etcdtest.Options{})
	return &env{t: t, srv: srv, raw: etcdtest.Client(t, srv.Endpoint)}
}

// client is a Client on its own etcd connection (to endpoint, or the
// member's), closed when the test ends.
func (e *env) client(endpoint string, opts ...Option) *Client {
	e.t.Helper()
	if endpoint == "" {
		endpoint = e.srv.Endpoint
	}
	c, err := New(etcdtest.Client(e.t, endpoint), append([]Option{WithTTL(2 * time.Second)}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func mustMutex(t *testing.T, c *Client, name string) *Mutex {
	t.Helper()
	m, err := c.NewMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// keys lists the lock's queue keys.
func (e *env) keys(m *Mutex) []*struct {
	Key   string
	Rev   int64
	Lease int64
} {
	e.t.Helper()
	resp, err := e.raw.Get(context.Background(), m.Prefix(), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		e.t.Fatal(err)
	}
	var out []*struct {
		Key   string
		Rev   int64
		Lease int64
	}
	for _, kv := range resp.Kvs {
		out = append(out, &struct {
			Key   string
			Rev   int64
			Lease int64
		}{string(kv.Key), kv.CreateRevision, kv.Lease})
	}
	return out
}

// waitKeys waits (generously) until the queue has n keys.
func (e *env) waitKeys(m *Mutex, n int) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if got := len(e.keys(m)); got == n {
			return
		} else if time.Now().After(deadline) {
			e.t.Fatalf("queue of %q has %d keys, want %d", m.Name(), got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func within(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not within %v", what, d)
	}
}

func TestLockUnlockReentry(t *testing.T) {
	e := newEnv(t)
	c := e.client("")
	m := mustMutex(t, c, "a/b") // a name with a slash is escaped
	ctx := context.Background()
	select {
	case <-m.Done():
	default:
		t.Fatal("Done of a handle holding nothing is open")
	}
	tok1, err := m.LockAndGetToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tok2, err := m.LockAndGetToken(ctx)
	if err != nil || tok2 != tok1 {
		t.Fatalf("re-entry: token %d, %v; want %d", tok2, err, tok1)
	}
	if n := m.HoldCount(); n != 2 {
		t.Fatalf("HoldCount %d, want 2", n)
	}
	if got, _ := m.Token(ctx); got != tok1 {
		t.Fatalf("Token %d, want %d", got, tok1)
	}
	if v := m.ValidUntil(); time.Until(v) < time.Second/2 {
		t.Fatalf("ValidUntil %v is not about a TTL away", time.Until(v))
	}
	done := m.Done()
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := m.IsHeld(ctx); !ok || err != nil {
		t.Fatalf("after one of two Unlocks: IsHeld %v, %v", ok, err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	within(t, done, time.Second, "Done after the last Unlock")
	if m.Err() != nil {
		t.Fatalf("Err after release: %v", m.Err())
	}
	if ok, err := m.IsHeld(ctx); ok || err != nil {
		t.Fatalf("after release: IsHeld %v, %v", ok, err)
	}
	if err := m.Unlock(ctx); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("Unlock of nothing: %v", err)
	}
	e.waitKeys(m, 0)
	// A second handle of the same client is another owner.
	m2 := mustMutex(t, c, "a/b")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := m2.TryLock(ctx); ok || err != nil {
		t.Fatalf("second handle: TryLock %v, %v while the first holds", ok, err)
	}
	// Other names do not collide: "a" is a prefix of "a/b" unescaped.
	other := mustMutex(t, c, "a")
	if ok, err := other.TryLock(ctx); !ok || err != nil {
		t.Fatalf("lock %q: TryLock %v, %v", "a", ok, err)
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t)
	c := e.client("")
	ctx := context.Background()
	var zero Mutex
	if err := zero.Lock(ctx); !errors.Is(err, fairlock.ErrInvalidValue) {
		t.Fatalf("zero Lock: %v", err)
	}
	if _, err := zero.TryLock(ctx); !errors.Is(err, fairlock.ErrInvalidValue) {
		t.Fatalf("zero TryLock: %v", err)
	}
	if err := zero.Unlock(ctx); !errors.Is(err, fairlock.ErrInvalidValue) {
		t.Fatalf("zero Unlock: %v", err)
	}
	if _, err := c.NewMutex(""); !errors.Is(err, fairlock.ErrInvalidName) {
		t.Fatalf("empty name: %v", err)
	}
	if _, err := New(nil); !errors.Is(err, fairlock.ErrInvalidValue) {
		t.Fatalf("nil client: %v", err)
	}
	if _, err := New(e.raw, WithTTL(time.Millisecond)); !errors.Is(err, fairlock.ErrInvalidValue) {
		t.Fatalf("TTL 1 ms: %v", err)
	}
	m := mustMutex(t, c, "bad")
	if err := m.LockWithLease(ctx, 5*time.Millisecond); !errors.Is(err, fairlock.ErrInvalidValue) {
		t.Fatalf("lease 5 ms: %v", err)
	}
	if err := m.LockWithLease(ctx, 0); !errors.Is(err, fairlock.ErrInvalidValue) {
		t.Fatalf("lease 0: %v", err)
	}
	if _, err := m.TryLockFor(ctx, -time.Second, 0); !errors.Is(err, fairlock.ErrInvalidValue) {
		t.Fatalf("wait -1 s: %v", err)
	}
	if _, err := m.Acquire(ctx, AcquireOptions{Wait: -5}); !errors.Is(err, fairlock.ErrInvalidValue) {
		t.Fatalf("wait -5 ns: %v", err)
	}
	e.waitKeys(m, 0) // nothing was written
}

func TestTryLockForBoundAndCleanup(t *testing.T) {
	e := newEnv(t)
	c1, c2 := e.client(""), e.client("")
	ctx := context.Background()
	h1, h2 := mustMutex(t, c1, "try"), mustMutex(t, c2, "try")
	if err := h1.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := h2.TryLock(ctx); ok || err != nil {
		t.Fatalf("TryLock while held: %v, %v", ok, err)
	}
	start := time.Now()
	ok, err := h2.TryLockFor(ctx, 500*time.Millisecond, 0)
	if took := time.Since(start); ok || err != nil || took < 500*time.Millisecond || took > 500*time.Millisecond+3*time.Second {
		t.Fatalf("TryLockFor(500ms) while held: %v, %v after %v", ok, err, took)
	}
	e.waitKeys(h1, 1) // the waiter's key is gone, the holder's stays
	// A waiter in the queue makes TryLock fail even on a free lock.
	go h2.Lock(ctx)
	e.waitKeys(h1, 2)
	h3 := mustMutex(t, c1, "try")
	if err := h1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	within(t, h2.ctxHeld(), 5*time.Second, "h2 granted")
	if ok, _ := h3.TryLock(ctx); ok {
		t.Fatal("TryLock took a lock held by h2")
	}
	if ok, err := h3.TryLockFor(ctx, 3*time.Second, 0); ok || err != nil {
		t.Fatalf("h3 TryLockFor: %v %v", ok, err)
	}
	if err := h2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := h3.TryLockFor(ctx, 5*time.Second, 0); !ok || err != nil {
		t.Fatalf("h3 TryLockFor on a free lock: %v %v", ok, err)
	}
}

// ctxHeld is a channel closed once m holds the lock (polled; tests only).
func (m *Mutex) ctxHeld() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		for range 2000 {
			m.mu.Lock()
			h := m.last
			m.mu.Unlock()
			if h != nil && !h.ended {
				close(ch)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return ch
}

func TestCancelRemovesWaiterKey(t *testing.T) {
	e := newEnv(t)
	c1, c2 := e.client(""), e.client("")
	h1, h2 := mustMutex(t, c1, "cancel"), mustMutex(t, c2, "cancel")
	if err := h1.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	queued := make(chan fairlock.Position, 1)
	errc := make(chan error, 1)
	go func() {
		_, err := h2.Acquire(ctx, AcquireOptions{Wait: Forever, Position: func(p fairlock.Position) {
			select {
			case queued <- p:
			default:
			}
		}})
		errc <- err
	}()
	var p fairlock.Position
	select {
	case p = <-queued:
	case <-time.After(10 * time.Second):
		t.Fatal("no position report")
	}
	if p.Ahead != 1 || !p.Joined {
		t.Fatalf("position %+v, want Ahead 1, Joined", p)
	}
	if n := len(e.keys(h1)); n != 2 {
		t.Fatalf("%d keys while waiting, want 2", n)
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, fairlock.ErrCanceled) || !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled Lock: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lock did not return after cancel")
	}
	e.waitKeys(h1, 1)
	if ks := e.keys(h1); ks[0].Key != h1.Key() {
		t.Fatalf("the remaining key is %s, not the holder's %s", ks[0].Key, h1.Key())
	}
}

func TestPositionCounts(t *testing.T) {
	e := newEnv(t)
	c := e.client("")
	ctx := context.Background()
	h0 := mustMutex(t, c, "pos")
	if err := h0.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	first := map[int]int{}
	var wg sync.WaitGroup
	hs := make([]*Mutex, 3)
	for i := range hs {
		hs[i] = mustMutex(t, e.client(""), "pos")
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := hs[i].Acquire(ctx, AcquireOptions{Wait: Forever, Position: func(p fairlock.Position) {
				mu.Lock()
				if _, ok := first[i]; !ok {
					first[i] = p.Ahead
				}
				mu.Unlock()
			}})
			if err != nil {
				t.Error(err)
				return
			}
			hs[i].Unlock(ctx)
		}()
		e.waitKeys(h0, i+2) // join one after the other
	}
	for i := 0; ; i++ {
		mu.Lock()
		n := len(first)
		mu.Unlock()
		if n == 3 {
			break
		}
		if i > 500 {
			t.Fatal("not every waiter reported")
		}
		time.Sleep(10 * time.Millisecond)
	}
	h0.Unlock(ctx)
	wg.Wait()
	for i := range 3 {
		if first[i] != i+1 {
			t.Fatalf("waiter %d first saw %d ahead, want %d (%v)", i, first[i], i+1, first)
		}
	}
}

// TestRevokedLeaseEndsHoldAtOnce: an operator revokes the holder's lease;
// the holder's Done closes at once (its key's deletion is watched, not
// only its keep-alives) and the next waiter gets the lock with a greater
// token.
func TestRevokedLeaseEndsHoldAtOnce(t *testing.T) {
	e := newEnv(t)
	c1, c2 := e.client("", WithTTL(30*time.Second)), e.client("")
	ctx := context.Background()
	h1, h2 := mustMutex(t, c1, "revoke"), mustMutex(t, c2, "revoke")
	tok1, err := h1.LockAndGetToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan int64, 1)
	go func() {
		tok, err := h2.LockAndGetToken(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- tok
	}()
	e.waitKeys(h1, 2)
	lease := e.keys(h1)[0].Lease
	start := time.Now()
	if _, err := e.raw.Revoke(ctx, clientv3.LeaseID(lease)); err != nil {
		t.Fatal(err)
	}
	// With a 30 s TTL the keep-alives would tell only after 10 s.
	within(t, h1.Done(), 3*time.Second, "holder's Done after Revoke")
	if !errors.Is(h1.Err(), fairlock.ErrLost) {
		t.Fatalf("Err after revoke: %v", h1.Err())
	}
	select {
	case tok2 := <-got:
		if tok2 <= tok1 {
			t.Fatalf("next token %d not above %d", tok2, tok1)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("next waiter not granted within 3 s of the revoke")
	}
	t.Logf("Done and hand-off %v after Revoke", time.Since(start))
	if err := h1.Unlock(ctx); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("Unlock of a lost hold: %v", err)
	}
	// The client gets a new lease for its next hold.
	h3 := mustMutex(t, c1, "other")
	if err := h3.Lock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRevokedWaiterStopsWaiting: etcd #19597: a waiter whose lease is
// revoked stops waiting at once, instead of waiting for the keys ahead.
func TestRevokedWaiterStopsWaiting(t *testing.T) {
	e := newEnv(t)
	c1, c2 := e.client(""), e.client("", WithTTL(30*time.Second))
	ctx := context.Background()
	h1, h2 := mustMutex(t, c1, "w19597"), mustMutex(t, c2, "w19597")
	if err := h1.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- h2.Lock(ctx) }()
	e.waitKeys(h1, 2)
	if _, err := e.raw.Revoke(ctx, clientv3.LeaseID(e.keys(h1)[1].Lease)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, fairlock.ErrLost) {
			t.Fatalf("waiter's Lock: %v, want ErrLost", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the revoked waiter still waits")
	}
	if ok, _ := h1.IsHeld(ctx); !ok {
		t.Fatal("holder lost its lock")
	}
}

// TestRetriedUnlockKeepsNewerHold: etcd #22082. The handle's key name is
// the same for every hold on one lease; a release retried after the same
// handle re-locked must not delete the newer hold. The unfenced delete of
// concurrency.Mutex does.
func TestRetriedUnlockKeepsNewerHold(t *testing.T) {
	e := newEnv(t)
	c := e.client("")
	ctx := context.Background()
	m := mustMutex(t, c, "u22082")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	old := *m.last // the first hold, as a lost-reply retry would see it
	m.mu.Unlock()
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if m.Key() != old.key {
		t.Fatalf("key changed (%s, %s): the test needs the same key", m.Key(), old.key)
	}
	released, err := m.release(ctx, &old, true) // the retried release (fenced)
	if err != nil || released {
		t.Fatalf("retried release: %v, %v; want false, nil", released, err)
	}
	if ok, err := m.IsHeld(ctx); !ok || err != nil {
		t.Fatalf("the newer hold is gone: %v, %v", ok, err)
	}
	// The same retry without the fence (a Delete by name, as etcd's
	// Mutex.Unlock) deletes the newer hold: what the fence prevents.
	if _, err := e.raw.Delete(ctx, old.key); err != nil {
		t.Fatal(err)
	}
	if ok, _ := m.IsHeld(ctx); ok {
		t.Fatal("an unfenced delete left the hold: the test cannot tell")
	}
	within(t, m.Done(), 3*time.Second, "Done after the key's deletion")
}

// TestPausedHolderToldLostInTime: the holder's connection is cut, so its
// keep-alives stop; it is told the lock is lost (Done) no later than the
// ValidUntil it saw, and the next holder gets the lock only after that
// instant (etcd #6127, #10811).
func TestPausedHolderToldLostInTime(t *testing.T) {
	e := newEnv(t)
	p := faultproxy.Start(t, e.srv.Endpoint)
	c1, c2 := e.client(p.Addr), e.client("")
	ctx := context.Background()
	h1, h2 := mustMutex(t, c1, "paused"), mustMutex(t, c2, "paused")
	if err := h1.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	granted := make(chan time.Time, 1)
	go func() {
		if err := h2.Lock(ctx); err != nil {
			t.Error(err)
		}
		granted <- time.Now()
	}()
	e.waitKeys(h1, 2)
	time.Sleep(time.Second) // a keep-alive or two on the way
	p.Cut()
	cutAt := time.Now()
	valid := h1.ValidUntil() // nothing is confirmed after the cut
	within(t, h1.Done(), time.Until(valid)+time.Second, "holder's Done after its validity")
	doneAt := time.Now()
	if !errors.Is(h1.Err(), fairlock.ErrLost) {
		t.Fatalf("Err: %v", h1.Err())
	}
	if doneAt.After(valid.Add(time.Second)) {
		t.Fatalf("told lost %v after its validity", doneAt.Sub(valid))
	}
	select {
	case g := <-granted:
		if !g.After(valid) {
			t.Fatalf("next holder granted %v before the paused holder's validity ended", valid.Sub(g))
		}
		t.Logf("validity ended %v after the cut; Done %v after it; next grant %v after it",
			valid.Sub(cutAt), doneAt.Sub(valid), g.Sub(valid))
	case <-time.After(15 * time.Second):
		t.Fatal("next holder not granted after the lease expired")
	}
}

func TestCloseEndsHoldsAndWaits(t *testing.T) {
	e := newEnv(t)
	c1, c2 := e.client("", WithTTL(30*time.Second)), e.client("")
	ctx := context.Background()
	h1, w1 := mustMutex(t, c1, "close"), mustMutex(t, c1, "close")
	if err := h1.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- w1.Lock(ctx) }()
	e.waitKeys(h1, 2)
	if err := c1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	within(t, h1.Done(), time.Second, "Done after Close")
	if !errors.Is(h1.Err(), fairlock.ErrClosed) {
		t.Fatalf("Err after Close: %v", h1.Err())
	}
	select {
	case err := <-errc:
		if !errors.Is(err, fairlock.ErrClosed) {
			t.Fatalf("waiter after Close: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("waiter still waits after Close")
	}
	if err := h1.Lock(ctx); !errors.Is(err, fairlock.ErrClosed) {
		t.Fatalf("Lock after Close: %v", err)
	}
	h2 := mustMutex(t, c2, "close")
	if ok, err := h2.TryLockFor(ctx, 3*time.Second, 0); !ok || err != nil {
		t.Fatalf("another client after Close: %v, %v (the lease should be revoked)", ok, err)
	}
}

func TestExplicitLease(t *testing.T) {
	e := newEnv(t)
	c1, c2 := e.client(""), e.client("")
	ctx := context.Background()
	h1, h2 := mustMutex(t, c1, "lease"), mustMutex(t, c2, "lease")
	start := time.Now()
	if err := h1.LockWithLease(ctx, 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if v, after := h1.ValidUntil(), time.Now(); v.After(after.Add(1500 * time.Millisecond)) {
		t.Fatalf("ValidUntil %v after Lock returned: past the lease", v.Sub(after))
	}
	within(t, h1.Done(), 5*time.Second, "Done at the lease's end")
	if !errors.Is(h1.Err(), fairlock.ErrLost) {
		t.Fatalf("Err: %v", h1.Err())
	}
	if took := time.Since(start); took < 1400*time.Millisecond {
		t.Fatalf("hold ended after %v, before its lease", took)
	}
	if ok, err := h2.TryLockFor(ctx, 3*time.Second, 0); !ok || err != nil {
		t.Fatalf("after the lease: %v, %v", ok, err)
	}
	h2.Unlock(ctx)
	// A released explicit-lease hold gives its lease back.
	if err := h1.LockWithLease(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := h1.Unlock(ctx); err != nil || h1.Err() != nil {
		t.Fatalf("Unlock: %v, Err %v", err, h1.Err())
	}
	e.waitKeys(h1, 0)
}

func TestMultiLockOfEtcdMutexes(t *testing.T) {
	e := newEnv(t)
	c := e.client("")
	ctx := context.Background()
	a, b := mustMutex(t, c, "ma"), mustMutex(t, c, "mb")
	ml, err := multi.New(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := ml.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	other := mustMutex(t, e.client(""), "mb")
	if ok, _ := other.TryLock(ctx); ok {
		t.Fatal("a member of a held MultiLock was free")
	}
	if err := ml.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := other.TryLockFor(ctx, 3*time.Second, 0); !ok || err != nil {
		t.Fatalf("after the MultiLock's Unlock: %v, %v", ok, err)
	}
}

var _ = fmt.Sprintf

// TestUnlockBoundedByCleanupTimeout: an Unlock whose ctx never ends
// (context.Background) is still bounded by the cleanup timeout when etcd
// does not answer, also after an earlier such Unlock's release ran out (the
// handle reuses the release's context and timer while they do not fire),
// and a release after one that ran out works.
func TestUnlockBoundedByCleanupTimeout(t *testing.T) {
	e := newEnv(t)
	p := faultproxy.Start(t, e.srv.Endpoint)
	c := e.client(p.Addr, WithCleanupTimeout(time.Second))
	ctx := context.Background()
	m := mustMutex(t, c, "unlock-bound")
	for round := range 2 {
		for range 3 { // releases that do not run out reuse the context
			if err := m.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		undo := p.BlackHole()
		st := time.Now()
		err := m.Unlock(ctx)
		took := time.Since(st)
		undo()
		if err == nil || took > 4*time.Second {
			t.Fatalf("round %d: Unlock with etcd not answering: %v after %v; want an error within the 1 s cleanup timeout (+3 s)", round, err, took)
		}
		if !errors.Is(m.Err(), fairlock.ErrLost) {
			t.Fatalf("round %d: Err after an unconfirmed release: %v", round, m.Err())
		}
		// The release goes on in the background; the handle takes the
		// lock again once it is through.
		lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err = m.Lock(lctx)
		cancel()
		if err != nil {
			t.Fatalf("round %d: Lock after the background release: %v", round, err)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Fatalf("round %d: Unlock after a release that ran out: %v", round, err)
		}
	}
}
