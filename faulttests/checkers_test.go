package faulttests

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Check runs every history checker and returns the violations, earliest
// first.
func Check(h *History) []Violation {
	h.mu.Lock()
	defer h.mu.Unlock()
	var vs []Violation
	vs = append(vs, h.Problems...)
	vs = append(vs, CheckExclusion(h)...)
	vs = append(vs, CheckOrder(h)...)
	vs = append(vs, CheckLiveness(h)...)
	vs = append(vs, CheckCalls(h)...)
	vs = append(vs, CheckClose(h)...)
	vs = append(vs, CheckResource(h)...)
	vs = append(vs, CheckPositions(h)...)
	vs = append(vs, checkSem(h)...)
	vs = append(vs, checkSeats(h)...)
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].At < vs[j].At })
	return vs
}

// lossEvent is a moment after which two owners of a lock may both believe
// they hold it: a data-losing fault, or a ForceUnlock that deleted it.
type lossEvent struct {
	start, end time.Duration
	what       string
}

func lossEvents(h *History, lock string) []lossEvent {
	var es []lossEvent
	for _, f := range h.Faults {
		if f.Kind.dataLoss() {
			es = append(es, lossEvent{f.Start, f.End, string(f.Kind)})
		}
	}
	for _, c := range h.Calls {
		if c.Lock == lock && strings.HasPrefix(c.Op, "ForceUnlock") && (c.Acquired || c.Err != "") {
			// a ForceUnlock whose reply was lost may have deleted it too
			es = append(es, lossEvent{c.Start, c.End, fmt.Sprintf("ForceUnlock #%d", c.ID)})
		}
	}
	return es
}

// excused reports whether the overlap of old (began first) and new is
// allowed: a loss event came between their starts and the old window ended
// within its lease of the event. The old hold counts from the start of the
// call that took it (oldFrom): its acquisition may have run in Redis before
// a ForceUnlock whose deletion its reply, arriving later, could not report
// (ForceUnlock's documented rule: the holder learns of it within its
// lease). Every event between the starts is tried: an early one the old
// window outlived does not hide a later one that excuses it.
func excused(old, nw *Window, oldFrom time.Duration, es []lossEvent) (bool, string) {
	oe, _ := old.End()
	why := ""
	for _, e := range es {
		if min(old.Start, oldFrom) < e.end && nw.Start > e.start {
			if e.end != Never && oe <= e.end+old.Lease+old.tolerance() {
				return true, ""
			}
			if why == "" {
				why = fmt.Sprintf("; after %s at %s the old holder's window should have ended within its lease %v, by %s", e.what, ts(e.start), old.Lease, ts(e.end+old.Lease))
			}
		}
	}
	return false, why
}

// excusedEither: the overlap of a (began first) and b is excused with
// either as the older hold, each counted from the start of the call that
// took it: a ForceUnlock while both calls were in flight may have deleted
// either's hold, whichever reply came back first.
func excusedEither(calls map[int]*Call, a, b *Window, es []lossEvent) (bool, string) {
	from := func(w *Window) time.Duration {
		if c := calls[w.CallID]; c != nil {
			return c.Start
		}
		return w.Start
	}
	ok, why := excused(a, b, from(a), es)
	if !ok {
		if ok2, _ := excused(b, a, from(b), es); ok2 {
			return true, ""
		}
	}
	return ok, why
}

// CheckExclusion: no two owners' believed-valid windows on one lock
// overlap, except across a loss event, and then the old window ends within
// its lease after the event.
func CheckExclusion(h *History) []Violation {
	var vs []Violation
	by := map[string][]*Window{}
	for _, w := range h.Windows {
		if !h.Locks[w.Lock].Semaphore() { // CheckSemCapacity's
			by[w.Lock] = append(by[w.Lock], w)
		}
	}
	calls := map[int]*Call{}
	for _, c := range h.Calls {
		calls[c.ID] = c
	}
	for lock, ws := range by {
		sort.Slice(ws, func(i, j int) bool { return ws[i].Start < ws[j].Start })
		es := lossEvents(h, lock)
		for i, a := range ws {
			ae, _ := a.End()
			for _, b := range ws[i+1:] {
				if b.Start >= ae {
					continue
				}
				if a.Owner == b.Owner {
					vs = append(vs, Violation{"exclusion", lock, b.Start, fmt.Sprintf("one handle has two windows at once: %s / %s", a, b)})
					continue
				}
				// a began first; its end may have been seen late
				// (tolerance); b began inside it.
				if b.Start >= ae-a.tolerance() {
					continue
				}
				be, _ := b.End()
				overlap := min(ae, be) - b.Start
				ok, why := excusedEither(calls, a, b, es)
				if ok {
					continue
				}
				vs = append(vs, Violation{"exclusion", lock, b.Start, fmt.Sprintf(
					"two owners believe they hold the lock for %v: %s AND %s%s", overlap.Round(time.Millisecond), a, b, why)})
			}
		}
	}
	return vs
}

