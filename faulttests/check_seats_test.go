package faulttests

import (
	"testing"
	"time"
)

// The seats checks, each shown catching a hand-made history that breaks
// its promise and passing the same history made right.

// seatsHist is a history with venue "V" and seats "{V}:1".."{V}:4".
func seatsHist() *History {
	h := hist()
	h.Locks["V"] = SeatsVenue
	for _, n := range []string{"{V}:1", "{V}:2", "{V}:3", "{V}:4"} {
		h.Locks[n] = Seat
	}
	return h
}

// seatReq is a hand-made acquisition call of the seats named (numbers).
func seatReq(id int, owner string, client int, start, end time.Duration, acquired bool, seats ...string) *Call {
	ss := make([]string, len(seats))
	for i, n := range seats {
		ss[i] = "{V}:" + n
	}
	return &Call{ID: id, Client: client, Owner: owner, Lock: "V", Op: "Acquire", Wait: true, Start: start, End: end,
		CtxEnd: Never, Acquired: acquired, Seats: ss}
}

// seatWins are the windows of a grant: one per seat of c, token tok.
func seatWins(c *Call, from, to time.Duration, tok int64) []*Window {
	var ws []*Window
	for _, n := range c.Seats {
		w := win(c.Owner, c.Client, from, to)
		w.Lock, w.CallID, w.Token = n, c.ID, tok
		ws = append(ws, w)
	}
	return ws
}

// Exclusion per seat is CheckExclusion's: two grants sharing a seat whose
// windows overlap are caught on that seat, disjoint sets are not.
func TestCheckSeatsExclusion(t *testing.T) {
	h := seatsHist()
	a := seatReq(1, "a", 0, 0, 1*s, true, "1", "2")
	b := seatReq(2, "b", 1, 0, 2*s, true, "3", "4")
	h.Calls = []*Call{a, b}
	h.Windows = append(seatWins(a, 1*s, 5*s, 1), seatWins(b, 2*s, 6*s, 2)...)
	expect(t, CheckExclusion(h), "exclusion", 0)
	// b's set shares seat 2 with a's: one violation, on seat 2
	b.Seats = []string{"{V}:2", "{V}:3"}
	h.Windows = append(seatWins(a, 1*s, 5*s, 1), seatWins(b, 2*s, 6*s, 2)...)
	vs := CheckExclusion(h)
	expect(t, vs, "exclusion", 1)
	if vs[0].Lock != "{V}:2" {
		t.Fatalf("caught on %s, want seat 2", vs[0].Lock)
	}
	// made right: b's grant after a's release
	h.Windows = append(seatWins(a, 1*s, 5*s, 1), seatWins(b, 5*s, 6*s, 2)...)
	expect(t, CheckExclusion(h), "exclusion", 0)
}

func TestCheckSeatsOrder(t *testing.T) {
	h := seatsHist()
	// a asks for {1,2} and joins at 0.1 s; b asks for {2,3} and joins at
	// 0.3 s: a must be granted first
	a := seatReq(1, "a", 0, ms(100), ms(900), true, "1", "2")
	b := seatReq(2, "b", 1, ms(300), ms(800), true, "2", "3")
	h.Calls = []*Call{a, b}
	h.Joins = []Join{{Owner: "a", Lock: "V", Start: ms(100), End: ms(120)}, {Owner: "b", Lock: "V", Start: ms(300), End: ms(320)}}
	set := func(ta, tb int64) {
		h.Windows = append(seatWins(a, a.End, Never, ta), seatWins(b, b.End, Never, tb)...)
	}
	// b's reply came first, but a's token is lower: a was granted first
	set(7, 8)
	expect(t, CheckSeatsOrder(h), "seats-order", 0)
	// b granted before a: caught, on their common seat
	set(9, 8)
	vs := CheckSeatsOrder(h)
	expect(t, vs, "seats-order", 1)
	if vs[0].Lock != "{V}:2" {
		t.Fatalf("caught on %s, want seat 2", vs[0].Lock)
	}
	// no common seat: no order between them
	b.Seats = []string{"{V}:3", "{V}:4"}
	set(9, 8)
	expect(t, CheckSeatsOrder(h), "seats-order", 0)
	b.Seats = []string{"{V}:2", "{V}:3"}
	// a b that never queued (granted at once), asking after a joined,
	// passed a live waiter: caught too
	h.Joins = h.Joins[:1]
	set(9, 8)
	expect(t, CheckSeatsOrder(h), "seats-order", 1)
	h.Joins = []Join{{Owner: "a", Lock: "V", Start: ms(100), End: ms(120)}, {Owner: "b", Lock: "V", Start: ms(300), End: ms(320)}}
	// joins that overlap have no order
	b.Start, h.Joins[1].Start = ms(105), ms(110)
	expect(t, CheckSeatsOrder(h), "seats-order", 0)
	b.Start, h.Joins[1].Start = ms(300), ms(300)
	// a fault on a's client during its call excludes it
	h.Faults = []Fault{{Kind: FLatency, Client: 0, Start: ms(400), End: ms(500)}}
	expect(t, CheckSeatsOrder(h), "seats-order", 0)
	// a server-wide order-breaking fault too
	h.Faults = []Fault{{Kind: FSigStop, Client: -1, Start: ms(400), End: ms(500)}}
	expect(t, CheckSeatsOrder(h), "seats-order", 0)
	// one that does not break order does not excuse it
	h.Faults = []Fault{{Kind: FPubSubKill, Client: -1, Start: ms(400), End: ms(500)}}
	expect(t, CheckSeatsOrder(h), "seats-order", 1)
	// a that gave up (not granted) is not compared
	h.Faults = nil
	a.Acquired = false
	expect(t, CheckSeatsOrder(h), "seats-order", 0)
	a.Acquired = true
	// a restart between the grants: the token counter may be lost
	b.Start, b.End = 3*s, 3500*ms(1)
	h.Joins[1].Start, h.Joins[1].End = 3*s, 3020*ms(1)
	set(9, 1)
	h.Faults = []Fault{{Kind: FRestart, Client: -1, Start: 2 * s, End: 2100 * ms(1)}}
	expect(t, CheckSeatsOrder(h), "seats-order", 0)
	h.Faults = nil
	expect(t, CheckSeatsOrder(h), "seats-order", 1)
}

