package propertytests

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/faultproxy"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

// Mixed deployments: Go fair.Mutex handles (Redisson engine) and
// Redisson-rule clients (redisson_client_test.go) on one lock.

// TestRedissonRuleScripts checks the reference client's scripts against the
// numbers the reference document verified on Redis (5.4): a holder with a
// 30 s lease, waiters joining with a 5 s wait get about 30000, 35000, 40000
// and 45000; after the second leaves, the others' retries return the PTTL;
// when the holder unlocks and the head acquires, the remaining deadlines
// drop by 5000.
func TestRedissonRuleScripts(t *testing.T) {
	t.Parallel()
	b := redistest.Real(t)
	rdb := b.Client(t)
	ctx := context.Background()
	c := newRClient(rdb, nil, 0)
	defer c.Close()
	name := redistest.Prefix(t) + "lock"
	holder := c.Lock(name)
	if ok, _, err := holder.acquire(ctx, 5*time.Second, 30*time.Second); !ok || err != nil {
		t.Fatalf("holder: %v %v", ok, err)
	}
	near := func(what string, got, want int64) {
		t.Helper()
		if got > want || got < want-500 {
			t.Errorf("%s: %d, want about %d", what, got, want)
		}
	}
	var ws []*rLock
	for i := range 4 {
		w := c.Lock(name)
		ws = append(ws, w)
		ok, ttl, err := w.acquire(ctx, 5*time.Second, 30*time.Second)
		if ok || err != nil {
			t.Fatalf("waiter %d: %v %v", i, ok, err)
		}
		near(fmt.Sprintf("join %d", i), ttl, 30000+int64(i)*5000)
	}
	deadlines := func() map[string]float64 {
		zs, err := rdb.ZRangeWithScores(ctx, holder.keys.Timeouts, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]float64{}
		for _, z := range zs {
			m[z.Member.(string)] = z.Score
		}
		return m
	}
	ws[1].acquireFailed(5 * time.Second)
	for _, i := range []int{0, 2, 3} {
		_, ttl, _ := ws[i].acquire(ctx, 5*time.Second, 30*time.Second)
		near(fmt.Sprintf("retry %d", i), ttl, 30000)
	}
	before := deadlines()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := ws[0].acquire(ctx, 5*time.Second, 30*time.Second); !ok || err != nil {
		t.Fatalf("head: %v %v", ok, err)
	}
	after := deadlines()
	for _, i := range []int{2, 3} {
		if d := before[ws[i].owner] - after[ws[i].owner]; d != 5000 {
			t.Errorf("waiter %d's deadline dropped by %v, want 5000", i, d)
		}
	}
	if len(after) != 2 {
		t.Errorf("deadlines %v, want waiters 2 and 3 only", after)
	}
}

// TestRedissonRuleWatchdog checks the reference client's watchdog: a hold
// without a lease outlives its lease (6 s here, renewed every 2 s) while
// held, and runs out once the client stops.
func TestRedissonRuleWatchdog(t *testing.T) {
	redistest.Long(t)
	t.Parallel()
	b := redistest.Real(t)
	rdb := b.Client(t)
	ctx := context.Background()
	c := newRClient(rdb, nil, 6*time.Second)
	defer c.Close()
	l := c.Lock(redistest.Prefix(t) + "lock")
	if err := l.Lock(ctx, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(8 * time.Second)
	if n, err := rdb.HGet(ctx, l.keys.Name, l.owner).Int(); n != 1 || err != nil {
		t.Fatalf("after 8 s the hold is %d, %v; want renewed", n, err)
	}
	if pttl := rdb.PTTL(ctx, l.keys.Name).Val(); pttl <= 0 || pttl > 6*time.Second {
		t.Fatalf("PTTL %v, want within the 6 s lease", pttl)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Redisson's fair unlock of a lock that is gone succeeds (H4).
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("second unlock: %v, want success (Redisson's H4)", err)
	}
}

// TestMixedGoUnlockKeepsWaiterPlace is bug 4 of issue 12. A Go client holds;
// H waits (a Redisson-rule client whose network adds 300 ms each way, so
// that it takes the lock a moment after being woken); the Go client
// unlocks; J joins right away, before H takes the lock; H takes it and holds
// it 7 s; K joins 1 s after H's grant. J queued before K and neither gives
// up: J must get the lock before K.
//
// With the head grace, the Go unlock lowers H's deadline to now + 5 s; J's
// deadline is computed from it, and H's take lowers J's by H's whole slot
// (5 min), leaving J about 5 s: J is pruned while alive and K goes first.
// Subtests: J and H as Redisson-rule clients (a Java waiter loses its place)
// and everyone in Go.
func TestMixedGoUnlockKeepsWaiterPlace(t *testing.T) {
	redistest.Long(t)
	t.Parallel()
	b := redistest.Real(t)
	for _, java := range []bool{true, false} {
		name := "java-waiter"
		if !java {
			name = "go-only"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			goUnlockKeepsWaiterPlace(t, b, java)
		})
	}
}

