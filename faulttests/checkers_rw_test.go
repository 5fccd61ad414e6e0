package faulttests

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// RWLock is the kind of a read-write lock name (package rwlock): its
// windows are read holds (owner "<uuid>:<tid>") and write holds (owner
// "<uuid>:<tid>:write").
const RWLock LockKind = "rwlock"

// rwBase is the owner a read or write hold belongs to: "<uuid>:<tid>".
func rwBase(owner string) string { return strings.TrimSuffix(owner, ":write") }

func rwWriter(owner string) bool { return strings.HasSuffix(owner, ":write") }

// CheckRW: on a read-write lock, no writer's believed-valid window overlaps
// another owner's window, read or write (readers may overlap each other,
// and a writer its own owner's reads), except across a loss event (then the
// old window ends within its lease of it); and no half has two windows at
// once.
func CheckRW(h *History) []Violation {
	var vs []Violation
	by := map[string][]*Window{}
	for _, w := range h.Windows {
		if h.Locks[w.Lock] == RWLock {
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
					vs = append(vs, Violation{"rw-exclusion", lock, b.Start, fmt.Sprintf("one half has two windows at once: %s / %s", a, b)})
					continue
				}
				if rwBase(a.Owner) == rwBase(b.Owner) || !rwWriter(a.Owner) && !rwWriter(b.Owner) {
					continue // a writer's own reads, or readers sharing
				}
				if b.Start >= ae-a.tolerance() {
					continue
				}
				ok, why := rwExcused(calls, a, b, es)
				if ok {
					continue
				}
				be, _ := b.End()
				overlap := min(ae, be) - b.Start
				vs = append(vs, Violation{"rw-exclusion", lock, b.Start, fmt.Sprintf(
					"a writer overlaps another owner for %v: %s AND %s%s", overlap.Round(time.Millisecond), a, b, why)})
			}
		}
	}
	return vs
}

// rwExcused is the suite's excuse (excusedEither), each hold counted from
// the start of the call that took it.
func rwExcused(calls map[int]*Call, a, b *Window, es []lossEvent) (bool, string) {
	return excusedEither(calls, a, b, es)
}

// rwShared counts the pairs of read windows of different owners that
// overlapped: evidence that readers did share (so that CheckRW was not
// vacuous).
func rwShared(h *History) (shared, writes int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ws []*Window
	for _, w := range h.Windows {
		if h.Locks[w.Lock] == RWLock {
			ws = append(ws, w)
			if rwWriter(w.Owner) {
				writes++
			}
		}
	}
	for i, a := range ws {
		ae, _ := a.End()
		for _, b := range ws[i+1:] {
			be, _ := b.End()
			if a.Lock == b.Lock && !rwWriter(a.Owner) && !rwWriter(b.Owner) && rwBase(a.Owner) != rwBase(b.Owner) &&
				a.Start < be && b.Start < ae {
				shared++
			}
		}
	}
	return shared, writes
}

// CheckRWRun is Check for a run on read-write locks: the recorded problems,
// CheckRW in place of CheckExclusion, and the call bounds and Close checks.
// (The FIFO order, liveness and counter checks assume an exclusive lock.)
func CheckRWRun(h *History) []Violation {
	h.mu.Lock()
	defer h.mu.Unlock()
	var vs []Violation
	vs = append(vs, h.Problems...)
	vs = append(vs, CheckRW(h)...)
	vs = append(vs, CheckCalls(h)...)
	vs = append(vs, CheckClose(h)...)
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].At < vs[j].At })
	return vs
}
