package faulttests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/fence"
	"github.com/fairlock-go/fairlock/fenced"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

// fencedWriter makes one write of record to key with token; the real one is
// fence.Write, the broken one ignores the token.
type fencedWriter func(ctx context.Context, rdb redis.UniversalClient, key string, token int64, record string) (fence.Result, error)

func realFencedWrite(ctx context.Context, rdb redis.UniversalClient, key string, token int64, record string) (fence.Result, error) {
	return fence.Write(ctx, rdb, key, token, fence.RPush(record))
}

// unfencedWrite is the broken variant: the write is applied whatever the
// token (a resource that does not check fences).
func unfencedWrite(ctx context.Context, rdb redis.UniversalClient, key string, token int64, record string) (fence.Result, error) {
	err := rdb.RPush(ctx, key, record).Err()
	return fence.Result{Accepted: err == nil, Last: token}, err
}

type fenceRun struct {
	h                  *FenceHistory
	rejected, accepted atomic.Int64
	paused             atomic.Int64
}

// runFenced runs workers (each its own fenced.Mutex on one lock, two per
// client) for d, each hold making one or two writes of (token, holder,
// write id) with write; some holds stop their goroutine past their lease
// before writing (a GC pause or SIGSTOP of the holder), and faults hits
// the clients meanwhile. It returns the history with the resource's log.
func runFenced(t *testing.T, e *Env, d time.Duration, write fencedWriter, faults func(cs []*Client)) *fenceRun {
	r := &fenceRun{h: &FenceHistory{}}
	lock, resource := e.LockName("fenced"), e.LockName("fenced")+":resource"
	var cs []*Client
	for range 3 {
		cs = append(cs, e.NewClient())
	}
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	var nextID atomic.Int64
	for ci, c := range cs {
		for w := range 2 {
			m, err := fenced.New(c.C, lock)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(ci), uint64(w)))
			first := ci == 0 && w == 0
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					r.hold(e, c, m, rng, write, resource, &nextID, first)
					first = false
				}
			}()
		}
	}
	if faults != nil {
		faults(cs)
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	log, err := e.primaries()[0].LRange(ctx, resource, 0, -1).Result()
	if err != nil {
		t.Fatalf("reading the resource: %v", err)
	}
	for _, s := range log {
		en, err := parseFenceRecord(s)
		if err != nil {
			t.Fatal(err)
		}
		r.h.Log = append(r.h.Log, en)
	}
	return r
}

// hold is one pass: acquire with a token, maybe pause past the lease, write
// once or twice under the fence, release.
func (r *fenceRun) hold(e *Env, c *Client, m *fenced.Mutex, rng *rand.Rand, write fencedWriter, resource string, nextID *atomic.Int64, pause bool) {
	h := e.H
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	lease := WatchdogLease
	var tok int64
	var err error
	// A paused hold takes an explicit lease: the pause stops only this
	// goroutine, so under the watchdog's lease the watchdog would keep the
	// hold alive through it and the pause would lose nothing (a real GC
	// pause or SIGSTOP stops the watchdog too).
	pause = pause || rng.IntN(8) == 0
	if pause || rng.IntN(2) == 0 {
		lease = ExplicitLeaseMin
		tok, err = m.LockAndGetTokenWithLease(ctx, lease)
	} else {
		tok, err = m.LockAndGetToken(ctx)
	}
	if err != nil {
		time.Sleep(50 * time.Millisecond)
		return
	}
	start := h.Now()
	end := Never
	validUntil := h.At(m.ValidUntil())
	// sample ends the window at the earliest of: Done seen closed, the
	// last ValidUntil sampled while held.
	sample := func() {
		select {
		case <-m.Done():
			end = min(end, h.Now(), validUntil)
		default:
			if vu := m.ValidUntil(); !vu.IsZero() {
				validUntil = h.At(vu)
			}
		}
	}
	if pause {
		// The holder's goroutine stops past its lease (no check of Done
		// after it resumes: the write already "passed" its check).
		r.paused.Add(1)
		time.Sleep(lease + time.Second)
	} else {
		time.Sleep(time.Duration(20+rng.IntN(80)) * time.Millisecond)
		sample()
	}
	for range 1 + rng.IntN(2) {
		id := fmt.Sprintf("w%d", nextID.Add(1))
		wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
		sent := h.Now()
		res, err := write(wctx, c.RDB, resource, tok, fenceRecord(tok, m.Owner(), id))
		wcancel()
		fw := FenceWrite{ID: id, Token: tok, Owner: m.Owner(), Sent: sent, Returned: h.Now(), Last: res.Last}
		switch {
		case err != nil:
			fw.Outcome = "error: " + err.Error()
		case res.Accepted:
			fw.Outcome = "accepted"
			r.accepted.Add(1)
		default:
			fw.Outcome = "rejected"
			r.rejected.Add(1)
		}
		r.h.addWrite(fw)
	}
	sample()
	end = min(end, h.Now(), validUntil)
	_ = m.Unlock(ctx)
	r.h.addHold(FenceHold{Owner: m.Owner(), Client: c.ID, Token: tok, Start: start, End: end})
}

