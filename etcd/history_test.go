package etcd

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock"
)

// rec is one acquisition in a history of real calls, as its caller saw it.
type rec struct {
	who     string
	call    time.Time // Lock called
	joined  time.Time // first position report (queued), else the grant
	grant   time.Time // Lock returned
	release time.Time // just before Unlock was called
	seq     int       // grant order (taken while holding)
	token   int64
}

// checkExclusion: no two holds overlap in real time (each ends before the
// next begins).
func checkExclusion(h []rec) error {
	s := append([]rec(nil), h...)
	sort.Slice(s, func(i, j int) bool { return s[i].grant.Before(s[j].grant) })
	for i := 1; i < len(s); i++ {
		if !s[i-1].release.Before(s[i].grant) {
			return fmt.Errorf("holds overlap: %s held %v..%v, %s granted at %v",
				s[i-1].who, s[i-1].grant, s[i-1].release, s[i].who, s[i].grant)
		}
	}
	return nil
}

// checkTokens: tokens strictly increase in grant order.
func checkTokens(h []rec) error {
	s := append([]rec(nil), h...)
	sort.Slice(s, func(i, j int) bool { return s[i].seq < s[j].seq })
	for i := 1; i < len(s); i++ {
		if s[i].token <= s[i-1].token {
			return fmt.Errorf("token %d of grant %d (%s) not above %d of grant %d (%s)",
				s[i].token, s[i].seq, s[i].who, s[i-1].token, s[i-1].seq, s[i-1].who)
		}
	}
	return nil
}

// checkFIFO: arrival order among live waiters: if A was in the queue (its
// first position report, or its grant) before B called Lock, A is granted
// before B. (No waiter of these histories gives up or loses its lease.)
func checkFIFO(h []rec) error {
	for _, a := range h {
		for _, b := range h {
			if a.joined.Before(b.call) && a.seq > b.seq {
				return fmt.Errorf("%s joined at %v, before %s called at %v, but was granted after it (%d > %d)",
					a.who, a.joined, b.who, b.call, a.seq, b.seq)
			}
		}
	}
	return nil
}

func checkAll(h []rec) error {
	for _, c := range []func([]rec) error{checkExclusion, checkTokens, checkFIFO} {
		if err := c(h); err != nil {
			return err
		}
	}
	return nil
}

// TestCheckersCatchViolations: each checker rejects a hand-made history
// that breaks its rule and accepts the valid one.
func TestCheckersCatchViolations(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	valid := []rec{
		{who: "a", call: at(0), joined: at(1), grant: at(1), release: at(10), seq: 0, token: 5},
		{who: "b", call: at(2), joined: at(3), grant: at(11), release: at(20), seq: 1, token: 7},
		{who: "c", call: at(4), joined: at(5), grant: at(21), release: at(30), seq: 2, token: 9},
	}
	if err := checkAll(valid); err != nil {
		t.Fatalf("valid history rejected: %v", err)
	}
	mutate := func(f func(h []rec)) []rec {
		h := append([]rec(nil), valid...)
		f(h)
		return h
	}
	overlap := mutate(func(h []rec) { h[1].grant = at(9) }) // b in before a left
	if checkExclusion(overlap) == nil {
		t.Fatal("checkExclusion accepted overlapping holds")
	}
	tokens := mutate(func(h []rec) { h[2].token = 7 }) // a repeated token
	if checkTokens(tokens) == nil {
		t.Fatal("checkTokens accepted a token that did not increase")
	}
	// c overtakes b, who had joined before c called.
	unfair := mutate(func(h []rec) {
		h[1].grant, h[1].release, h[1].seq = at(21), at(30), 2
		h[2].grant, h[2].release, h[2].seq = at(11), at(20), 1
		h[1].token, h[2].token = 9, 7
	})
	if checkExclusion(unfair) != nil || checkTokens(unfair) != nil {
		t.Fatal("the unfair history should break only the FIFO rule")
	}
	if checkFIFO(unfair) == nil {
		t.Fatal("checkFIFO accepted a waiter overtaking an earlier one")
	}
}

// TestHistoryExclusionFIFOTokens runs many handles of several Clients (each
// its own etcd connection and lease) against one lock and checks the
// history of their real calls: no two holds overlap, tokens strictly
// increase, grants follow arrival order among live waiters.
func TestHistoryExclusionFIFOTokens(t *testing.T) {
	e := newEnv(t)
	const clients, handles, rounds = 3, 3, 4
	var (
		mu   sync.Mutex
		hist []rec
		seq  int
		in   int
	)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for ci := range clients {
		c := e.client("")
		for hi := range handles {
			m := mustMutex(t, c, "history")
			who := fmt.Sprintf("c%d.h%d", ci, hi)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					r := rec{who: who, call: time.Now()}
					var joined time.Time
					tok := int64(0)
					_, err := m.Acquire(ctx, AcquireOptions{Wait: Forever, Position: func(p fairlock.Position) {
						if joined.IsZero() {
							joined = time.Now()
						}
					}})
					if err != nil {
						t.Errorf("%s: %v", who, err)
						return
					}
					tok, _ = m.LockAndGetToken(ctx) // a re-entry: the hold's token
					_ = m.Unlock(ctx)
					mu.Lock()
					r.grant, r.seq, r.token = time.Now(), seq, tok
					seq++
					in++
					if in != 1 {
						t.Errorf("%d holders at once", in)
					}
					mu.Unlock()
					r.joined = joined
					if r.joined.IsZero() {
						r.joined = r.grant
					}
					time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
					mu.Lock()
					in--
					r.release = time.Now()
					hist = append(hist, r)
					mu.Unlock()
					if err := m.Unlock(ctx); err != nil {
						t.Errorf("%s: Unlock: %v", who, err)
						return
					}
					time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
				}
			}()
		}
	}
	wg.Wait()
	if len(hist) != clients*handles*rounds {
		t.Fatalf("%d acquisitions, want %d", len(hist), clients*handles*rounds)
	}
	queued := 0
	for _, r := range hist {
		if r.joined.Before(r.grant) {
			queued++
		}
	}
	if queued < len(hist)/4 {
		t.Fatalf("only %d of %d acquisitions waited in the queue: too little contention to check order", queued, len(hist))
	}
	if err := checkAll(hist); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d acquisitions, %d queued", len(hist), queued)
}
