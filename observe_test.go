package fairlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/reentrant"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu sync.Mutex
	ev []fairlock.Event
}

func (r *recorder) Observe(e fairlock.Event) {
	r.mu.Lock()
	r.ev = append(r.ev, e)
	r.mu.Unlock()
}

func (r *recorder) events() []fairlock.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]fairlock.Event(nil), r.ev...)
}

// count is how many events of kind k owner has had on lock name.
func (r *recorder) count(name, owner string, k fairlock.EventKind) int {
	n := 0
	for _, e := range r.events() {
		if e.Kind == k && e.Name == name && e.Owner == owner {
			n++
		}
	}
	return n
}

// await waits (generously bounded) until owner has had an event of kind k
// on lock name.
func (r *recorder) await(t *testing.T, name, owner string, k fairlock.EventKind) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for r.count(name, owner, k) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no %v event of %s on %s within 15s", k, owner, name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func obsRedis(t *testing.T) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return mr, rdb
}

type lockKey struct{ name, owner string }

// history is what a scripted run did, as its goroutines saw it.
type history struct {
	mu                sync.Mutex
	grants, reentries map[lockKey]int
	releases          map[lockKey]int // holds ended by the release of their last count
}

func (h *history) add(m map[lockKey]int, name, owner string) {
	h.mu.Lock()
	m[lockKey{name, owner}]++
	h.mu.Unlock()
}

// The events of a scripted run (goroutines taking a fair and a reentrant
// lock in turn, a wait that runs out, a wait that is granted, a hold lost
// by deleting its key, a hold ended by Close) agree with what the run did:
// per lock and owner, every grant after a wait follows its WaitStarted,
// every wait ends once (granted or WaitEnded), every hold ends with exactly
// one Released or Lost, re-entries add to a current hold; the counts match
// the history; no duration is negative.
func TestObserverHistory(t *testing.T) {
	mr, rdb := obsRedis(t)
	rec := &recorder{}
	c, err := fairlock.NewClient(rdb, fairlock.WithObserver(rec), fairlock.WithLease(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := &history{grants: map[lockKey]int{}, reentries: map[lockKey]int{}, releases: map[lockKey]int{}}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Error(err)
		}
	}

	// Goroutines taking a fair lock and a reentrant lock in turn.
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fm, err := fair.New(c, "obs-fair")
			must(err)
			rm, err := reentrant.New(c, "obs-re")
			must(err)
			for i := range 5 {
				must(fm.Lock(ctx))
				h.add(h.grants, "obs-fair", fm.Owner())
				time.Sleep(time.Duration(g+i%2) * time.Millisecond)
				must(fm.Unlock(ctx))
				h.add(h.releases, "obs-fair", fm.Owner())

				must(rm.Lock(ctx))
				h.add(h.grants, "obs-re", rm.Owner())
				must(rm.Lock(ctx)) // a re-entry
				h.add(h.grants, "obs-re", rm.Owner())
				h.add(h.reentries, "obs-re", rm.Owner())
				must(rm.Unlock(ctx))
				must(rm.Unlock(ctx))
				h.add(h.releases, "obs-re", rm.Owner())
			}
		}()
	}
	wg.Wait()

	// A wait that is granted: the waiter is seen waiting (its WaitStarted)
	// before the holder lets go.
	holder, _ := reentrant.New(c, "obs-wait")
	waiter, _ := reentrant.New(c, "obs-wait")
	must(holder.Lock(ctx))
	h.add(h.grants, "obs-wait", holder.Owner())
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(ctx) }()
	rec.await(t, "obs-wait", waiter.Owner(), fairlock.WaitStarted)
	must(holder.Unlock(ctx))
	h.add(h.releases, "obs-wait", holder.Owner())
	must(<-got)
	h.add(h.grants, "obs-wait", waiter.Owner())
	must(waiter.Unlock(ctx))
	h.add(h.releases, "obs-wait", waiter.Owner())

	// A wait that runs out.
	must(holder.Lock(ctx))
	h.add(h.grants, "obs-wait", holder.Owner())
	if ok, err := waiter.TryLockFor(ctx, 50*time.Millisecond, 0); ok || err != nil {
		t.Errorf("TryLockFor on a held lock: %v, %v", ok, err)
	}
	must(holder.Unlock(ctx))
	h.add(h.releases, "obs-wait", holder.Owner())

	// A hold lost: its key deleted, the watchdog finds it gone.
	lost, _ := reentrant.New(c, "obs-lost")
	must(lost.Lock(ctx))
	h.add(h.grants, "obs-lost", lost.Owner())
	mr.Del("obs-lost")
	select {
	case <-lost.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the deleted lock was not found lost within 15s")
	}
	if !errors.Is(lost.Err(), fairlock.ErrLost) {
		t.Errorf("Err after deletion: %v", lost.Err())
	}

	// A hold ended by Close.
	closed, _ := fair.New(c, "obs-closed")
	must(closed.Lock(ctx))
	h.add(h.grants, "obs-closed", closed.Owner())
	must(c.Close())
	if !errors.Is(closed.Err(), fairlock.ErrClosed) {
		t.Errorf("Err after Close: %v", closed.Err())
	}

	// Close delivered every event: check them.
	ev := rec.events()
	for _, p := range checkEvents(ev, h) {
		t.Error(p)
	}
	var lostKinds []string
	for _, e := range ev {
		if e.Kind == fairlock.Lost {
			lostKinds = append(lostKinds, fmt.Sprintf("%s %v", e.Name, e.Err))
		}
	}
	if len(lostKinds) != 2 || rec.count("obs-lost", lost.Owner(), fairlock.Lost) != 1 || rec.count("obs-closed", closed.Owner(), fairlock.Lost) != 1 {
		t.Errorf("want one loss of obs-lost and one of obs-closed, got %q", lostKinds)
	}
	for _, e := range ev {
		if e.Kind == fairlock.Lost && e.Name == "obs-lost" && !errors.Is(e.Err, fairlock.ErrLost) ||
			e.Kind == fairlock.Lost && e.Name == "obs-closed" && !errors.Is(e.Err, fairlock.ErrClosed) {
			t.Errorf("loss of %s with error %v", e.Name, e.Err)
		}
	}
	if rec.count("obs-wait", waiter.Owner(), fairlock.WaitStarted) != 2 || rec.count("obs-wait", waiter.Owner(), fairlock.WaitEnded) != 1 {
		t.Errorf("the waiter's waits: %d started, %d ended without the lock (want 2, 1)",
			rec.count("obs-wait", waiter.Owner(), fairlock.WaitStarted), rec.count("obs-wait", waiter.Owner(), fairlock.WaitEnded))
	}
	kinds := map[string]string{"obs-fair": "fair", "obs-re": "reentrant", "obs-closed": "fair"}
	for _, e := range ev {
		if k, ok := kinds[e.Name]; ok && e.LockKind != k {
			t.Errorf("%v of %s says lock kind %q, want %q", e.Kind, e.Name, e.LockKind, k)
		}
	}
	t.Logf("%d events", len(ev))
}

