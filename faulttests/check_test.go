package faulttests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock/internal/redistest"
)

// Each checker is shown to catch a hand-made history that breaks its
// promise, and to pass the same history made right.

const s = time.Second

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func hist() *History {
	h := NewHistory()
	h.Locks["L"] = FairRedisson
	h.Locks["R"] = Reentrant
	return h
}

func win(owner string, client int, start, unlockAt time.Duration) *Window {
	return &Window{Owner: owner, Client: client, Lock: "L", Lease: 3 * s, Start: start, UnlockAt: unlockAt, DoneAt: Never, ValidUntil: Never}
}

func expect(t *testing.T, vs []Violation, check string, n int) {
	t.Helper()
	got := 0
	for _, v := range vs {
		if v.Check == check {
			got++
		}
	}
	if got != n {
		var b strings.Builder
		for _, v := range vs {
			b.WriteString("\n  " + v.String())
		}
		t.Fatalf("want %d %q violations, got %d:%s", n, check, got, b.String())
	}
}

func TestCheckExclusion(t *testing.T) {
	h := hist()
	h.Windows = []*Window{win("a:1", 0, 1*s, 3*s), win("b:1", 1, 3*s, 4*s)}
	expect(t, CheckExclusion(h), "exclusion", 0) // back to back

	h.Windows = []*Window{win("a:1", 0, 1*s, 3*s), win("b:1", 1, 2*s, 4*s)}
	expect(t, CheckExclusion(h), "exclusion", 1) // overlap

	// Done seen closed late, no ValidUntil: a small overlap is the watcher's lateness...
	a := win("a:1", 0, 1*s, Never)
	a.DoneAt = 3*s + DoneTolerance/2
	h.Windows = []*Window{a, win("b:1", 1, 3*s, 4*s)}
	expect(t, CheckExclusion(h), "exclusion", 0)
	// ...a large one is not
	a.DoneAt = 3*s + 2*DoneTolerance
	expect(t, CheckExclusion(h), "exclusion", 1)
	// with ValidUntil there is no tolerance
	a.DoneAt, a.ValidUntil = Never, 3*s+ms(1)
	expect(t, CheckExclusion(h), "exclusion", 1)

	// an open window overlaps everything after it
	h.Windows = []*Window{win("a:1", 0, 1*s, Never), win("b:1", 1, 30*s, 31*s)}
	expect(t, CheckExclusion(h), "exclusion", 1)

	// across a restart without persistence: allowed if the old window
	// ends within its lease of the restart...
	h.Faults = []Fault{{Kind: FRestart, Client: -1, Start: 2 * s, End: 2*s + ms(100)}}
	h.Windows = []*Window{win("a:1", 0, 1*s, 4*s), win("b:1", 1, 3*s, 5*s)}
	expect(t, CheckExclusion(h), "exclusion", 0)
	// ...not later
	h.Windows = []*Window{win("a:1", 0, 1*s, 9*s), win("b:1", 1, 3*s, 5*s)}
	expect(t, CheckExclusion(h), "exclusion", 1)
	// and not for a window that began after the event
	h.Windows = []*Window{win("a:1", 0, 3*s, 4*s), win("b:1", 1, 3500*time.Millisecond, 5*s)}
	expect(t, CheckExclusion(h), "exclusion", 1)

	// A ForceUnlock while an acquisition call was in flight may have
	// deleted the hold that call took before its reply came back: the two
	// windows that then begin together are excused if the older call's
	// window ends within its lease of the ForceUnlock...
	h.Faults = nil
	fu := &Call{ID: 9, Client: 2, Owner: "c:1", Lock: "L", Op: "ForceUnlock", Start: 2 * s, End: 2*s + ms(10), CtxEnd: Never, Acquired: true}
	ca := &Call{ID: 1, Client: 0, Owner: "a:1", Lock: "L", Op: "Lock", Wait: true, Start: 1 * s, End: 3 * s, CtxEnd: Never, Acquired: true}
	cb := &Call{ID: 2, Client: 1, Owner: "b:1", Lock: "L", Op: "Lock", Wait: true, Start: ms(2500), End: 3 * s, CtxEnd: Never, Acquired: true}
	h.Calls = []*Call{fu, ca, cb}
	wa, wb := win("a:1", 0, 3*s, 4*s), win("b:1", 1, 3*s, 5*s)
	wa.CallID, wb.CallID = 1, 2
	h.Windows = []*Window{wb, wa}
	expect(t, CheckExclusion(h), "exclusion", 0)
	// ...not when the older hold outlives that lease...
	wa.UnlockAt = 9 * s
	expect(t, CheckExclusion(h), "exclusion", 1)
	// ...and not when both calls began after the ForceUnlock.
	wa.UnlockAt = 4 * s
	ca.Start = ms(2200)
	expect(t, CheckExclusion(h), "exclusion", 1)

	// Two loss events: the old hold was taken before a first ForceUnlock
	// (which its window outlives by more than its lease) and was deleted
	// by a second one, right before the new hold. The second excuses the
	// overlap; the first must not hide it (a failover run: "after
	// ForceUnlock #165 at 19.748s the old holder's window should have
	// ended within its lease", while ForceUnlock #189 at 22.812s had
	// deleted it and the new hold began at 22.814s).
	fu1 := &Call{ID: 8, Client: 2, Owner: "c:1", Lock: "L", Op: "ForceUnlock", Start: 1 * s, End: 1*s + ms(10), CtxEnd: Never, Acquired: true}
	fu2 := &Call{ID: 9, Client: 2, Owner: "c:1", Lock: "L", Op: "ForceUnlock", Start: 5 * s, End: 5*s + ms(10), CtxEnd: Never, Acquired: true}
	ca = &Call{ID: 1, Client: 0, Owner: "a:1", Lock: "L", Op: "Lock", Wait: true, Start: ms(500), End: 2 * s, CtxEnd: Never, Acquired: true}
	cb = &Call{ID: 2, Client: 1, Owner: "b:1", Lock: "L", Op: "Lock", Wait: true, Start: 4 * s, End: 5*s + ms(20), CtxEnd: Never, Acquired: true}
	h.Calls = []*Call{fu1, fu2, ca, cb}
	wa, wb = win("a:1", 0, 2*s, ms(6500)), win("b:1", 1, 5*s+ms(20), 6*s)
	wa.CallID, wb.CallID = 1, 2
	h.Windows = []*Window{wa, wb}
	expect(t, CheckExclusion(h), "exclusion", 0)
	// without the second ForceUnlock the overlap is not excused
	h.Calls = []*Call{fu1, ca, cb}
	expect(t, CheckExclusion(h), "exclusion", 1)
}

