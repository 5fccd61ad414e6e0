package faulttests

import (
	"testing"
	"time"
)

func semHist(pool int) *History {
	h := hist()
	h.Locks["S"] = SemFair
	h.Pools["S"] = pool
	return h
}

func TestCheckSemCapacity(t *testing.T) {
	h := semHist(3)
	// 2 + 1 at once is the pool; the third window starts as the first ends
	h.Windows = []*Window{semWin("a", 0, 1*s, 3*s, 2), semWin("b", 1, 2*s, 4*s, 1), semWin("c", 2, 3*s, 5*s, 2)}
	expect(t, CheckSemCapacity(h), "sem-capacity", 0)
	// c starts while a still holds: 2 + 1 + 2 > 3
	h.Windows[2].Start = 2500 * ms(1)
	expect(t, CheckSemCapacity(h), "sem-capacity", 1)
	// a restart between a's start and c's, a ending within its lease of it:
	// excused (the data-loss exception)
	h.Faults = []Fault{{Kind: FRestart, Client: -1, Start: 2200 * ms(1), End: 2300 * ms(1)}}
	expect(t, CheckSemCapacity(h), "sem-capacity", 0)
	// a window that outlives the event by more than its lease is not
	h.Windows[0].UnlockAt = 10 * s
	h.Windows[2].UnlockAt = 10 * s
	h.Windows[1].UnlockAt = 2100 * ms(1)
	h.Faults = []Fault{{Kind: FRestart, Client: -1, Start: 2200 * ms(1), End: 2300 * ms(1)}}
	expect(t, CheckSemCapacity(h), "sem-capacity", 1)
	// one acquisition with two windows at once
	h = semHist(5)
	h.Windows = []*Window{semWin("a", 0, 1*s, 3*s, 1), semWin("a", 0, 2*s, 4*s, 1)}
	expect(t, CheckSemCapacity(h), "sem-capacity", 1)
}

func TestCheckSemOrder(t *testing.T) {
	h := semHist(2)
	call := func(id int, owner string, client int, start, end int) *Call {
		return &Call{ID: id, Client: client, Owner: owner, Lock: "S", Op: "Acquire", Wait: true,
			Start: ms(start), End: ms(end), CtxEnd: Never, Acquired: true}
	}
	h.Calls = []*Call{call(1, "a", 0, 100, 900), call(2, "b", 1, 300, 800)}
	h.Joins = []Join{{Owner: "a", Lock: "S", Start: ms(100), End: ms(120)}, {Owner: "b", Lock: "S", Start: ms(300), End: ms(320)}}
	wa, wb := semWin("a", 0, ms(900), Never, 1), semWin("b", 1, ms(800), Never, 1)
	wa.CallID, wb.CallID = 1, 2
	// b's reply came first, but a's token is lower: a was granted first
	wa.Token, wb.Token = 7, 8
	h.Windows = []*Window{wa, wb}
	expect(t, CheckSemOrder(h), "sem-order", 0)
	// b granted before a, though a joined first
	wa.Token, wb.Token = 9, 8
	expect(t, CheckSemOrder(h), "sem-order", 1)
	// joins that overlap have no order
	h.Joins[1].Start = ms(110)
	expect(t, CheckSemOrder(h), "sem-order", 0)
	h.Joins[1].Start = ms(300)
	// a fault on a's client during its wait excludes it
	h.Faults = []Fault{{Kind: FReset, Client: 0, Start: ms(400), End: ms(500)}}
	expect(t, CheckSemOrder(h), "sem-order", 0)
	// a server-wide order-breaking fault during the waits too
	h.Faults = []Fault{{Kind: FSigStop, Client: -1, Start: ms(400), End: ms(500)}}
	expect(t, CheckSemOrder(h), "sem-order", 0)
	// a restart between two grants, neither wait overlapping it: the
	// token counter was lost with the rest (b's token, drawn after it,
	// restarted from 1), so the tokens say nothing about the order
	h.Calls = []*Call{call(1, "a", 0, 100, 900), call(2, "b", 1, 3000, 3500)}
	h.Joins[1].Start, h.Joins[1].End = ms(3000), ms(3020)
	wa.Token, wb.Token = 9, 1
	h.Faults = []Fault{{Kind: FRestart, Client: -1, Start: ms(2000), End: ms(2100)}}
	expect(t, CheckSemOrder(h), "sem-order", 0)
	// without it they do
	h.Faults = nil
	expect(t, CheckSemOrder(h), "sem-order", 1)
}