// waiter is one acquisition on either kind of client.
type waiter struct {
	label   string
	lock    func(ctx context.Context) error
	unlock  func(ctx context.Context) error
	owner   string
	a       *attempt
	cancel  context.CancelFunc
	aborted bool
}

func (w *waiter) start(h *history, lease time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.a = h.begin(&attempt{owner: w.owner, label: w.label, queues: true, lease: lease})
	go func() {
		err := w.lock(withAttempt(ctx, w.a))
		h.finish(w.a, err == nil, err)
	}()
}

func goUnlockKeepsWaiterPlace(t *testing.T, b *redistest.Backend, java bool) {
	ctx := context.Background()
	h := newHistory(5*time.Second, 30*time.Second)
	name := redistest.Prefix(t) + "lock"
	proxy := faultproxy.Start(t, b.Addr)
	slow := redis.NewClient(&redis.Options{Addr: proxy.Addr})
	slow.AddHook(replyHook{h})
	t.Cleanup(func() { _ = slow.Close() })
	proxy.Latency(300 * time.Millisecond)
	direct := recordedClient(t, b, h)

	goHandle := func(rdb *redis.Client, label string) *waiter {
		c, err := fairlock.NewClient(rdb)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		m, err := fair.New(c, name)
		if err != nil {
			t.Fatal(err)
		}
		return &waiter{label: label, owner: m.Owner(), lock: m.Lock, unlock: m.Unlock}
	}
	javaHandle := func(rdb *redis.Client, label string) *waiter {
		c := newRClient(rdb, h, 0)
		closeChecked(t, c)
		l := c.Lock(name)
		return &waiter{label: label, owner: l.owner,
			lock: func(ctx context.Context) error { return l.Lock(ctx, 0) }, unlock: l.Unlock}
	}
	g := goHandle(direct, "G (Go)")
	var hw, jw *waiter
	if java {
		hw, jw = javaHandle(slow, "H (Redisson-rule, +300ms)"), javaHandle(direct, "J (Redisson-rule)")
	} else {
		hw, jw = goHandle(slow, "H (Go, +300ms)"), goHandle(direct, "J (Go)")
	}
	kw := goHandle(direct, "K (Go)")
	all := []*waiter{g, hw, jw, kw}
	t.Cleanup(func() {
		for _, w := range all {
			if w.a != nil && w.cancel != nil {
				w.cancel()
				<-w.a.done
			}
		}
	})
	wait := func(w *waiter, d time.Duration) bool {
		select {
		case <-w.a.done:
			return w.a.granted
		case <-time.After(d):
			return false
		}
	}
	g.start(h, 0)
	if !wait(g, 5*time.Second) {
		t.Fatalf("G did not get the free lock\n%s", h)
	}
	hw.start(h, 0)
	if !h.waitJoined(hw.a, 10*time.Second) {
		t.Fatalf("H did not queue\n%s", h)
	}
	h.releasing(g.a)
	err := g.unlock(ctx)
	h.released(g.a)
	if err != nil {
		t.Fatal(err)
	}
	jw.start(h, 0)
	if !h.waitJoined(jw.a, 5*time.Second) {
		t.Fatalf("J did not queue\n%s", h)
	}
	if !wait(hw, 10*time.Second) {
		t.Fatalf("H did not get the lock within 10 s of G's release\n%s", h)
	}
	if jw.a.joinAt.After(hw.a.grantStart) {
		t.Fatalf("J queued after H took the lock: the scenario needs J to join first\n%s", h)
	}
	time.Sleep(time.Second)
	kw.start(h, 0)
	if !h.waitJoined(kw.a, 5*time.Second) {
		t.Fatalf("K did not queue\n%s", h)
	}
	time.Sleep(time.Until(hw.a.end.Add(7 * time.Second)))
	h.releasing(hw.a)
	err = hw.unlock(ctx)
	h.released(hw.a)
	if err != nil {
		t.Fatal(err)
	}
	// The next grant goes to J or to K; release it and see who follows.
	first := waitFirst(h, 40*time.Second, jw, kw)
	if first == nil {
		t.Fatalf("neither J nor K got the lock within 40 s of H's release\n%s", h)
	}
	if problems := h.check(time.Now()); len(problems) > 0 || first != jw {
		t.Fatalf("%s got the lock first after H:\n  %s\nrecord:\n%s", first.label, strings.Join(problems, "\n  "), h)
	}
	h.releasing(jw.a)
	if err := jw.unlock(ctx); err != nil {
		t.Fatal(err)
	}
	h.released(jw.a)
	if !wait(kw, 40*time.Second) {
		t.Fatalf("K did not get the lock after J\n%s", h)
	}
	h.releasing(kw.a)
	_ = kw.unlock(ctx)
	h.released(kw.a)
	if problems := h.check(time.Now()); len(problems) > 0 {
		t.Fatalf("%s\nrecord:\n%s", strings.Join(problems, "\n"), h)
	}
}