func TestCheckOrder(t *testing.T) {
	h := hist()
	// A joins at 1s, B at 2s; A granted at 5s, B at 6s: fine.
	ca := &Call{ID: 1, Client: 0, Owner: "a:1", Lock: "L", Op: "Lock", Wait: true, Start: ms(900), End: 5 * s, CtxEnd: Never, Acquired: true}
	cb := &Call{ID: 2, Client: 1, Owner: "b:1", Lock: "L", Op: "Lock", Wait: true, Start: ms(1900), End: 6 * s, CtxEnd: Never, Acquired: true}
	h.Calls = []*Call{ca, cb}
	h.Joins = []Join{{"a:1", "L", 1 * s, ms(1010)}, {"b:1", "L", 2 * s, ms(2010)}}
	expect(t, CheckOrder(h), "order", 0)
	// B granted first: caught
	cb.End = 4 * s
	expect(t, CheckOrder(h), "order", 1)
	// unless A's client had a fault during its wait
	h.Faults = []Fault{{Kind: FLatency, Client: 0, Start: 3 * s, End: 3500 * time.Millisecond}}
	expect(t, CheckOrder(h), "order", 0)
	// a fault on a third client does not excuse it
	h.Faults = []Fault{{Kind: FLatency, Client: 7, Start: 3 * s, End: 3500 * time.Millisecond}}
	expect(t, CheckOrder(h), "order", 1)
	// overlapping join calls: no order promised
	h.Joins = []Join{{"a:1", "L", 1 * s, ms(2010)}, {"b:1", "L", 2 * s, ms(2020)}}
	expect(t, CheckOrder(h), "order", 0)

	// A ForceUnlock deleted a hold while no granted hold was open: it may
	// have been A's, taken in Redis but not yet returned (its replica
	// acknowledgement still waiting), and A queues again at the tail
	// (TestReplicaFailover, seed 2953879420059320300: acb284:3 joined
	// first at 14.341s and was granted last at 16.335s, after a
	// ForceUnlock at 14.399s-14.474s that deleted a hold no returned
	// call held). A is not held to the order then...
	h.Faults = nil
	h.Joins = []Join{{"a:1", "L", 1 * s, ms(1010)}, {"b:1", "L", 2 * s, ms(2010)}}
	fu := &Call{ID: 3, Client: 2, Owner: "c:1", Lock: "L", Op: "ForceUnlock", Start: 3 * s, End: 3*s + ms(10), CtxEnd: Never, Acquired: true}
	h.Calls = []*Call{ca, cb, fu}
	expect(t, CheckOrder(h), "order", 0)
	// ...but it is when the deleted hold was a returned one (a window
	// covers the ForceUnlock: that holder lost it, A's place is intact)...
	h.Windows = []*Window{win("c:2", 2, ms(2500), ms(3500))}
	expect(t, CheckOrder(h), "order", 1)
	// ...or when the ForceUnlock found nothing to delete.
	h.Windows = nil
	fu.Acquired = false
	expect(t, CheckOrder(h), "order", 1)
}