func TestCheckSemLiveness(t *testing.T) {
	bound := semLiveBound(0, nil)
	wait := func(id int, owner string, client int, start, end time.Duration, permits int) *Call {
		return &Call{ID: id, Client: client, Owner: owner, Lock: "S", Op: "Acquire", Wait: true,
			Start: start, End: end, CtxEnd: Never, Acquired: true, Permits: permits}
	}
	// pool 3: a holds 2 from 0 to 1 s; w asks for 2 from 0.5 s and is
	// granted at 1.5 s: fine
	h := semHist(3)
	h.Windows = []*Window{semWin("a", 0, 0, 1*s, 2)}
	h.Calls = []*Call{wait(1, "w", 1, 500*ms(1), 1500*ms(1), 2)}
	expect(t, CheckSemLiveness(h), "sem-liveness", 0)
	// granted only a bound after its 2 permits were free: caught
	h.Calls[0].End = 1*s + bound + s
	expect(t, CheckSemLiveness(h), "sem-liveness", 1)
	// ...not while a third holder keeps 2 of the 3 permits
	h.Windows = append(h.Windows, semWin("b", 2, 900*ms(1), 1*s+bound+s, 2))
	expect(t, CheckSemLiveness(h), "sem-liveness", 0)
	// a waiter ahead of w that asks for the whole pool blocks it while
	// it waits (Weighted's rule), though w's ask would fit
	h = semHist(3)
	h.Windows = []*Window{semWin("a", 0, 0, 30*s, 1)}
	h.Calls = []*Call{wait(1, "big", 2, 100*ms(1), 31*s, 3), wait(2, "w", 1, 500*ms(1), 32*s, 1)}
	h.Joins = []Join{{Owner: "big", Lock: "S", Start: 100 * ms(1), End: 110 * ms(1)}, {Owner: "w", Lock: "S", Start: 500 * ms(1), End: 510 * ms(1)}}
	expect(t, CheckSemLiveness(h), "sem-liveness", 0)
	// the same waiter joining after w does not excuse it
	h.Joins[0].Start, h.Joins[0].End = 600*ms(1), 610*ms(1)
	expect(t, CheckSemLiveness(h), "sem-liveness", 1)
	// nor does one of a client that died (paid for in the bound: one
	// faulty other client)
	h.Joins[0].Start, h.Joins[0].End = 100*ms(1), 110*ms(1)
	h.Faults = []Fault{{Kind: FDead, Client: 2, Start: 200 * ms(1), End: Never}}
	expect(t, CheckSemLiveness(h), "sem-liveness", 1)
	h.Calls[1].End = 600*ms(1) + semLiveBound(1, nil) - s
	expect(t, CheckSemLiveness(h), "sem-liveness", 0)
	// a waiter whose own client had a fault is not checked
	h.Calls[1].End = 32 * s
	h.Faults = []Fault{{Kind: FLatency, Client: 1, Start: 5 * s, End: 8 * s}}
	expect(t, CheckSemLiveness(h), "sem-liveness", 0)
	// a waiter ahead whose client had a fault blocks w while its own ask
	// does not fit (a holds 1 of 3 until 1 s)...
	h.Calls[0].End = 31 * s
	h.Faults = []Fault{{Kind: FLatency, Client: 2, Start: 200 * ms(1), End: 30 * s}}
	h.Windows = []*Window{semWin("a", 0, 0, 40*s, 1)}
	expect(t, CheckSemLiveness(h), "sem-liveness", 0)
	// ...but not once it fits: then it is granted or pruned, and its delay
	// is paid for in the bound (it used to hide w's wait for as long as it
	// waited: the failover replays whose pool sat idle behind a zombie
	// renewal)
	h.Windows = []*Window{semWin("a", 0, 0, 1*s, 1)}
	expect(t, CheckSemLiveness(h), "sem-liveness", 1)
	h.Calls[1].End = 1*s + semLiveBound(1, nil) - s
	expect(t, CheckSemLiveness(h), "sem-liveness", 0)
	h.Calls[1].End = 32 * s
	// a server-wide fault adds its length, a lease and its recovery
	h.Faults = []Fault{{Kind: FSigStop, Client: -1, Start: 1 * s, End: 3 * s}}
	h.Calls[0].End = 300 * ms(1) // big gave up early: w is alone
	h.Calls[1].End = 500*ms(1) + semLiveBound(0, h.Faults) - s
	expect(t, CheckSemLiveness(h), "sem-liveness", 0)
	h.Calls[1].End = 500*ms(1) + semLiveBound(0, h.Faults) + s
	expect(t, CheckSemLiveness(h), "sem-liveness", 1)
	// the expirable semaphore is not fair: not checked
	h.Locks["S"] = SemExpirable
	expect(t, CheckSemLiveness(h), "sem-liveness", 0)
}

