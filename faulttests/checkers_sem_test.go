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

// CheckSem runs the semaphore checks.
func CheckSem(h *History) []Violation {
	h.mu.Lock()
	defer h.mu.Unlock()
	vs := CheckSemCapacity(h)
	vs = append(vs, CheckSemOrder(h)...)
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].At < vs[j].At })
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
		if !bad {
			by[c.Lock] = append(by[c.Lock], granted{c, js[0], tokens[c.ID]})
		}
	}
	var vs []Violation
	for name, gs := range by {
		sort.Slice(gs, func(i, j int) bool { return gs[i].j.End < gs[j].j.End })
		for i, a := range gs {
			for _, b := range gs[i+1:] {
				if a.j.End < b.j.Start && b.token < a.token {
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