// checkEvents replays the events per lock and owner and returns what
// disagrees with the rules and with the history h.
func checkEvents(ev []fairlock.Event, h *history) []string {
	type state struct {
		waiting, holding bool
	}
	st := map[lockKey]*state{}
	grants, reentries, ends := map[lockKey]int{}, map[lockKey]int{}, map[lockKey]int{}
	var bad []string
	for i, e := range ev {
		if e.Kind == fairlock.EventsDropped {
			bad = append(bad, fmt.Sprintf("%d events dropped", e.Dropped))
			continue
		}
		if e.Duration < 0 || e.At.IsZero() || e.Name == "" || e.Owner == "" {
			bad = append(bad, fmt.Sprintf("event %d %v: duration %v, at %v, name %q, owner %q", i, e.Kind, e.Duration, e.At, e.Name, e.Owner))
		}
		k := lockKey{e.Name, e.Owner}
		s := st[k]
		if s == nil {
			s = &state{}
			st[k] = s
		}
		fail := func(why string) {
			bad = append(bad, fmt.Sprintf("event %d %v of %s on %s: %s", i, e.Kind, e.Owner, e.Name, why))
		}
		switch e.Kind {
		case fairlock.WaitStarted:
			if s.waiting {
				fail("already waiting")
			}
			s.waiting = true
		case fairlock.Granted:
			grants[k]++
			if e.Waited != s.waiting {
				fail(fmt.Sprintf("waited %v, but a wait-start preceded it: %v", e.Waited, s.waiting))
			}
			if e.Reentry != s.holding {
				fail(fmt.Sprintf("reentry %v while holding %v", e.Reentry, s.holding))
			}
			if e.Reentry {
				reentries[k]++
			}
			s.waiting, s.holding = false, true
		case fairlock.WaitEnded:
			if !s.waiting {
				fail("no wait to end")
			}
			s.waiting = false
		case fairlock.Released, fairlock.Lost:
			if !s.holding {
				fail("no hold to end")
			}
			if (e.Kind == fairlock.Lost) != (e.Err != nil) {
				fail(fmt.Sprintf("error %v", e.Err))
			}
			if e.Kind == fairlock.Released {
				ends[k]++
			}
			s.holding = false
		}
	}
	for k, s := range st {
		if s.waiting || s.holding {
			bad = append(bad, fmt.Sprintf("%s on %s: still waiting %v, holding %v after Close", k.owner, k.name, s.waiting, s.holding))
		}
	}
	cmp := func(what string, got, want map[lockKey]int) {
		for k := range merge(got, want) {
			if got[k] != want[k] {
				bad = append(bad, fmt.Sprintf("%s of %s on %s: %d events, %d in the history", what, k.owner, k.name, got[k], want[k]))
			}
		}
	}
	cmp("grants", grants, h.grants)
	cmp("re-entries", reentries, h.reentries)
	cmp("releases", ends, h.releases)
	return bad
}

