package etcd

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock"
)

// rwRec is one acquisition of a read-write lock's history.
type rwRec struct {
	rec
	write bool
}

// checkRWExclusion: a write hold overlaps no other hold.
func checkRWExclusion(h []rwRec) error {
	for i, a := range h {
		for j, b := range h {
			if i == j || !(a.write || b.write) {
				continue
			}
			if a.grant.Before(b.release) && b.grant.Before(a.release) {
				return fmt.Errorf("%s (write %v) and %s (write %v) overlap", a.who, a.write, b.who, b.write)
			}
		}
	}
	return nil
}

// checkRWOrder: the seed's rule in arrival order: if A was queued before B
// called and one of them writes, B's hold begins after A's ended. (Two
// reads need not wait for each other.)
func checkRWOrder(h []rwRec) error {
	for _, a := range h {
		for _, b := range h {
			if (a.write || b.write) && a.joined.Before(b.call) && !a.release.Before(b.grant) {
				return fmt.Errorf("%s (write %v) queued before %s (write %v) called, but %s was granted before %s released",
					a.who, a.write, b.who, b.write, b.who, a.who)
			}
		}
	}
	return nil
}

func TestRWCheckersCatchViolations(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	r := func(who string, call, joined, grant, release int, write bool) rwRec {
		return rwRec{rec{who: who, call: at(call), joined: at(joined), grant: at(grant), release: at(release)}, write}
	}
	valid := []rwRec{
		r("r1", 0, 1, 1, 20, false),
		r("r2", 2, 3, 3, 15, false), // reads share
		r("w1", 4, 5, 21, 30, true), // waits for both reads
		r("r3", 6, 7, 31, 40, false),
	}
	if err := checkRWExclusion(valid); err != nil {
		t.Fatal(err)
	}
	if err := checkRWOrder(valid); err != nil {
		t.Fatal(err)
	}
	overlap := append([]rwRec(nil), valid...)
	overlap[2].grant = at(18) // the write enters while r1 reads
	if checkRWExclusion(overlap) == nil {
		t.Fatal("checkRWExclusion accepted a write overlapping a read")
	}
	barging := append([]rwRec(nil), valid...)
	barging[3] = r("r3", 6, 7, 8, 12, false) // a read overtakes the earlier waiting write
	if checkRWExclusion(barging) != nil {
		t.Fatal("the barging history should keep exclusion")
	}
	if checkRWOrder(barging) == nil {
		t.Fatal("checkRWOrder accepted a read overtaking an earlier write")
	}
}

// TestRWMutexSeedRule: reads share; a write waits for the reads ahead; a
// read that arrives behind a waiting write waits for it.
func TestRWMutexSeedRule(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rw := func() *RWMutex {
		l, err := e.client("").NewRWMutex("doc")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	r1, r2, w1, r3 := rw().ReadLock(), rw().ReadLock(), rw().WriteLock(), rw().ReadLock()
	tr1, err := r1.LockAndGetToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := r2.TryLock(ctx); !ok || err != nil {
		t.Fatalf("second reader: %v, %v", ok, err)
	}
	order := make(chan string, 2)
	go func() {
		if err := w1.Lock(ctx); err != nil {
			t.Error(err)
		}
		order <- "w1"
	}()
	e.waitKeys(r1, 3)
	if ok, _ := rw().ReadLock().TryLock(ctx); ok {
		t.Fatal("a reader's TryLock passed a waiting writer")
	}
	go func() {
		if err := r3.Lock(ctx); err != nil {
			t.Error(err)
		}
		order <- "r3"
	}()
	e.waitKeys(r1, 4)
	r1.Unlock(ctx)
	r2.Unlock(ctx)
	if got := <-order; got != "w1" {
		t.Fatalf("%s granted first, want w1", got)
	}
	if r3.HoldCount() != 0 {
		t.Fatal("r3 holds while w1 writes")
	}
	tw, _ := w1.Token(ctx)
	if tw <= tr1 {
		t.Fatalf("writer's token %d not above the reader's %d", tw, tr1)
	}
	w1.Unlock(ctx)
	select {
	case got := <-order:
		if got != "r3" {
			t.Fatal(got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("r3 not granted after the write")
	}
}

// TestRWHistory: readers and writers of several Clients on one lock; the
// history must keep writes exclusive and the seed's order rule.
func TestRWHistory(t *testing.T) {
	e := newEnv(t)
	const clients, handles, rounds = 3, 3, 4
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var (
		mu   sync.Mutex
		hist []rwRec
		wg   sync.WaitGroup
	)
	for ci := range clients {
		c := e.client("")
		for hi := range handles {
			l, err := c.NewRWMutex("hist")
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range rounds {
					write := (ci+hi+k)%3 == 0
					m := l.ReadLock()
					if write {
						m = l.WriteLock()
					}
					r := rwRec{rec{who: fmt.Sprintf("c%d.h%d.%d", ci, hi, k), call: time.Now()}, write}
					_, err := m.Acquire(ctx, AcquireOptions{Wait: Forever, Position: func(fairlock.Position) {
						if r.joined.IsZero() {
							r.joined = time.Now()
						}
					}})
					if err != nil {
						t.Error(err)
						return
					}
					r.grant = time.Now()
					if r.joined.IsZero() {
						r.joined = r.grant
					}
					time.Sleep(time.Duration(1+rand.IntN(3)) * time.Millisecond)
					r.release = time.Now()
					if err := m.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					hist = append(hist, r)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if len(hist) != clients*handles*rounds {
		t.Fatalf("%d acquisitions", len(hist))
	}
	if err := checkRWExclusion(hist); err != nil {
		t.Fatal(err)
	}
	if err := checkRWOrder(hist); err != nil {
		t.Fatal(err)
	}
	shared := 0
	for i, a := range hist {
		for _, b := range hist[i+1:] {
			if !a.write && !b.write && a.grant.Before(b.release) && b.grant.Before(a.release) {
				shared++
			}
		}
	}
	t.Logf("%d acquisitions, %d pairs of overlapping reads", len(hist), shared)
}
