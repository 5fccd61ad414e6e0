package faulttests

import "testing"

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
}
