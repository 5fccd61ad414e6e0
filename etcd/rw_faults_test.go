package etcd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock"
)

// TestFaultRWKilledLeader: readers and writers of three cluster Clients on
// one read-write lock while the leader is killed (no hand-off). The history
// (a hold counted from its grant to the earlier of its Unlock and the last
// ValidUntil its holder read) must keep writes exclusive and the seed's
// order rule (checkRWExclusion, checkRWOrder); every wait ends within its
// bound; a lost hold is told no later than a second after the validity
// read; reads and writes are granted again after the kill.
func TestFaultRWKilledLeader(t *testing.T) {
	f := newFaultEnv(t)
	clients := []*Client{f.client(0, ""), f.client(1, ""), f.client(2, "")}
	var (
		mu   sync.Mutex
		hist []rwRec
		stop atomic.Bool
		wg   sync.WaitGroup
		errs atomic.Int64
	)
	for i := range 6 {
		l, err := clients[i%3].NewRWMutex("frw")
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for k := 0; !stop.Load(); k++ {
				write := (i+k)%3 == 0 // every worker writes every third round
				m := l.ReadLock()
				if write {
					m = l.WriteLock()
				}
				x := rwRec{rec{who: fmt.Sprintf("h%d.%d", i, k), call: time.Now()}, write}
				got, err := m.Acquire(ctx, AcquireOptions{Wait: faultWait, Position: func(fairlock.Position) {
					if x.joined.IsZero() {
						x.joined = time.Now()
					}
				}})
				if d := time.Since(x.call); d > faultWait+slack {
					t.Errorf("%s: Acquire with wait %v returned after %v", x.who, faultWait, d)
				}
				if err != nil || !got {
					if err != nil {
						errs.Add(1)
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				x.grant = time.Now()
				if x.joined.IsZero() {
					x.joined = x.grant
				}
				maxV, lost := x.grant, false
				done := m.Done()
				until := time.Now().Add(time.Duration(5+rand.IntN(25)) * time.Millisecond)
				for time.Now().Before(until) && !lost {
					if v := m.ValidUntil(); v.After(maxV) {
						maxV = v
					}
					select {
					case <-done:
						lost = true
					case <-time.After(5 * time.Millisecond):
					}
				}
				rel := time.Now()
				if lost {
					if !errors.Is(m.Err(), fairlock.ErrLost) {
						t.Errorf("%s: hold ended early with Err %v", x.who, m.Err())
					}
					if rel.After(maxV.Add(time.Second)) {
						t.Errorf("%s: told lost %v after the validity it read", x.who, rel.Sub(maxV))
					}
				}
				x.release = rel
				if maxV.Before(rel) {
					x.release = maxV // what the holder may believe ends there
				}
				mu.Lock()
				hist = append(hist, x)
				mu.Unlock()
				uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				us := time.Now()
				if err := m.Unlock(uctx); err != nil {
					errs.Add(1)
				}
				cancel()
				if d := time.Since(us); d > 10*time.Second+slack {
					t.Errorf("%s: Unlock bounded by 10 s returned after %v", x.who, d)
				}
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	l := f.cl.WaitLeader(10 * time.Second)
	if l < 0 {
		t.Fatal("no leader")
	}
	killedAt := time.Now()
	f.cl.Kill(l)
	if f.cl.WaitLeader(10*time.Second) < 0 {
		t.Fatal("no leader within 10 s after the kill")
	}
	time.Sleep(faultTTL + 3*time.Second)
	stop.Store(true)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if err := checkRWExclusion(hist); err != nil {
		t.Fatal(err)
	}
	if err := checkRWOrder(hist); err != nil {
		t.Fatal(err)
	}
	reads, writes, shared, queued := 0, 0, 0, 0
	for i, a := range hist {
		if a.grant.After(killedAt.Add(faultTTL)) {
			if a.write {
				writes++
			} else {
				reads++
			}
		}
		if a.joined.Before(a.grant) {
			queued++
		}
		for _, b := range hist[i+1:] {
			if !a.write && !b.write && a.grant.Before(b.release) && b.grant.Before(a.release) {
				shared++
			}
		}
	}
	if reads < 2 || writes < 1 {
		t.Fatalf("%d reads and %d writes granted a TTL after the kill: no progress", reads, writes)
	}
	if queued < len(hist)/5 {
		t.Fatalf("only %d of %d acquisitions queued: too little contention to check order", queued, len(hist))
	}
	t.Logf("%d holds (%d queued, %d pairs of overlapping reads; %d reads and %d writes a TTL after the kill), %d failed calls",
		len(hist), queued, shared, reads, writes, errs.Load())
}