func TestCheckSemDeadHolders(t *testing.T) {
	h := semHist(2)
	// died at 10 s with a 3 s lease; probed at 14 s, when the server read
	// 1_000_014_000: the death was at 1_000_010_000 on its clock
	p := SemProbe{Lock: "S", Owner: "a", Client: 0, Lease: 3 * s, Died: 10 * s, At: 14 * s, ServerNow: 1_000_014_000}
	for _, c := range []struct {
		end  int64
		want int
	}{
		{-1, 0},                          // given back (or reclaimed)
		{1_000_013_000, 0},               // its lease ended 3 s after the death
		{1_000_010_000 + 3000 + 900, 0},  // within the slack (a renewal on the wire)
		{1_000_010_000 + 3000 + 1500, 1}, // over it
		{1_000_010_000 + 60_000, 1},      // renewed for a minute: a crashed holder keeps its permits
	} {
		p.LeaseEnd = c.end
		h.Probes = []SemProbe{p}
		expect(t, CheckSemDeadHolders(h), "sem-dead-holder", c.want)
	}
	// A release's direct grant to the dead client's queued request, made
	// after the death (at 12.5 s, for min(lease, 2 head graces) = 3 s): the
	// probe reads it again a slack after its end.
	granted := 1_000_012_500 + min(3*s, 2*HeadGrace).Milliseconds()
	for _, c := range []struct {
		end, again, againNow int64
		want                 int
	}{
		{granted, -1, granted + 1000, 0},               // given back when it ended
		{granted, granted - 100, granted + 1000, 0},    // an expired score not yet reclaimed
		{granted, granted + 3000, granted + 1000, 1},   // renewed: not a grant nobody claims
		{granted, 0, 0, 1},                             // not read again: no evidence it ended
		{1_000_010_000 + 60_000, -1, 1_000_071_000, 1}, // a minute left at the read: no grant is that long
	} {
		p.LeaseEnd, p.Again, p.AgainNow = c.end, c.again, c.againNow
		h.Probes = []SemProbe{p}
		expect(t, CheckSemDeadHolders(h), "sem-dead-holder", c.want)
	}
	p.Again, p.AgainNow = 0, 0
	// a failed read is no evidence
	p.LeaseEnd, p.Err = 1_000_010_000+60_000, "read failed"
	h.Probes = []SemProbe{p}
	expect(t, CheckSemDeadHolders(h), "sem-dead-holder", 0)
}
