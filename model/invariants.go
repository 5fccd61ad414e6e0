package model

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// CheckInvariants checks what must hold of a lock's state at any moment:
//
//   - at most one owner is in the hash;
//   - every hold count is at least 1;
//   - the queue and the deadlines name the same waiters, and nobody is
//     queued twice.
//
// It returns nil or an error listing every violation.
func (l *Lock) CheckInvariants() error {
	var errs []error
	if len(l.Holds) > 1 {
		errs = append(errs, fmt.Errorf("%d owners hold the lock: %v", len(l.Holds), l.Holds))
	}
	for o, n := range l.Holds {
		if n < 1 {
			errs = append(errs, fmt.Errorf("owner %s has hold count %d", o, n))
		}
	}
	seen := map[string]bool{}
	for _, w := range l.Queue {
		if seen[w] {
			errs = append(errs, fmt.Errorf("waiter %s is queued twice: %v", w, l.Queue))
		}
		seen[w] = true
		if _, ok := l.Deadlines[w]; !ok {
			errs = append(errs, fmt.Errorf("waiter %s is queued without a deadline", w))
		}
	}
	for _, w := range slices.Sorted(maps.Keys(l.Deadlines)) {
		if !seen[w] {
			errs = append(errs, fmt.Errorf("waiter %s has a deadline but is not queued", w))
		}
	}
	return errors.Join(errs...)
}

// Op names the script a Step ran.
type Op string

// The operations, one per script.
const (
	OpAcquire           Op = "acquire"
	OpUnlock            Op = "unlock"
	OpForceUnlock       Op = "forceUnlock"
	OpRenew             Op = "renew"
	OpFairTryLock       Op = "fairTryLock"
	OpFairTryLockWait   Op = "fairTryLockWait"
	OpFairAcquireFailed Op = "fairAcquireFailed"
	OpFairUnlock        Op = "fairUnlock"
	OpFairForceUnlock   Op = "fairForceUnlock"
	OpTime              Op = "time" // no script: clocks moved, leases may have expired
)

// Step is one observed transition of a lock: its state before and after one
// operation, what the operation was and replied, and what it published. It
// is all the History needs, and can be built from the model or from dumps
// of a real Redis alike.
type Step struct {
	Op       Op
	Owner    string // the caller, for operations that have one
	Now      int64  // the caller's clock (fair operations)
	WaitMs   int64  // the caller's slot (fair operations)
	Acquired bool   // the reply said the caller holds the lock now

	Before, After *Lock
	Published     []Message // published during this step, in order
}

// History checks the properties that span steps, over a sequence of Steps
// of one lock fed to Observe in order:
//
//   - only the queue head is ever notified: a fair operation publishes at
//     most one message, on the channel of the waiter at the head of the
//     queue after the step, never on the lock channel;
//   - no waiter acquires while an earlier live waiter is queued: when the
//     lock is freshly taken, every waiter that was queued ahead of the
//     taker (all of them, when the taker was not queued) had a deadline at
//     or before the taker's now, and is gone;
//   - grants follow enqueue order: the queue is only ever appended to at
//     the tail and removed from (never reordered), and a waiter granted the
//     lock is the earliest-enqueued of those still queued once the dead
//     heads are pruned;
//   - deadlines are non-decreasing from head to tail, as long as every
//     waiter that gave up did so with the slot it queued with (a waiter
//     that leaves with another slot shifts the ones behind it by the wrong
//     amount; the check is suspended until the queue next empties).
//
// The zero value is ready to use.
type History struct {
	tickets    map[string]int64 // queued waiter -> enqueue sequence number
	next       int64
	slots      map[string]int64 // queued waiter -> the slot it queued with
	slotsBroke bool
}

// SlotsKept reports whether the deadline-order check is in force: no waiter
// now queued was shifted by a give-up with a slot other than the leaver's.
func (h *History) SlotsKept() bool { return !h.slotsBroke }