func TestCheckSeatsLiveness(t *testing.T) {
	bound := seatsLiveBound(0, nil)
	// x holds {1,2} from 0 to 1 s; w asks for {2,3} from 0.5 s and is
	// granted at 1.5 s: fine
	h := seatsHist()
	x := seatReq(1, "x", 0, 0, 0, true, "1", "2")
	w := seatReq(2, "w", 1, 500*ms(1), 1500*ms(1), true, "2", "3")
	h.Calls = []*Call{x, w}
	h.Windows = seatWins(x, 0, 1*s, 1)
	expect(t, CheckSeatsLiveness(h), "seats-liveness", 0)
	// granted only a bound after its seats were free: caught
	w.End = 1*s + bound + s
	expect(t, CheckSeatsLiveness(h), "seats-liveness", 1)
	// a hold on seat 4, which w does not name, does not excuse it
	y := seatReq(3, "y", 2, 0, 0, true, "4")
	h.Calls = append(h.Calls, y)
	h.Windows = append(h.Windows, seatWins(y, 900*ms(1), w.End, 2)...)
	expect(t, CheckSeatsLiveness(h), "seats-liveness", 1)
	// a hold on seat 3 does
	y.Seats = []string{"{V}:3"}
	h.Windows = append(seatWins(x, 0, 1*s, 1), seatWins(y, 900*ms(1), w.End, 2)...)
	expect(t, CheckSeatsLiveness(h), "seats-liveness", 0)

	// waiters ahead: z asks for {3,4} and joined before w; v asks for {1,4}
	// and joined before z. While v waits (seat 1 held for ever), z waits
	// behind it on seat 4 and w behind z on seat 3: w is not eligible
	// (transitively ahead), though v names none of w's seats
	h = seatsHist()
	x = seatReq(1, "x", 0, 0, 0, true, "1")
	v := seatReq(2, "v", 2, 100*ms(1), 40*s, false, "1", "4")
	z := seatReq(3, "z", 3, 200*ms(1), 41*s, true, "3", "4")
	w = seatReq(4, "w", 1, 300*ms(1), 42*s, true, "2", "3")
	h.Calls = []*Call{x, v, z, w}
	h.Windows = seatWins(x, 0, 39*s, 1)
	h.Joins = []Join{{Owner: "v", Lock: "V", Start: 100 * ms(1), End: 110 * ms(1)},
		{Owner: "z", Lock: "V", Start: 200 * ms(1), End: 210 * ms(1)},
		{Owner: "w", Lock: "V", Start: 300 * ms(1), End: 310 * ms(1)}}
	expect(t, CheckSeatsLiveness(h), "seats-liveness", 0)
	// the same z joining after w does not excuse w (nor does v, then)
	h.Joins[1].Start, h.Joins[1].End = 400*ms(1), 410*ms(1)
	expect(t, CheckSeatsLiveness(h), "seats-liveness", 1)
	h.Joins[1].Start, h.Joins[1].End = 200*ms(1), 210*ms(1)
	// a waiter whose own client had a fault is not checked
	h.Joins[1].Start, h.Joins[1].End = 400*ms(1), 410*ms(1)
	h.Faults = []Fault{{Kind: FReset, Client: 1, Start: 5 * s, End: 5 * s}}
	expect(t, CheckSeatsLiveness(h), "seats-liveness", 0)
	// a server-wide fault adds its length, a lease and its recovery
	h.Faults = []Fault{{Kind: FSigStop, Client: -1, Start: 1 * s, End: 3 * s}}
	w.End = 300*ms(1) + seatsLiveBound(0, h.Faults) - s
	expect(t, CheckSeatsLiveness(h), "seats-liveness", 0)
	w.End = 300*ms(1) + seatsLiveBound(0, h.Faults) + s
	expect(t, CheckSeatsLiveness(h), "seats-liveness", 1)
	// a dead client's waiter ahead is paid for in the bound
	h.Faults = []Fault{{Kind: FDead, Client: 3, Start: 250 * ms(1), End: Never}}
	h.Joins[1].Start, h.Joins[1].End = 200*ms(1), 210*ms(1)
	v.End = 200 * ms(1) // v gave up early: only dead z is ahead
	w.End = 300*ms(1) + seatsLiveBound(1, nil) - s
	expect(t, CheckSeatsLiveness(h), "seats-liveness", 0)
	w.End = 300*ms(1) + seatsLiveBound(1, nil) + s
	expect(t, CheckSeatsLiveness(h), "seats-liveness", 1)
}