// TestFencedWritesUnderFaults: holds of a fenced lock on three clients,
// under a stall of one client past its lease, connection resets, the
// server stopped (SIGSTOP) and holders paused past their leases; the
// writes the fence accepted are in token order and come from disjoint
// holds, and the paused holders' late writes were rejected.
func TestFencedWritesUnderFaults(t *testing.T) {
	redistest.Long(t)
	e := NewSingle(t)
	r := runFenced(t, e, 12*time.Second, realFencedWrite, func(cs []*Client) {
		time.Sleep(1500 * time.Millisecond)
		e.Stall(cs[1], WatchdogLease+2*time.Second)
		e.Reset(cs[2], 3, 300*time.Millisecond)
		time.Sleep(500 * time.Millisecond)
		e.SigStop(1500 * time.Millisecond)
	})
	vs := CheckFence(r.h)
	for _, v := range vs {
		t.Error(v)
	}
	t.Logf("%d holds (%d paused past their lease), %d writes accepted, %d rejected, %d in the resource",
		len(r.h.Holds), r.paused.Load(), r.accepted.Load(), r.rejected.Load(), len(r.h.Log))
	if r.rejected.Load() == 0 {
		t.Errorf("no late write was rejected: the run did not exercise the fence (%d paused holds)", r.paused.Load())
	}
	if r.accepted.Load() < 5 {
		t.Errorf("only %d writes accepted", r.accepted.Load())
	}
}

// TestFencedCheckCatchesUnfencedWrites runs the same workload against a
// resource that does not check tokens: the paused holders' late writes land
// after newer ones, and CheckFence must say so.
func TestFencedCheckCatchesUnfencedWrites(t *testing.T) {
	redistest.Long(t)
	e := NewSingle(t)
	r := runFenced(t, e, 7*time.Second, unfencedWrite, nil)
	vs := CheckFence(r.h)
	if len(vs) == 0 {
		t.Fatalf("CheckFence found nothing in an unfenced run (%d holds, %d paused, %d writes)", len(r.h.Holds), r.paused.Load(), len(r.h.Writes))
	}
	t.Logf("caught: %v (%d violations)", vs[0], len(vs))
}

// CheckFence on hand-made histories.
func TestCheckFence(t *testing.T) {
	hold := func(owner string, tok int64, s, e int) FenceHold {
		return FenceHold{Owner: owner, Token: tok, Start: ms(s), End: ms(e)}
	}
	wr := func(id string, tok int64, owner, outcome string, last int64) FenceWrite {
		return FenceWrite{ID: id, Token: tok, Owner: owner, Outcome: outcome, Last: last}
	}
	good := func() *FenceHistory {
		return &FenceHistory{
			Holds:  []FenceHold{hold("a", 1, 0, 100), hold("b", 2, 150, 300), hold("c", 3, 320, 400)},
			Writes: []FenceWrite{wr("w1", 1, "a", "accepted", 1), wr("w2", 2, "b", "accepted", 2), wr("w3", 2, "b", "accepted", 2), wr("w4", 1, "a", "rejected", 2), wr("w5", 3, "c", "accepted", 3)},
			Log:    []FenceEntry{{1, "a", "w1"}, {2, "b", "w2"}, {2, "b", "w3"}, {3, "c", "w5"}},
		}
	}
	expect(t, CheckFence(good()), "fence", 0)

	h := good() // a stale write accepted after a newer one
	h.Log = []FenceEntry{{1, "a", "w1"}, {2, "b", "w2"}, {2, "b", "w3"}, {1, "a", "w4"}, {3, "c", "w5"}}
	h.Writes[3].Outcome = "accepted"
	expect(t, CheckFence(h), "fence", 1)

	h = good() // two accepted writes from overlapping holds
	h.Holds[1] = hold("b", 2, 50, 300)
	expect(t, CheckFence(h), "fence", 1)

	h = good() // told rejected, but in the resource; and told accepted, but missing
	h.Writes[1].Outcome = "rejected"
	h.Writes[1].Last = 3
	h.Log = []FenceEntry{{1, "a", "w1"}, {2, "b", "w2"}, {3, "c", "w5"}}
	expect(t, CheckFence(h), "fence", 2)

	h = good() // two holds with one token; a rejection naming an older token
	h.Holds = append(h.Holds, hold("d", 3, 500, 600))
	h.Writes[3].Last = 1
	expect(t, CheckFence(h), "fence", 2)

	h = good() // one token written by two owners
	h.Log[2].Owner = "x"
	h.Writes[2].Owner = "x"
	expect(t, CheckFence(h), "fence", 1)
}