// A give-up lost with a failover: its owner's next call resumes the old
// place (TestReplicaFailover, CI at a9cae8d, seed 1418328590625521715:
// 5f45dc:5 gave up at 20.588s, the Sentinels failed over again about 2 s
// after the run's own failover, and its next call, at 23.037s, was granted
// before d667cb:5, which had joined at 21.672s).
func TestCheckOrderLostGiveUp(t *testing.T) {
	h := hist()
	// b queues and gives up at 3s
	p := &Call{ID: 1, Client: 1, Owner: "b:1", Lock: "L", Op: "TryLockFor", Wait: true, Start: 1 * s, End: 3 * s, CtxEnd: Never}
	// a joins at 5s, granted at 7s; b's next call joins at 6s, granted at 6.5s
	ca := &Call{ID: 2, Client: 0, Owner: "a:1", Lock: "L", Op: "Lock", Wait: true, Start: ms(4990), End: 7 * s, CtxEnd: Never, Acquired: true}
	cb := &Call{ID: 3, Client: 1, Owner: "b:1", Lock: "L", Op: "Lock", Wait: true, Start: ms(5990), End: ms(6500), CtxEnd: Never, Acquired: true}
	h.Calls = []*Call{p, ca, cb}
	h.Joins = []Join{{"b:1", "L", ms(1000), ms(1010)}, {"a:1", "L", 5 * s, ms(5010)}, {"b:1", "L", 6 * s, ms(6010)}}
	// no failover: b overtook a
	expect(t, CheckOrder(h), "order", 1)
	// a failover from 2.5s to 4s: b's give-up may have been lost
	h.Faults = []Fault{{Kind: FFailover, Client: -1, Start: ms(2500), End: 4 * s}}
	expect(t, CheckOrder(h), "order", 0)
	// a failover over before b gave up: nothing of it was lost
	h.Faults = []Fault{{Kind: FFailover, Client: -1, Start: ms(1500), End: ms(2900)}}
	expect(t, CheckOrder(h), "order", 1)
	// b's earlier call took the lock: no entry was left
	h.Faults = []Fault{{Kind: FFailover, Client: -1, Start: ms(2500), End: 4 * s}}
	p.Acquired = true
	expect(t, CheckOrder(h), "order", 1)
	// b's earlier call never queued
	p.Acquired = false
	h.Joins = h.Joins[1:]
	expect(t, CheckOrder(h), "order", 1)
}