// Observe checks one step against the history so far and records it.
func (h *History) Observe(s Step) error {
	if h.tickets == nil {
		h.tickets = map[string]int64{}
		h.slots = map[string]int64{}
	}
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{s.Op}, args...)...))
	}
	before, after := s.Before, s.After
	names := after.Names()
	fair := strings.HasPrefix(string(s.Op), "fair")

	// Notifications.
	for _, m := range s.Published {
		switch {
		case m.Payload != UnlockMessage:
			add("published %q on %s", m.Payload, m.Channel)
		case s.Op == OpTime:
			add("published on %s without a script running", m.Channel)
		case !fair:
			// A reentrant release publishes on the lock channel, and also
			// wakes the head of a fair queue kept on the same name.
			if m.Channel != names.Channel && (len(after.Queue) == 0 || m.Channel != names.WaiterChannel(after.Queue[0])) {
				add("published on %s, not the lock channel %s nor the fair head's", m.Channel, names.Channel)
			}
		case len(after.Queue) == 0 || m.Channel != names.WaiterChannel(after.Queue[0]):
			add("notified %s, but the head is %v", m.Channel, headOf(after.Queue))
		}
	}
	if limit := 1 + boolInt(!fair && len(after.Queue) > 0); len(s.Published) > limit {
		add("published %d messages, more than %d", len(s.Published), limit)
	}

	fresh := s.Acquired && before.Holds[s.Owner] == 0
	// No acquisition past a live waiter.
	if fresh && fair {
		ahead := before.Queue
		if i := slices.Index(before.Queue, s.Owner); i >= 0 {
			ahead = before.Queue[:i]
		}
		for _, w := range ahead {
			if d, ok := before.Deadlines[w]; ok && d > s.Now {
				add("%s took the lock past live waiter %s (deadline %d > now %d)", s.Owner, w, d, s.Now)
			}
			if slices.Contains(after.Queue, w) {
				add("%s took the lock but %s, queued ahead of it, is still queued", s.Owner, w)
			}
		}
	}

	// The queue changes only by removals, and by the caller joining at the
	// tail. A caller that was pruned in the same step and queued again is
	// told apart from one that stayed queued by its new deadline.
	requeued := Requeued(s)
	var kept, removed []string
	for _, w := range before.Queue {
		if slices.Contains(after.Queue, w) && !(requeued && w == s.Owner) {
			kept = append(kept, w)
		} else {
			removed = append(removed, w)
		}
	}
	wantQueue := kept
	if requeued {
		wantQueue = append(slices.Clone(kept), s.Owner)
	}
	if !slices.Equal(after.Queue, wantQueue) {
		add("queue %v -> %v is not removals and an append of the caller at the tail", before.Queue, after.Queue)
	}

	// Removals: the acquirer is granted, the leaver gave up, the others
	// were pruned. A grant must go to the earliest enqueued waiter left.
	for _, w := range removed {
		if w == s.Owner && fresh {
			continue
		}
		if w == s.Owner && s.Op == OpFairAcquireFailed && h.slots[w] != s.WaitMs {
			h.slotsBroke = true
		}
		delete(h.tickets, w)
		delete(h.slots, w)
	}
	if _, queued := h.tickets[s.Owner]; queued && fresh {
		for w, t := range h.tickets {
			if w != s.Owner && t < h.tickets[s.Owner] {
				add("granted %s out of enqueue order: %s was enqueued earlier and is still queued", s.Owner, w)
			}
		}
		delete(h.tickets, s.Owner)
		delete(h.slots, s.Owner)
	}
	if requeued {
		h.tickets[s.Owner] = h.next
		h.next++
		h.slots[s.Owner] = s.WaitMs
	}
	if len(after.Queue) == 0 {
		h.slotsBroke = false
	}

	// Deadline order, among the waiters that have a deadline (a waiter
	// without one, whose score was deleted by hand, is a ghost that the next
	// prune removes once it is the head: hazard H1).
	if !h.slotsBroke {
		var prev string
		for _, w := range after.Queue {
			if _, ok := after.Deadlines[w]; !ok {
				continue
			}
			if prev != "" && after.Deadlines[prev] > after.Deadlines[w] {
				add("deadlines out of order: %s@%d ahead of %s@%d", prev, after.Deadlines[prev], w, after.Deadlines[w])
			}
			prev = w
		}
	}
	return errors.Join(errs...)
}

// Requeued reports whether the step's caller joined the queue at its tail
// in this step: it is queued after the step, and was not before, or was with
// another deadline (it was pruned and queued again).
func Requeued(s Step) bool {
	if s.Op != OpFairTryLockWait || s.Acquired || !slices.Contains(s.After.Queue, s.Owner) {
		return false
	}
	if !slices.Contains(s.Before.Queue, s.Owner) {
		return true
	}
	d, ok := s.Before.Deadlines[s.Owner]
	return !ok || d != s.After.Deadlines[s.Owner]
}

func headOf(q []string) string {
	if len(q) == 0 {
		return "(empty queue)"
	}
	return q[0]
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