// waitFirst waits up to d for one of ws to return granted.
func waitFirst(h *history, d time.Duration, ws ...*waiter) *waiter {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for _, w := range ws {
			select {
			case <-w.a.done:
				if w.a.granted {
					return w
				}
			default:
			}
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// TestMixedWorkload runs Go handles (two clients, default grace) and
// Redisson-rule clients (two) on one lock, each looping over Lock or
// TryLock(wait) / hold briefly / unlock for a few seconds, and checks the
// record: exclusion, FIFO among waiters that did not give up (where the
// order of arrival is certain), and the liveness bound.
func TestMixedWorkload(t *testing.T) {
	redistest.Long(t)
	t.Parallel()
	b := redistest.Real(t)
	const (
		perKind = 2
		runFor  = 6 * time.Second
	)
	// Watchdog leases of 5 s on both kinds: a waiter that sleeps through a
	// release it was not told about (Redisson's rules allow it: a Java
	// waiter sleeps the PTTL it last saw) costs seconds, not 30.
	const watchdog = 5 * time.Second
	h := newHistory(5*time.Second, watchdog)
	name := redistest.Prefix(t) + "lock"
	type worker struct {
		label string
		owner string
		lock  func(ctx context.Context, wait time.Duration) (bool, error)
		unl   func(ctx context.Context) error
	}
	var workers []worker
	for i := range 2 {
		c, err := fairlock.NewClient(recordedClient(t, b, h), fairlock.WithLease(watchdog))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		rc := newRClient(recordedClient(t, b, h), h, watchdog)
		closeChecked(t, rc)
		for j := range perKind {
			m, err := fair.New(c, name)
			if err != nil {
				t.Fatal(err)
			}
			workers = append(workers, worker{label: fmt.Sprintf("go%d.%d", i, j), owner: m.Owner(),
				lock: func(ctx context.Context, wait time.Duration) (bool, error) {
					if wait == 0 {
						err := m.Lock(ctx)
						return err == nil, err
					}
					return m.TryLockFor(ctx, wait, 0)
				}, unl: m.Unlock})
			l := rc.Lock(name)
			workers = append(workers, worker{label: fmt.Sprintf("java%d.%d", i, j), owner: l.owner,
				lock: func(ctx context.Context, wait time.Duration) (bool, error) {
					if wait == 0 {
						err := l.Lock(ctx, 0)
						return err == nil, err
					}
					return l.TryLock(ctx, wait, 0)
				}, unl: l.Unlock})
		}
	}
	stop := time.Now().Add(runFor)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := mrand.New(mrand.NewPCG(mrand.Uint64(), 0))
			for n := 0; time.Now().Before(stop); n++ {
				var wait time.Duration // Lock
				if r.IntN(3) == 0 {
					wait = time.Duration(200+r.IntN(800)) * time.Millisecond
				}
				label := fmt.Sprintf("%s#%d", w.label, n)
				if wait > 0 {
					label += fmt.Sprintf(" TryLock(%v)", wait)
				}
				a := h.begin(&attempt{owner: w.owner, label: label, queues: true, wait: wait, slot: wait})
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				ok, err := w.lock(withAttempt(ctx, a), wait)
				cancel()
				h.finish(a, ok, err)
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("%s: %v", label, err))
					mu.Unlock()
					return
				}
				if !ok {
					time.Sleep(time.Duration(r.IntN(100)) * time.Millisecond)
					continue
				}
				time.Sleep(time.Duration(10+r.IntN(100)) * time.Millisecond)
				h.releasing(a)
				err = w.unl(context.Background())
				h.released(a)
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("%s unlock: %v", label, err))
					mu.Unlock()
					return
				}
				time.Sleep(time.Duration(r.IntN(100)) * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	problems := append(errs, h.check(time.Now())...)
	grants, gaveUp := 0, 0
	h.mu.Lock()
	for _, a := range h.attempts {
		if a.granted {
			grants++
		} else if !a.joinAt.IsZero() {
			gaveUp++
		}
	}
	h.mu.Unlock()
	if len(problems) > 0 {
		t.Fatalf("%s\nrecord:\n%s", strings.Join(problems, "\n"), h)
	}
	if grants < 10 {
		t.Fatalf("only %d grants in %v\n%s", grants, runFor, h)
	}
	t.Logf("%d workers, %d grants, %d waits given up", len(workers), grants, gaveUp)
}