func merge(a, b map[lockKey]int) map[lockKey]bool {
	m := map[lockKey]bool{}
	for k := range a {
		m[k] = true
	}
	for k := range b {
		m[k] = true
	}
	return m
}

// A hold longer than the long-hold threshold gets exactly one LongHold
// event while held; one released before it gets none. A wait longer than
// the long-wait threshold gets exactly one LongWait, before its grant; one
// granted before it gets none.
func TestObserverAlerts(t *testing.T) {
	_, rdb := obsRedis(t)
	rec := &recorder{}
	const threshold = 200 * time.Millisecond
	c, err := fairlock.NewClient(rdb, fairlock.WithObserver(rec),
		fairlock.WithLongHoldAlert(threshold), fairlock.WithLongWaitAlert(threshold))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A long hold: the alert comes while it is held (it is released only
	// after the event was seen), once.
	long, _ := reentrant.New(c, "alert-long")
	if err := long.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	rec.await(t, "alert-long", long.Owner(), fairlock.LongHold)
	if rec.count("alert-long", long.Owner(), fairlock.Released) != 0 {
		t.Error("LongHold came after the release")
	}
	time.Sleep(2 * threshold) // a second alert would come now
	if err := long.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// A short hold: none.
	short, _ := reentrant.New(c, "alert-short")
	if err := short.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := short.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// A long wait: the alert comes while it waits, once.
	holder, _ := fair.New(c, "alert-wait")
	waiter, _ := fair.New(c, "alert-wait")
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(ctx) }()
	rec.await(t, "alert-wait", waiter.Owner(), fairlock.LongWait)
	time.Sleep(2 * threshold)
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// A short wait: granted as soon as it is seen waiting.
	quick, _ := fair.New(c, "alert-wait")
	go func() { got <- quick.Lock(ctx) }()
	rec.await(t, "alert-wait", quick.Owner(), fairlock.WaitStarted)
	if err := waiter.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * threshold) // a late alert of the short hold or wait would come by now
	if err := quick.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	if n := rec.count("alert-long", long.Owner(), fairlock.LongHold); n != 1 {
		t.Errorf("long hold: %d LongHold events, want 1", n)
	}
	if n := rec.count("alert-short", short.Owner(), fairlock.LongHold); n != 0 {
		t.Errorf("short hold: %d LongHold events, want 0", n)
	}
	if n := rec.count("alert-wait", waiter.Owner(), fairlock.LongWait); n != 1 {
		t.Errorf("long wait: %d LongWait events, want 1", n)
	}
	if n := rec.count("alert-wait", quick.Owner(), fairlock.LongWait); n != 0 {
		t.Errorf("short wait: %d LongWait events, want 0", n)
	}
	// The long wait's alert came before its grant; the long hold's before
	// its release.
	order := map[string]int{}
	for i, e := range rec.events() {
		if e.Owner == waiter.Owner() || e.Owner == long.Owner() {
			order[e.Kind.String()] = i
		}
	}
	if order["long_wait"] > order["granted"] || order["long_hold"] > order["released"] {
		t.Errorf("an alert came after its wait or hold ended: %v", order)
	}
}

