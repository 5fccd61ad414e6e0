package faulttests

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// The checks of the fair multi-seat hold (seats_test.go records it):
//
//	exclusion  CheckExclusion as it is, per seat: a granted set is one
//	           window on each of its seats, so two owners' windows on one
//	           seat never overlap (except across a loss event);
//	order      CheckSeatsOrder: per seat, a request that joined the queues
//	           before another naming a common seat arrived, neither faulty
//	           (no fault on its client, no order-breaking server fault) nor
//	           giving up (both granted in their calls), is granted first
//	           (fencing tokens: the venue's counter, INCRed per grant);
//	liveness   CheckSeatsLiveness: a live waiter whose seats are all free
//	           and that nobody ahead of it waits before, is granted within
//	           seatsLiveBound;
//	dead       CheckSemDeadHolders, reported as "seats-dead-holder": a
//	           client that dies holding seats has them back within the
//	           hold's lease (+ DeadSlack) on the server's clock.

// checkSeats is the seats checks with h locked (Check runs them).
func checkSeats(h *History) []Violation {
	vs := CheckSeatsOrder(h)
	return append(vs, CheckSeatsLiveness(h)...)
}

// seatNums shortens seat names "{tag-venue}:3" to "3" for messages.
func seatNums(seats []string) []string {
	out := make([]string, len(seats))
	for i, s := range seats {
		if j := strings.LastIndex(s, "}:"); j >= 0 {
			out[i] = s[j+2:]
		} else {
			out[i] = s
		}
	}
	return out
}

// common is the first seat two requests share ("" if none).
func common(a, b []string) string {
	for _, s := range a {
		if slices.Contains(b, s) {
			return s
		}
	}
	return ""
}

// seatsRequests lists the acquisition calls of each venue.
func seatsRequests(h *History) map[string][]*Call {
	by := map[string][]*Call{}
	for _, c := range h.Calls {
		if h.Locks[c.Lock] == SeatsVenue && c.Op != "Release" && len(c.Seats) > 0 {
			by[c.Lock] = append(by[c.Lock], c)
		}
	}
	return by
}

// CheckSeatsOrder: for two acquisitions A and B of a venue that name a
// common seat and were both granted in their calls, where A joined the
// queues (its first "queued" reply came back) before B arrived (B's join
// was sent, or, for a B granted without queueing, its call started), and
// neither's client had a fault during its call, nor was there an
// order-breaking server fault from A's join to the later grant, A was
// granted first: A's token is lower. Tokens drawn on either side of a
// data-losing event are not compared (the counter may be lost).
func CheckSeatsOrder(h *History) []Violation {
	ix := newIndex(h)
	tokens := map[int]int64{}
	for _, w := range h.Windows {
		if w.Token > 0 && h.Locks[w.Lock] == Seat {
			tokens[w.CallID] = w.Token
		}
	}
	type granted struct {
		c       *Call
		joined  bool
		arrived time.Duration // join sent (or call start)
		joinEnd time.Duration
		token   int64
	}
	var losses []Fault
	for _, f := range h.Faults {
		if f.Kind.dataLoss() {
			losses = append(losses, f)
		}
	}
	across := func(from, to time.Duration) bool {
		for _, f := range losses {
			if overlaps(f.Start, f.End, from, to) {
				return true
			}
		}
		return false
	}
	var vs []Violation
	for venue, cs := range seatsRequests(h) {
		var gs []granted
		for _, c := range cs {
			if !c.Acquired || c.End == Never || tokens[c.ID] == 0 || ix.faultedDuring(c.Client, c.Start, c.End) {
				continue
			}
			g := granted{c: c, arrived: c.Start, joinEnd: Never, token: tokens[c.ID]}
			from := c.Start
			if js := ix.joinsOf(c); len(js) > 0 {
				g.joined, g.arrived, g.joinEnd, from = true, js[0].Start, js[0].End, js[0].Start
			}
			bad := false
			for _, f := range h.Faults {
				if f.Kind.breaksOrder() && overlaps(f.Start, f.End, from, c.End) {
					bad = true
				}
			}
			if !bad {
				gs = append(gs, g)
			}
		}
		for _, a := range gs {
			if !a.joined {
				continue
			}
			for _, b := range gs {
				if a.c == b.c || a.joinEnd >= b.arrived || b.token > a.token {
					continue
				}
				seat := common(a.c.Seats, b.c.Seats)
				if seat == "" || across(a.arrived, max(a.c.End, b.c.End)) {
					continue
				}
				how := "joined at " + ts(b.arrived)
				if !b.joined {
					how = "asked at " + ts(b.arrived) + " (granted without queueing)"
				}
				vs = append(vs, Violation{"seats-order", seat, b.c.End, fmt.Sprintf(
					"%s (call #%d, seats %v) joined the queues at %s, before %s (call #%d, seats %v) %s, but was granted after it (tokens %d vs %d) [venue %s]",
					short(a.c.Owner), a.c.ID, seatNums(a.c.Seats), ts(a.joinEnd), short(b.c.Owner), b.c.ID, seatNums(b.c.Seats), how, a.token, b.token, venue)})
			}
		}
	}
	return vs
}

