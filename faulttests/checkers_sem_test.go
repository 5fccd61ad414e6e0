package faulttests

import (
	"fmt"
	"sort"
	"time"
)

// The semaphore kinds (package semaphore): a name's windows are holds of
// Window.Permits permits each, out of a pool of History.Pools[name].
const (
	SemFair      LockKind = "semaphore/fair"
	SemExpirable LockKind = "semaphore/expirable"
)

// Semaphore reports whether the name is a semaphore's.
func (k LockKind) Semaphore() bool { return k == SemFair || k == SemExpirable }

// CheckSem runs the semaphore checks (Check runs them too).
func CheckSem(h *History) []Violation {
	h.mu.Lock()
	defer h.mu.Unlock()
	vs := checkSem(h)
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].At < vs[j].At })
	return vs
}

// checkSem is CheckSem with h locked: checks (a)-(d) of issue 21.
func checkSem(h *History) []Violation {
	vs := CheckSemCapacity(h)
	vs = append(vs, CheckSemOrder(h)...)
	vs = append(vs, CheckSemLiveness(h)...)
	vs = append(vs, CheckSemDeadHolders(h)...)
	return vs
}

// CheckSemCapacity, check (a) of issue 21: at no instant do the
// believed-valid windows of a semaphore's holds add up to more permits than
// its pool, except across a loss event (a data-losing fault, a forced
// release): a window that began before it and ended within its lease after
// it does not count against one that began after it. A window counts from
// its start (the acquisition's return) to its end (Window.End, less the
// tolerance of an end seen only through Done).
func CheckSemCapacity(h *History) []Violation {
	var vs []Violation
	by := map[string][]*Window{}
	for _, w := range h.Windows {
		if h.Locks[w.Lock].Semaphore() {
			by[w.Lock] = append(by[w.Lock], w)
		}
	}
	calls := map[int]*Call{}
	for _, c := range h.Calls {
		calls[c.ID] = c
	}
	for name, ws := range by {
		pool := h.Pools[name]
		sort.Slice(ws, func(i, j int) bool { return ws[i].Start < ws[j].Start })
		es := lossEvents(h, name)
		for i, b := range ws {
			// the windows still open when b starts; only a start can
			// raise the sum, so checking at every start covers every
			// instant
			sum := b.Permits
			var open []*Window
			for _, a := range ws[:i] {
				ae, _ := a.End()
				if b.Start < ae-a.tolerance() {
					if ok, _ := excusedEither(calls, a, b, es); ok {
						continue
					}
					if a.Owner == b.Owner {
						vs = append(vs, Violation{"sem-capacity", name, b.Start, fmt.Sprintf("one acquisition has two windows at once: %s / %s", a, b)})
						continue
					}
					sum += a.Permits
					open = append(open, a)
				}
			}
			if sum > pool {
				msg := fmt.Sprintf("%d permits of a pool of %d believed held at once: %s", sum, pool, b)
				for _, a := range open {
					msg += " AND " + a.String()
				}
				vs = append(vs, Violation{"sem-capacity", name, b.Start, msg})
			}
		}
	}
	return vs
}

// CheckSemOrder, check (b) of issue 21, on a fair semaphore: among
// acquisitions that waited in the queue and were granted, with no fault on
// their client and no order-breaking server fault during their wait, one
// that joined the queue before another joined (its join's reply came back
// before the other's join was sent) was granted first. Grant order is read
// from the fencing tokens, which the server draws in grant order (strictly
// increasing per semaphore), not from the replies' arrival, since with
// several permits two grants can be replied in either order. The weights do
// not change the statement: a head that does not fit blocks the ones
// behind it (semaphore.Weighted's rule), so grants follow arrival order.
func CheckSemOrder(h *History) []Violation {
	ix := newIndex(h)
	tokens := map[int]int64{}
	for _, w := range h.Windows {
		if w.Token > 0 {
			tokens[w.CallID] = w.Token
		}
	}
	type granted struct {
		c     *Call
		j     Join
		token int64
	}
	by := map[string][]granted{}
	for _, c := range h.Calls {
		if h.Locks[c.Lock] != SemFair || !c.Wait || !c.Acquired || c.End == Never || tokens[c.ID] == 0 {
			continue
		}
		js := ix.joinsOf(c)
		if len(js) == 0 || ix.faultedDuring(c.Client, c.Start, c.End) {
			continue
		}
		bad := false
		for _, f := range h.Faults {
			if f.Kind.breaksOrder() && overlaps(f.Start, f.End, js[0].Start, c.End) {
				bad = true
			}
		}
		if !bad && !ix.resumesLostPlace(h, c) {
			by[c.Lock] = append(by[c.Lock], granted{c, js[0], tokens[c.ID]})
		}
	}
	// tokens drawn on either side of a data-losing event are not
	// comparable: the counter may have been lost with the rest (a restart
	// without persistence starts it again at 1)
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
	for name, gs := range by {
		sort.Slice(gs, func(i, j int) bool { return gs[i].j.End < gs[j].j.End })
		for i, a := range gs {
			for _, b := range gs[i+1:] {
				if a.j.End < b.j.Start && b.token < a.token && !across(a.j.Start, max(a.c.End, b.c.End)) {
					vs = append(vs, Violation{"sem-order", name, b.c.End, fmt.Sprintf(
						"%s joined the queue at %s, before %s joined at %s, but was granted after it (tokens %d vs %d)",
						short(a.c.Owner), ts(a.j.End), short(b.c.Owner), ts(b.j.Start), a.token, b.token)})
				}
			}
		}
	}
	return vs
}