// index groups a history's records for the checkers: built once per
// check, so a long soak's history is checked in near-linear time.
type index struct {
	faults map[int][]Fault    // per-client faults of each client, its close and death included
	joins  map[string][]Join  // "queued" replies by owner, in time order
	calls  map[string][]*Call // calls by lock
	clips  map[int]time.Duration
}

func newIndex(h *History) *index {
	ix := &index{faults: map[int][]Fault{}, joins: map[string][]Join{}, calls: map[string][]*Call{}, clips: map[int]time.Duration{}}
	for _, f := range h.Faults {
		if f.Client >= 0 {
			ix.faults[f.Client] = append(ix.faults[f.Client], f)
		}
		if f.Kind == FDead {
			ix.clip(f.Client)
			ix.clips[f.Client] = min(ix.clips[f.Client], f.Start)
		}
	}
	for _, cl := range h.Closes {
		ix.faults[cl.Client] = append(ix.faults[cl.Client], Fault{Kind: FClose, Client: cl.Client, Start: cl.Start, End: Never})
		ix.clip(cl.Client)
		ix.clips[cl.Client] = min(ix.clips[cl.Client], cl.Start)
	}
	for _, j := range h.Joins {
		ix.joins[j.Owner] = append(ix.joins[j.Owner], j)
	}
	for _, js := range ix.joins {
		sort.Slice(js, func(a, b int) bool { return js[a].Start < js[b].Start })
	}
	for _, c := range h.Calls {
		ix.calls[c.Lock] = append(ix.calls[c.Lock], c)
	}
	return ix
}

// resumesLostPlace reports that call c may have found its owner already
// queued: an earlier call of the owner on the lock queued and ended without
// the lock (its give-up ran) during a failover, or less than 2 s before one
// began, so the give-up may have been lost with the failover and the
// owner's entry come back (docs/design.md, "failover with replication
// lag"). Then c, started after the failover began, resumes that place,
// ahead of the waiters that joined after the give-up.
func (ix *index) resumesLostPlace(h *History, c *Call) bool {
	for _, p := range ix.calls[c.Lock] {
		if p == c || p.Owner != c.Owner || !p.Wait || p.Acquired || p.End == Never || p.End > c.Start || len(ix.joinsOf(p)) == 0 {
			continue
		}
		for _, f := range h.Faults {
			if f.Kind == FFailover && f.Start-2*time.Second <= p.End && (f.End == Never || p.End <= f.End) && f.Start <= c.Start {
				return true
			}
		}
	}
	return false
}

func overlaps(aStart, aEnd, bStart, bEnd time.Duration) bool {
	return aStart <= bEnd && bStart <= aEnd
}

// faultedDuring reports whether client c had a fault overlapping [from, to].
func (ix *index) faultedDuring(c int, from, to time.Duration) bool {
	for _, f := range ix.faults[c] {
		if overlaps(f.Start, f.End, from, to) {
			return true
		}
	}
	return false
}

// joinsOf lists the "queued" replies of an acquisition call's attempts;
// the first is its join.
func (ix *index) joinsOf(c *Call) []Join {
	js := ix.joins[c.Owner]
	i := sort.Search(len(js), func(i int) bool { return js[i].Start >= c.Start })
	var out []Join
	for ; i < len(js) && js[i].End <= c.End; i++ {
		if js[i].Lock == c.Lock {
			out = append(out, js[i])
		}
	}
	return out
}

// clip is when client c stopped being able to keep promises (died or was
// closed), Never if it did not.
func (ix *index) clip(c int) time.Duration {
	t, ok := ix.clips[c]
	if !ok {
		ix.clips[c] = Never
		return Never
	}
	return t
}