// CheckSeatsLiveness: a live waiter W (no fault on its own client during
// its wait, not dead or closed) that could be granted (no believed-valid
// window open on any of its seats, and no request ahead of it still in
// its call) is granted within seatsLiveBound of the faults that fired.
//
// "Ahead of W" is transitive: a request that joined before W (its join
// sent before W's join came back) and names one of W's seats, or a seat
// of a request already ahead of W. The transitive part matters when a
// request ahead is of a client that died: it stays queued in Redis until
// pruned, and until then it can only be pruned once it is ready, which
// waits for the requests ahead of it on its other seats. Requests of a
// faulty client stay links of the chain for a lease and three graces
// after their call returned (how long a dead request may stay queued once
// nothing is ahead of it); the cost of each such client is paid in the
// bound.
func CheckSeatsLiveness(h *History) []Violation {
	ix := newIndex(h)
	var vs []Violation
	windows := map[string][]*Window{} // by seat
	for _, w := range h.Windows {
		if h.Locks[w.Lock] == Seat {
			windows[w.Lock] = append(windows[w.Lock], w)
		}
	}
	for venue, reqs := range seatsRequests(h) {
		for _, w := range reqs {
			if !w.Wait {
				continue
			}
			end := min(w.End, ix.clip(w.Client))
			if end <= w.Start {
				continue
			}
			own := false
			for _, f := range ix.faults[w.Client] {
				if f.Kind != FDead && f.Kind != FClose && overlaps(f.Start, f.End, w.Start, end) {
					own = true
				}
			}
			if own {
				continue
			}
			arrived := w.Start
			if js := ix.joinsOf(w); len(js) > 0 {
				arrived = js[0].End
			}
			// the candidates: requests that joined before w arrived and
			// may still be queued in w's time
			type cand struct {
				c        *Call
				join, oe time.Duration // join sent; in its call until oe
			}
			var cands []cand
			for _, o := range reqs {
				if o == w {
					continue
				}
				js := ix.joinsOf(o)
				if len(js) == 0 || js[0].Start >= arrived {
					continue
				}
				oe := min(o.End, ix.clip(o.Client))
				link := o.End
				if link != Never && (ix.faultedDuring(o.Client, o.Start, o.End) || ix.clip(o.Client) < o.End) {
					link += maxLease() + 3*HeadGrace
				}
				if link > w.Start {
					cands = append(cands, cand{o, js[0].Start, oe})
				}
			}
			seats := map[string]bool{}
			for _, s := range w.Seats {
				seats[s] = true
			}
			ahead := make([]bool, len(cands))
			for grown := true; grown; {
				grown = false
				for i, c := range cands {
					if ahead[i] {
						continue
					}
					for _, s := range c.c.Seats {
						if seats[s] {
							ahead[i], grown = true, true
							break
						}
					}
					if ahead[i] {
						for _, s := range c.c.Seats {
							seats[s] = true
						}
					}
				}
			}
			type iv struct{ a, b time.Duration }
			var busy []iv
			for _, s := range w.Seats {
				for _, x := range windows[s] {
					if xe, _ := x.End(); xe > w.Start && x.Start < end {
						busy = append(busy, iv{x.Start, xe})
					}
				}
			}
			for i, c := range cands {
				if ahead[i] && c.oe > w.Start {
					busy = append(busy, iv{c.join, c.oe})
				}
			}
			sort.Slice(busy, func(i, j int) bool { return busy[i].a < busy[j].a })
			check := func(a, b time.Duration) {
				if b <= a {
					return
				}
				from := a - maxLease() - 3*HeadGrace
				others := map[int]bool{}
				for _, c := range ix.calls[venue] {
					if c.Client == w.Client || others[c.Client] {
						continue
					}
					if overlaps(c.Start, c.End, from, b) && ix.faultedDuring(c.Client, from, b) || c.Start < b && ix.clip(c.Client) < b {
						others[c.Client] = true
					}
				}
				for s := range seats {
					for _, x := range windows[s] {
						xe, _ := x.End()
						if x.Client != w.Client && overlaps(x.Start, xe, from, b) && ix.faultedDuring(x.Client, from, b) {
							others[x.Client] = true
						}
					}
				}
				var global []Fault
				for _, f := range h.Faults {
					if f.Kind.global() && overlaps(f.Start, f.End, from, b) {
						global = append(global, f)
					}
				}
				bound := seatsLiveBound(len(others), global)
				if b-a > bound {
					vs = append(vs, Violation{"seats-liveness", w.Seats[0], a + bound, fmt.Sprintf(
						"waiter %s (call #%d, seats %v) could be granted, with its seats free and nobody ahead of it, from %s to %s (%v), over the bound %v (%d faulty other clients, %d server faults) [venue %s]",
						short(w.Owner), w.ID, seatNums(w.Seats), ts(a), ts(b), (b - a).Round(time.Millisecond), bound, len(others), len(global), venue)})
				}
			}
			t := w.Start
			for _, x := range busy {
				if x.b <= t {
					continue
				}
				if x.a >= end {
					break
				}
				if x.a > t {
					check(t, x.a)
				}
				t = max(t, x.b)
				if t >= end {
					break
				}
			}
			if t < end {
				check(t, end)
			}
		}
	}
	return vs
}