func TestCheckLiveness(t *testing.T) {
	h := hist()
	// the lock is held until 2s; the waiter waits until 40s: the lock was free for 38s
	h.Windows = []*Window{win("a:1", 0, 1*s, 2*s)}
	w := &Call{ID: 1, Client: 1, Owner: "b:1", Lock: "L", Op: "Lock", Wait: true, Start: ms(1500), End: 40 * s, CtxEnd: Never, Acquired: true}
	h.Calls = []*Call{w}
	expect(t, CheckLiveness(h), "liveness", 1)
	// granted soon after the release: fine
	w.End = 2*s + ms(50)
	expect(t, CheckLiveness(h), "liveness", 0)
	// an earlier live waiter that is still waiting keeps it from being the head
	w.End = 40 * s
	h.Calls = append(h.Calls, &Call{ID: 2, Client: 2, Owner: "c:1", Lock: "L", Op: "Lock", Wait: true, Start: ms(1200), End: 39 * s, CtxEnd: Never})
	expect(t, CheckLiveness(h), "liveness", 1) // c's own wait is the violation now
	// server-wide faults lengthen the bound
	h.Calls = h.Calls[:1]
	w.End = 14 * s
	expect(t, CheckLiveness(h), "liveness", 1)
	h.Faults = []Fault{{Kind: FSigStop, Client: -1, Start: 3 * s, End: 6 * s}}
	expect(t, CheckLiveness(h), "liveness", 0)
	// a fault on the waiter's own client excuses it
	h.Faults = []Fault{{Kind: FStall, Client: 1, Start: 3 * s, End: 6 * s}}
	w.End = 40 * s
	expect(t, CheckLiveness(h), "liveness", 0)
}

func TestCheckCalls(t *testing.T) {
	h := hist()
	h.Calls = []*Call{{ID: 1, Client: 0, Owner: "a:1", Lock: "L", Op: "Lock", Start: 1 * s, End: 3 * s, CtxEnd: 2 * s}}
	expect(t, CheckCalls(h), "deadline", 0)
	h.Calls[0].End = 1*s + 2*s + CleanupTime + CallSlack + ms(1)
	expect(t, CheckCalls(h), "deadline", 1)
	h.Calls[0].End = Never
	expect(t, CheckCalls(h), "deadline", 1)
	h.Calls = nil
	h.Closes = []CloseEvent{{Client: 0, Start: 1 * s, End: 1*s + CloseBound + ms(1)}}
	expect(t, CheckCalls(h), "deadline", 1)
}

func TestCheckClose(t *testing.T) {
	h := hist()
	h.Closes = []CloseEvent{{Client: 0, Start: 5 * s, End: 5*s + ms(10)}}
	held := win("a:1", 0, 1*s, Never)
	held.DoneAt, held.DoneErr, held.DoneClosed = 5*s+ms(5), "closed", true
	wait := &Call{ID: 1, Client: 0, Owner: "a:2", Lock: "L", Op: "Lock", Wait: true, Start: 2 * s, End: 5*s + ms(8), CtxEnd: Never, Err: "closed", Closed: true}
	h.Windows, h.Calls = []*Window{held}, []*Call{wait}
	expect(t, CheckClose(h), "close", 0)
	// Done still open after Close returned
	held.DoneAt = 40 * s
	expect(t, CheckClose(h), "close", 1)
	// lost just as Close began: a legitimate end
	held.DoneAt, held.DoneClosed, held.DoneErr = 5*s+ms(5), false, "fairlock: lock lost"
	expect(t, CheckClose(h), "close", 0)
	// ended by Close, but reported as lost, not closed
	held.DoneAt = 5*s + DoneTolerance + ms(5)
	expect(t, CheckClose(h), "close", 1)
	held.DoneClosed = true
	// what the handle showed right after Close returned decides, not
	// when a watcher goroutine saw Done close
	held.DoneAt, held.DoneClosed, held.DoneErr = 5*s+ms(600), true, "closed"
	h.Closes[0].Handles = map[string]HandleState{"a:1": {DoneClosed: true, Err: "closed", ErrClosed: true}}
	expect(t, CheckClose(h), "close", 0)
	h.Closes[0].Handles = map[string]HandleState{"a:1": {DoneClosed: false}}
	expect(t, CheckClose(h), "close", 1)
	h.Closes[0].Handles = map[string]HandleState{"a:1": {DoneClosed: true, Err: "lost", ErrClosed: false}}
	expect(t, CheckClose(h), "close", 1)
	h.Closes[0].Handles = nil
	held.DoneAt = 5*s + ms(5)
	// a wait that goes on after Close returned
	wait.End = 9 * s
	expect(t, CheckClose(h), "close", 1)
	// a wait that returned something else than ErrClosed just as Close began is fine...
	wait.End, wait.Closed, wait.Err = 5*s+ms(8), false, "canceled"
	expect(t, CheckClose(h), "close", 0)
	// ...not one that Close ended
	wait.End = 5*s + DoneTolerance + ms(5)
	expect(t, CheckClose(h), "close", 1)
}