// blindForceUnlocks lists, per lock, the ForceUnlocks that deleted a hold
// (or may have: their reply was lost) while no returned hold was open: the
// hold was an acquisition still in its call (taken in Redis, its replica
// acknowledgement not yet in). That call finds its hold gone and queues
// again, at the tail: its place was taken away, not skipped.
func blindForceUnlocks(h *History) map[string][]*Call {
	out := map[string][]*Call{}
	for _, c := range h.Calls {
		if !strings.HasPrefix(c.Op, "ForceUnlock") || (!c.Acquired && c.Err == "") {
			continue
		}
		covered := false
		for _, w := range h.Windows {
			if e, _ := w.End(); w.Lock == c.Lock && w.Start <= c.Start && e >= c.End {
				covered = true
				break
			}
		}
		if !covered {
			out[c.Lock] = append(out[c.Lock], c)
		}
	}
	return out
}

// CheckOrder: on a fair lock, for two waiters A and B that both queued
// in their acquisition call and were granted in it, whose join script
// calls did not overlap (A's returned before B's was sent), whose clients
// had no fault during the wait and with no order-breaking server fault
// meanwhile, A is granted before B. A waiter whose wait saw a ForceUnlock
// of a hold nobody had been granted yet (blindForceUnlocks) is left out:
// the deleted hold may have been its own.
func CheckOrder(h *History) []Violation {
	ix := newIndex(h)
	blind := blindForceUnlocks(h)
	type granted struct {
		c *Call
		j Join
	}
	by := map[string][]granted{}
	for _, c := range h.Calls {
		if !h.Locks[c.Lock].Fair() || !c.Wait || c.Reentry || !c.Acquired || c.End == Never {
			continue
		}
		js := ix.joinsOf(c)
		if len(js) == 0 { // taken at once, never queued
			continue
		}
		if ix.faultedDuring(c.Client, c.Start, c.End) {
			continue
		}
		bad := false
		for _, f := range h.Faults {
			if f.Kind.breaksOrder() && overlaps(f.Start, f.End, js[0].Start, c.End) {
				bad = true
			}
		}
		for _, fu := range blind[c.Lock] {
			if fu.End > js[0].End && fu.Start < c.End {
				bad = true
			}
		}
		if !bad && ix.resumesLostPlace(h, c) {
			bad = true
		}
		if !bad {
			by[c.Lock] = append(by[c.Lock], granted{c, js[0]})
		}
	}
	var vs []Violation
	for lock, gs := range by {
		sort.Slice(gs, func(i, j int) bool { return gs[i].j.End < gs[j].j.End })
		for i, a := range gs {
			for _, b := range gs[i+1:] {
				if a.j.End < b.j.Start && b.c.End < a.c.End {
					vs = append(vs, Violation{"order", lock, b.c.End, fmt.Sprintf(
						"%s joined the queue at %s, before %s joined at %s, but was granted after it (%s vs %s)",
						short(a.c.Owner), ts(a.j.End), short(b.c.Owner), ts(b.j.Start), ts(a.c.End), ts(b.c.End))})
				}
			}
		}
	}
	return vs
}