func TestCheckSeatsDeadHolders(t *testing.T) {
	h := seatsHist()
	p := SemProbe{Lock: "V", Owner: "a", Client: 0, Lease: 3 * s, Died: 10 * s, At: 14 * s, ServerNow: 1_000_014_000}
	for _, c := range []struct {
		end  int64
		want int
	}{
		{-1, 0},                          // released or reclaimed
		{1_000_013_000, 0},               // its lease ended 3 s after the death
		{1_000_010_000 + 3000 + 1500, 1}, // over lease + slack
		{1_000_010_000 + 60_000, 1},      // renewed for a minute
	} {
		p.LeaseEnd = c.end
		h.Probes = []SemProbe{p}
		expect(t, CheckSemDeadHolders(h), "seats-dead-holder", c.want)
	}
}

// The RedLock checks on hand-made histories.
func TestCheckRedLock(t *testing.T) {
	h := hist()
	h.Locks["RL"] = RedLockKind
	rw := func(owner string, client int, start, end time.Duration, granted ...bool) *Window {
		w := win(owner, client, start, end)
		w.Lock, w.Granted = "RL", granted
		return w
	}
	// one after the other: fine
	h.Windows = []*Window{rw("a", 0, 1*s, 2*s, true, true, false), rw("b", 1, 2*s, 3*s, false, true, true)}
	expect(t, CheckRedLockExclusion(h), "redlock-exclusion", 0)
	// overlapping: caught
	h.Windows[1].Start = 1500 * ms(1)
	expect(t, CheckRedLockExclusion(h), "redlock-exclusion", 1)
	// across a restart of server 2, the only server both had, the old
	// window ending within its lease of it: excused
	h.Faults = []Fault{{Kind: FRestart, Client: -1, Server: 2, Start: 1200 * ms(1), End: 1300 * ms(1)}}
	expect(t, CheckRedLockExclusion(h), "redlock-exclusion", 0)
	// ...not a restart of another server
	h.Faults[0].Server = 3
	expect(t, CheckRedLockExclusion(h), "redlock-exclusion", 1)
	h.Faults[0].Server = 2
	// ...nor when they share two servers (one of them kept the old grant)
	h.Windows[1].Granted = []bool{true, true, true}
	expect(t, CheckRedLockExclusion(h), "redlock-exclusion", 1)
	h.Windows[1].Granted = []bool{false, true, true}
	// ...nor when the old window outlived the restart by more than its lease
	h.Windows[0].UnlockAt = 1300*ms(1) + h.Windows[0].Lease + s
	h.Windows[1].UnlockAt = 10 * s
	expect(t, CheckRedLockExclusion(h), "redlock-exclusion", 1)

	// the minority: a partitioned user's grant is caught, its refusals not
	h = hist()
	h.Locks["RL"] = RedLockKind
	h.Calls = []*Call{{ID: 1, Client: 4, Lock: "RL", Op: "TryLock", Start: s, End: 2 * s, CtxEnd: Never}}
	expect(t, CheckRedLockMinority(h, 4), "redlock-minority", 0)
	h.Calls[0].Acquired = true
	expect(t, CheckRedLockMinority(h, 4), "redlock-minority", 1)
	expect(t, CheckRedLockMinority(h, 3), "redlock-minority", 0)
}