// A panicking observer does not break the locks.
func TestObserverPanics(t *testing.T) {
	_, rdb := obsRedis(t)
	var calls sync.WaitGroup
	calls.Add(1)
	var once sync.Once
	c, err := fairlock.NewClient(rdb, fairlock.WithObserver(fairlock.ObserverFunc(func(fairlock.Event) {
		once.Do(calls.Done)
		panic("observer bug")
	})), fairlock.WithLongHoldAlert(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, _ := reentrant.New(c, "panics")
	for range 3 {
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	calls.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestAlertOptionsInvalid(t *testing.T) {
	_, rdb := obsRedis(t)
	for _, o := range []fairlock.Option{fairlock.WithLongHoldAlert(-1), fairlock.WithLongWaitAlert(-time.Second)} {
		if _, err := fairlock.NewClient(rdb, o); !errors.Is(err, fairlock.ErrInvalidValue) {
			t.Errorf("a negative alert threshold: %v", err)
		}
	}
}

// A hold whose renewals fail (Redis gone) gets RenewFailed events, then
// ends as Lost when its validity runs out.
func TestObserverRenewFailed(t *testing.T) {
	mr, rdb := obsRedis(t)
	rec := &recorder{}
	c, err := fairlock.NewClient(rdb, fairlock.WithObserver(rec), fairlock.WithLease(300*time.Millisecond),
		fairlock.WithCleanupTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, _ := reentrant.New(c, "renew-fails")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	mr.Close()
	rec.await(t, "renew-fails", m.Owner(), fairlock.Lost)
	if !errors.Is(m.Err(), fairlock.ErrLost) {
		t.Errorf("Err: %v", m.Err())
	}
	ev := rec.events()
	failed, lostAt := 0, -1
	for i, e := range ev {
		switch {
		case e.Kind == fairlock.RenewFailed && e.Owner == m.Owner():
			failed++
			if e.Err == nil || lostAt >= 0 {
				t.Errorf("RenewFailed %d: error %v, after the loss: %v", i, e.Err, lostAt >= 0)
			}
		case e.Kind == fairlock.Lost:
			lostAt = i
		}
	}
	if failed == 0 {
		t.Errorf("no RenewFailed before the loss: %v", ev)
	}
}

// observedClient is a client on a fresh miniredis, reporting to a recorder.
func observedClient(t *testing.T) (*redis.Client, *fairlock.Client, *recorder) {
	t.Helper()
	_, rdb := obsRedis(t)
	rec := &recorder{}
	c, err := fairlock.NewClient(rdb, fairlock.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return rdb, c, rec
}

// WaitStarted carries how many waiters were ahead when the wait started
// (issue 24: the queue's length at join), on both fair engines: waiters
// queued one by one behind a holder report 0, 1, 2; a reentrant lock's
// wait reports -1 (no queue).
func TestObserverWaitStartedAhead(t *testing.T) {
	for _, eng := range []fair.Engine{fair.Redisson, fair.Scalable} {
		t.Run(fmt.Sprint(eng), func(t *testing.T) {
			_, c, rec := observedClient(t)
			ctx := context.Background()
			holder, err := fair.New(c, "q", fair.WithEngine(eng), fair.WithThreadID(100))
			if err != nil {
				t.Fatal(err)
			}
			if err := holder.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var wg sync.WaitGroup
			for i := range 3 {
				m, err := fair.New(c, "q", fair.WithEngine(eng), fair.WithThreadID(int64(i+1)))
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() { defer wg.Done(); _ = m.Lock(wctx) }()
				rec.await(t, "q", m.Owner(), fairlock.WaitStarted)
				for _, e := range rec.events() {
					if e.Kind == fairlock.WaitStarted && e.Name == "q" && e.Owner == m.Owner() && e.Ahead != i {
						t.Errorf("waiter %d: WaitStarted Ahead %d, want %d", i, e.Ahead, i)
					}
				}
			}
			cancel()
			wg.Wait()
			// a reentrant lock has no queue
			r, err := reentrant.New(c, "plain", fairlock.WithThreadID(100))
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			r2, err := reentrant.New(c, "plain", fairlock.WithThreadID(1))
			if err != nil {
				t.Fatal(err)
			}
			ok, err := r2.TryLockFor(ctx, 200*time.Millisecond, 0)
			if err != nil || ok {
				t.Fatalf("TryLockFor: %v %v", ok, err)
			}
			for _, e := range rec.events() {
				if e.Kind == fairlock.WaitStarted && e.Name == "plain" && e.Ahead != -1 {
					t.Errorf("reentrant WaitStarted Ahead %d, want -1", e.Ahead)
				}
			}
			if rec.count("plain", r2.Owner(), fairlock.WaitStarted) != 1 {
				t.Errorf("reentrant: no WaitStarted")
			}
		})
	}
}

// A grant that followed a release's wake-up reports its handoff (issue 24:
// handoff latency): above zero and within the wait; a grant at the first
// attempt reports none.
//
// The release must come while the waiter sleeps: when it comes between the
// waiter's SUBSCRIBE (what PUBSUB NUMSUB sees) and its re-check attempt,
// that attempt takes the free lock with no wake-up, and its grant rightly
// reports no handoff (a loaded CI run: "handoff 0s"). So a round that ends
// that way is run again, on a new lock, up to 5 rounds; a handoff never
// reported fails all of them.
func TestObserverHandoff(t *testing.T) {
	for _, eng := range []fair.Engine{fair.Redisson, fair.Scalable} {
		t.Run(fmt.Sprint(eng), func(t *testing.T) {
			rdb, c, rec := observedClient(t)
			ctx := context.Background()
			var w fairlock.Event
			for round := range 5 {
				name := fmt.Sprintf("h%d", round)
				holder, _ := fair.New(c, name, fair.WithEngine(eng), fair.WithThreadID(1))
				waiter, _ := fair.New(c, name, fair.WithEngine(eng), fair.WithThreadID(2))
				if err := holder.Lock(ctx); err != nil {
					t.Fatal(err)
				}
				got := make(chan error, 1)
				go func() { got <- waiter.Lock(ctx) }()
				// the release must wake the waiter: wait until it listens
				ch := wire.KeysFor(name).WaiterChannel(waiter.Owner())
				for deadline := time.Now().Add(15 * time.Second); rdb.PubSubNumSub(ctx, ch).Val()[ch] == 0; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("the waiter did not subscribe within 15s")
					}
				}
				time.Sleep(100 * time.Millisecond) // its re-check attempt, most often
				if err := holder.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				if err := <-got; err != nil {
					t.Fatal(err)
				}
				rec.await(t, name, waiter.Owner(), fairlock.Granted)
				if err := waiter.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				if err := holder.Lock(ctx); err != nil { // free: the first attempt
					t.Fatal(err)
				}
				for deadline := time.Now().Add(15 * time.Second); rec.count(name, holder.Owner(), fairlock.Granted) < 2; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("the holder's second grant was not reported within 15s")
					}
				}
				var grants []fairlock.Event
				for _, e := range rec.events() {
					if e.Kind == fairlock.Granted && e.Name == name {
						grants = append(grants, e)
					}
				}
				if len(grants) != 3 {
					t.Fatalf("%d grants, want 3", len(grants))
				}
				if g := grants[0]; g.Handoff != 0 {
					t.Errorf("a grant at the first attempt reports a handoff %v", g.Handoff)
				}
				if g := grants[2]; g.Handoff != 0 {
					t.Errorf("a grant at the first attempt reports a handoff %v", g.Handoff)
				}
				if err := holder.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				if w = grants[1]; !w.Waited || w.Handoff > w.Duration {
					t.Fatalf("the waiter's grant: waited %v, handoff %v, duration %v", w.Waited, w.Handoff, w.Duration)
				}
				if w.Handoff > 0 {
					break
				}
				t.Logf("round %d: the waiter's re-check took the lock before it slept (no handoff): again", round)
			}
			if w.Handoff <= 0 {
				t.Errorf("the waiter's grant: waited %v, handoff %v, duration %v in each of 5 rounds: want a handoff in (0, duration]", w.Waited, w.Handoff, w.Duration)
			}
		})
	}
}