func TestCheckResource(t *testing.T) {
	h := hist()
	h.Ops = []ResourceOp{
		{Lock: "L", Owner: "a:1", Read: 1 * s, Value: 0, Wrote: true, Write: 2 * s},
		{Lock: "L", Owner: "b:1", Read: 3 * s, Value: 1, Wrote: true, Write: 4 * s},
		{Lock: "R", Owner: "c:1", Read: 1 * s, Value: 0, Wrote: true, Write: 2 * s},
	}
	expect(t, CheckResource(h), "resource", 0)
	// a lost update: b read before a wrote
	h.Ops[1].Read, h.Ops[1].Value = ms(1500), 0
	expect(t, CheckResource(h), "resource", 1)
	// a section that saw its loss and did not write is fine
	h.Ops[1].Wrote, h.Ops[1].Write = false, 0
	expect(t, CheckResource(h), "resource", 0)
	// and a restart between excuses the overlap
	h.Ops[1].Wrote, h.Ops[1].Write = true, 4*s
	h.Faults = []Fault{{Kind: FRestart, Client: -1, Start: ms(1200), End: ms(1300)}}
	expect(t, CheckResource(h), "resource", 0)
}

// The leftover check catches, on a real server, a lock without a TTL, a
// latch that outlives its TTL, a queue entry of a client that did not die,
// a handoff note of such a client (and a notes hash without a TTL), and a
// channel still subscribed; it accepts what may stay.
func TestCheckLeftovers(t *testing.T) {
	redistest.Long(t)
	e := NewSingle(t)
	c := e.NewClient()
	ctx := context.Background()
	admin := e.primaries()[0]
	name := e.LockName("L")
	if v := e.CheckLeftovers(); len(v) != 0 {
		t.Fatalf("nothing left, yet: %v", v)
	}
	admin.HSet(ctx, name, c.C.ID()+":1", 1) // a lock with no TTL
	admin.Set(ctx, "redisson_unlock_latch:"+name+":x", "1", time.Hour)
	admin.RPush(ctx, "redisson_lock_queue:"+name, c.C.ID()+":2")
	notes := "fairlock_notes:" + name
	admin.HSet(ctx, notes, c.C.ID()+":3", "|30000|60000|10000|fairlock_acquire_latch:x")
	ps := admin.Subscribe(ctx, "redisson_lock__channel:"+name)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	expect(t, e.CheckLeftovers(), "leftover", 6)

	// what may stay: a lock whose lease runs, a fresh latch, a dead client's waiter
	_ = ps.Close()
	admin.PExpire(ctx, name, WatchdogLease)
	admin.Expire(ctx, "redisson_unlock_latch:"+name+":x", LatchTTL)
	admin.Expire(ctx, notes, 5*time.Minute)
	c.dead.Store(true)
	expect(t, e.CheckLeftovers(), "leftover", 0)
}