// semWin is a hand-made semaphore window (for the checkers' own tests).
func semWin(owner string, client int, start, unlockAt time.Duration, permits int) *Window {
	w := win(owner, client, start, unlockAt)
	w.Lock, w.Permits = "S", permits
	return w
}

// CheckSemLiveness, check (c) of issue 21, on a fair semaphore: a live
// waiter (no fault on its own client during its wait, not dead or closed)
// that could be granted (its ask fits in the pool less the permits of the
// believed-valid windows open, and nobody that joined the queue before it,
// or not provably after it, is still in its call) is granted within
// semLiveBound of the faults that fired. A waiter ahead of it counts
// whether its client is faulty or not (a live head that does not fit
// blocks it, semaphore.Weighted's rule); only waiters of dead or closed
// clients, and holds and late acquisitions of faulty ones, are paid for in
// the bound. The expirable semaphore is left out: it is not fair (a waiter
// for 2 may starve behind 1-permit waiters, as in Redisson).
func CheckSemLiveness(h *History) []Violation {
	ix := newIndex(h)
	var vs []Violation
	windows := map[string][]*Window{}
	for _, w := range h.Windows {
		if h.Locks[w.Lock] == SemFair {
			windows[w.Lock] = append(windows[w.Lock], w)
		}
	}
	waits := map[string][]*Call{}
	for _, c := range h.Calls {
		if h.Locks[c.Lock] == SemFair && c.Wait && c.Permits > 0 {
			waits[c.Lock] = append(waits[c.Lock], c)
		}
	}
	for name, ws := range waits {
		pool := h.Pools[name]
		for _, w := range ws {
			end := min(w.End, ix.clip(w.Client))
			if end <= w.Start || w.Permits > pool {
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
			// w's arrival: its join's reply (its call's start if it never
			// joined: granted at once, or refused)
			arrived := w.Start
			if js := ix.joinsOf(w); len(js) > 0 {
				arrived = js[0].End
			}
			type ev struct {
				t           time.Duration
				used, ahead int
				faulty      int // +/- the ask of a faulty waiter ahead
			}
			var evs []ev
			for _, x := range windows[name] {
				xe, _ := x.End()
				if xe > w.Start && x.Start < end {
					evs = append(evs, ev{x.Start, x.Permits, 0, 0}, ev{xe, -x.Permits, 0, 0})
				}
			}
			for _, o := range ws {
				if o == w {
					continue
				}
				js := ix.joinsOf(o)
				if len(js) == 0 || js[0].Start >= arrived {
					continue // never queued, or joined after w
				}
				oe := min(o.End, ix.clip(o.Client))
				if oe <= w.Start || js[0].Start >= end {
					continue
				}
				if ix.faultedDuring(o.Client, js[0].Start, oe) {
					// A faulty waiter ahead blocks w, by Weighted's
					// rule, while its own ask does not fit; once it
					// fits, it is granted or, its client unable to
					// take the grant, pruned by the head graces: that
					// delay is paid for in the bound (a faulty other
					// client), not a reason to stop checking w.
					evs = append(evs, ev{js[0].Start, 0, 0, o.Permits}, ev{oe, 0, 0, -o.Permits})
					continue
				}
				evs = append(evs, ev{js[0].Start, 0, 1, 0}, ev{oe, 0, -1, 0})
			}
			sort.SliceStable(evs, func(i, j int) bool { return evs[i].t < evs[j].t })
			check := func(a, b time.Duration) {
				if b <= a {
					return
				}
				from := a - maxLease() - HeadGrace
				others := map[int]bool{}
				for _, c := range ix.calls[name] {
					if c.Client == w.Client || others[c.Client] {
						continue
					}
					if overlaps(c.Start, c.End, from, b) && ix.faultedDuring(c.Client, from, b) || c.Start < b && ix.clip(c.Client) < b {
						others[c.Client] = true
					}
				}
				for _, x := range windows[name] {
					xe, _ := x.End()
					if x.Client != w.Client && overlaps(x.Start, xe, from, b) && ix.faultedDuring(x.Client, from, b) {
						others[x.Client] = true
					}
				}
				var global []Fault
				for _, f := range h.Faults {
					if f.Kind.global() && overlaps(f.Start, f.End, from, b) {
						global = append(global, f)
					}
				}
				bound := semLiveBound(len(others), global)
				if b-a > bound {
					vs = append(vs, Violation{"sem-liveness", name, a + bound, fmt.Sprintf(
						"waiter %s (call #%d, %d permits of %d) could be granted, with nobody ahead of it, from %s to %s (%v), over the bound %v (%d faulty other clients, %d server faults)",
						short(w.Owner), w.ID, w.Permits, pool, ts(a), ts(b), (b - a).Round(time.Millisecond), bound, len(others), len(global))})
				}
			}
			// sweep [w.Start, end): eligible while the ask fits and
			// nobody ahead waits
			used, ahead := 0, 0
			faulty := map[int]int{} // asks of faulty waiters ahead -> how many
			apply := func(e ev) {
				used, ahead = used+e.used, ahead+e.ahead
				switch {
				case e.faulty > 0:
					faulty[e.faulty]++
				case e.faulty < 0:
					if faulty[-e.faulty]--; faulty[-e.faulty] == 0 {
						delete(faulty, -e.faulty)
					}
				}
			}
			i := 0
			for ; i < len(evs) && evs[i].t <= w.Start; i++ {
				apply(evs[i])
			}
			eligible := func() bool {
				if ahead > 0 || pool-used < w.Permits {
					return false
				}
				for ask := range faulty {
					if pool-used < ask {
						return false
					}
				}
				return true
			}
			since := time.Duration(-1)
			if eligible() {
				since = w.Start
			}
			for ; i < len(evs) && evs[i].t < end; i++ {
				apply(evs[i])
				if i+1 < len(evs) && evs[i+1].t == evs[i].t {
					continue // apply every event of one instant first
				}
				switch ok := eligible(); {
				case ok && since < 0:
					since = evs[i].t
				case !ok && since >= 0:
					check(since, evs[i].t)
					since = -1
				}
			}
			if since >= 0 {
				check(since, end)
			}
		}
	}
	return vs
}

// CheckSemDeadHolders, check (d) of issue 21: a hold whose client died
// (its network cut for ever while it held, or while its fair acquisition
// was in flight) has its permits back within its lease of the death plus
// DeadSlack, on the server's clock: the lease end that the probe read
// (SemProbe, a lease after the death) is at most the server's clock at the
// death (the probe's server clock less the time since the death) + lease +
// DeadSlack. A probe that could not read is no evidence and is left out
// (Summary counts them).
//
// One exception, by design: a fair acquisition queued when its client died
// stays queued (the client cannot leave), and a release may grant it the
// permits directly once it is the head (sem_fair_release.lua's handoff),
// for min(its lease, two head graces), a grant nobody claims. Such a hold
// began after the death, and it is the last: the grantee left the queue.
// So a later lease end is accepted when that hold began after the death
// and is no longer than a grant (lease end - the grant's length >= the
// death, and at most a grant's length left at the read), and the probe's
// second read, DeadSlack after that lease end, finds the permits given
// back (the grant was neither renewed nor made again).
func CheckSemDeadHolders(h *History) []Violation {
	var vs []Violation
	grant := func(p SemProbe) int64 { return min(p.Lease, 2*HeadGrace).Milliseconds() }
	for _, p := range h.Probes {
		if p.Err != "" || p.LeaseEnd < 0 {
			continue
		}
		died := p.ServerNow - (p.At - p.Died).Milliseconds()
		if p.LeaseEnd-grant(p) >= died && p.LeaseEnd-p.ServerNow <= grant(p) &&
			p.AgainNow != 0 && (p.Again < 0 || p.Again <= p.AgainNow) {
			continue // a direct grant after the death, over and not renewed
		}
		if lim := died + (p.Lease + DeadSlack).Milliseconds(); p.LeaseEnd > lim {
			check := "sem-dead-holder"
			if h.Locks[p.Lock] == SeatsVenue {
				check = "seats-dead-holder" // the seats' check, the same rule
			}
			vs = append(vs, Violation{check, p.Lock, p.Died + p.Lease + DeadSlack, fmt.Sprintf(
				"the permits of %s (client c%d died at %s) are held until %d ms after the death on the server's clock, over its lease %v + %v: %s",
				short(p.Owner), p.Client, ts(p.Died), p.LeaseEnd-died, p.Lease, DeadSlack, p)})
		}
	}
	return vs
}