// CheckLiveness: a live waiter (no fault on its own client during its wait)
// that sees the lock free, with no earlier live waiter of a fair lock still
// waiting, is granted within liveBound of the faults that fired.
func CheckLiveness(h *History) []Violation {
	ix := newIndex(h)
	var vs []Violation
	windows := map[string][]*Window{}
	for _, w := range h.Windows {
		windows[w.Lock] = append(windows[w.Lock], w)
	}
	waits := map[string][]*Call{}
	for _, c := range h.Calls {
		if c.Wait && !c.Reentry && !h.Locks[c.Lock].Semaphore() && h.Locks[c.Lock] != SeatsVenue { // CheckSemLiveness's, CheckSeatsLiveness's
			waits[c.Lock] = append(waits[c.Lock], c)
		}
	}
	for lock, ws := range waits {
		fair := h.Locks[lock].Fair()
		for _, w := range ws {
			end := min(w.End, ix.clip(w.Client))
			if end <= w.Start {
				continue
			}
			// own faults before the clip exclude the waiter
			own := false
			for _, f := range ix.faults[w.Client] {
				if (f.Kind != FDead && f.Kind != FClose) && overlaps(f.Start, f.End, w.Start, end) {
					own = true
				}
			}
			if own {
				continue
			}
			// busy: intervals within [w.Start, end] where w is not
			// eligible (a window open, or an earlier live waiter waits).
			type iv struct{ a, b time.Duration }
			var busy []iv
			for _, x := range windows[lock] {
				if xe, _ := x.End(); xe > w.Start && x.Start < end {
					busy = append(busy, iv{x.Start, xe})
				}
			}
			if fair {
				for _, o := range ws {
					if o == w || o.Start >= w.Start || o.Client == w.Client && o.Owner == w.Owner {
						continue
					}
					oe := min(o.End, ix.clip(o.Client))
					if oe <= w.Start || ix.faultedDuring(o.Client, o.Start, oe) {
						continue // a faulty waiter ahead is paid for in the bound
					}
					busy = append(busy, iv{o.Start, oe})
				}
			}
			sort.Slice(busy, func(i, j int) bool { return busy[i].a < busy[j].a })
			// walk the free stretches of [w.Start, end]
			t := w.Start
			check := func(a, b time.Duration) {
				if b <= a {
					return
				}
				from := a - maxLease() - HeadGrace
				others := map[int]bool{}
				for _, c := range ix.calls[lock] {
					if c.Client == w.Client || others[c.Client] {
						continue
					}
					if overlaps(c.Start, c.End, from, b) && ix.faultedDuring(c.Client, from, b) || c.Start < b && ix.clip(c.Client) < b {
						others[c.Client] = true
					}
				}
				for _, x := range windows[lock] {
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
				bound := liveBound(len(others), global)
				if b-a > bound {
					vs = append(vs, Violation{"liveness", lock, a + bound, fmt.Sprintf(
						"waiter %s (call #%d) saw the lock free with nobody live ahead of it from %s to %s (%v), over the bound %v (%d faulty other clients, %d server faults)",
						short(w.Owner), w.ID, ts(a), ts(b), (b - a).Round(time.Millisecond), bound, len(others), len(global))})
				}
			}
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

// CheckCalls: every call returned, within its ctx's end + CleanupTime +
// CallSlack; every Close within CloseBound.
func CheckCalls(h *History) []Violation {
	var vs []Violation
	for _, c := range h.Calls {
		if c.End == Never {
			vs = append(vs, Violation{"deadline", c.Lock, c.Start, "call never returned: " + c.String()})
			continue
		}
		if c.CtxEnd == Never {
			continue
		}
		if took, b := c.End-c.Start, callBound(c.CtxEnd); took > b {
			vs = append(vs, Violation{"deadline", c.Lock, c.Start + b, fmt.Sprintf(
				"call took %v, over its ctx end %v + cleanup %v + slack %v: %s", took.Round(time.Millisecond), c.CtxEnd.Round(time.Millisecond), CleanupTime, CallSlack, c)})
		}
	}
	for _, cl := range h.Closes {
		if cl.End-cl.Start > CloseBound {
			vs = append(vs, Violation{"deadline", "", cl.Start + CloseBound, fmt.Sprintf("c%d Close took %v (bound %v)", cl.Client, (cl.End - cl.Start).Round(time.Millisecond), CloseBound)})
		}
	}
	return vs
}

// CheckClose: when Client.Close returns, every hold of the client has
// ended with an error matching ErrClosed, and every waiting call that was
// in progress has returned ErrClosed (recorded within DoneTolerance).
func CheckClose(h *History) []Violation {
	var vs []Violation
	for _, cl := range h.Closes {
		lim := cl.End + DoneTolerance
		for _, w := range h.Windows {
			if w.Client != cl.Client || w.Start > cl.End {
				continue
			}
			if w.UnlockAt < cl.End { // released (or being released) by its holder
				continue
			}
			if w.DoneAt < cl.Start { // ended before Close
				continue
			}
			lostBefore := w.DoneAt < cl.Start+DoneTolerance && strings.Contains(w.DoneErr, "lost")
			if st, ok := cl.Handles[w.Owner]; ok { // seen right after Close returned
				switch {
				case !st.DoneClosed:
					vs = append(vs, Violation{"close", w.Lock, cl.End, fmt.Sprintf("c%d's Close returned at %s but Done was not closed: %s", cl.Client, ts(cl.End), w)})
				case !st.ErrClosed && !lostBefore:
					vs = append(vs, Violation{"close", w.Lock, cl.End, fmt.Sprintf("c%d's Close ended a hold whose Err (%s) does not match ErrClosed: %s", cl.Client, st.Err, w)})
				}
				continue
			}
			switch {
			case w.DoneAt > lim:
				vs = append(vs, Violation{"close", w.Lock, lim, fmt.Sprintf("c%d's Close returned at %s but Done was not closed (seen at %s): %s", cl.Client, ts(cl.End), ts(w.DoneAt), w)})
			case !w.DoneClosed && !lostBefore:
				vs = append(vs, Violation{"close", w.Lock, w.DoneAt, fmt.Sprintf("c%d's Close ended a hold whose Err does not match ErrClosed: %s", cl.Client, w)})
			}
		}
		wlim := cl.End + CloseTolerance
		for _, c := range h.Calls {
			if c.Client != cl.Client || !c.Wait || c.Start > cl.Start || c.End < cl.Start {
				continue
			}
			switch {
			case c.End > wlim:
				vs = append(vs, Violation{"close", c.Lock, wlim, fmt.Sprintf("c%d's Close returned at %s but a waiting call was still in progress (returned %s): %s", cl.Client, ts(cl.End), ts(c.End), c)})
			case !c.Closed && !c.Acquired && c.End > cl.Start+DoneTolerance:
				vs = append(vs, Violation{"close", c.Lock, c.End, fmt.Sprintf("a wait ended by Close did not return ErrClosed: %s", c)})
			}
		}
	}
	return vs
}

// counterModel is the protected resource as porcupine sees it: a counter
// that each critical section reads and, if it still believed it held the
// lock, sets to value+1. A value read is never below the counter (values
// may jump forward where a section is left out of the history, see
// CheckResource); two sections that read the same value and both wrote are
// the lost update that a broken lock causes.
var counterModel = porcupine.Model{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, o := range ops {
			l := o.Metadata.(string)
			if _, ok := by[l]; !ok {
				keys = append(keys, l)
			}
			by[l] = append(by[l], o)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return 0 },
	Step: func(state, input, output any) (bool, any) {
		s, wrote, v := state.(int), input.(bool), output.(int)
		if v < s {
			return false, s
		}
		if wrote {
			return true, v + 1
		}
		return true, s
	},
	DescribeOperation: func(input, output any) string {
		if input.(bool) {
			return fmt.Sprintf("read %d, wrote %d", output, output.(int)+1)
		}
		return fmt.Sprintf("read %d", output)
	},
}

// CheckResource checks with porcupine that the resource's history is
// linearizable: each critical section is one operation from its read to its
// write. Sections of windows excused by a loss event are left out.
func CheckResource(h *History) []Violation {
	skip := func(o ResourceOp) bool {
		for _, e := range lossEvents(h, o.Lock) {
			end := o.Write
			if !o.Wrote {
				end = o.Read
			}
			if o.Read < e.end+maxLease() && end > e.start {
				return true // overlapped a loss event's exception
			}
		}
		return false
	}
	var ops []porcupine.Operation
	for _, o := range h.Ops {
		if skip(o) {
			continue
		}
		ret := o.Read
		if o.Wrote {
			ret = o.Write
		}
		ops = append(ops, porcupine.Operation{ClientId: o.Client, Input: o.Wrote, Call: int64(o.Read), Output: o.Value, Return: int64(ret), Metadata: o.Lock})
	}
	if len(ops) == 0 {
		return nil
	}
	if porcupine.CheckOperationsTimeout(counterModel, ops, 30*time.Second) != porcupine.Illegal {
		return nil
	}
	// name the lock(s) and the first duplicate read
	var vs []Violation
	seen := map[string]map[int]ResourceOp{}
	for _, o := range h.Ops {
		if !o.Wrote || skip(o) {
			continue
		}
		if seen[o.Lock] == nil {
			seen[o.Lock] = map[int]ResourceOp{}
		}
		if p, ok := seen[o.Lock][o.Value]; ok {
			vs = append(vs, Violation{"resource", o.Lock, max(o.Read, p.Read), fmt.Sprintf(
				"lost update: %s (read at %s) and %s (read at %s) both read %d and wrote %d (porcupine: not linearizable)",
				short(p.Owner), ts(p.Read), short(o.Owner), ts(o.Read), o.Value, o.Value+1)})
		}
		seen[o.Lock][o.Value] = o
	}
	if len(vs) == 0 {
		vs = append(vs, Violation{"resource", "", 0, "porcupine: the resource history is not linearizable"})
	}
	return vs
}
