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
//     queued twice;
//   - a head grace exists only for the head of a free lock.
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
	for i := 1; i < len(l.Queue); i++ {
		a, okA := l.Seqs[l.Queue[i-1]]
		b, okB := l.Seqs[l.Queue[i]]
		if okA && okB && b <= a {
			errs = append(errs, fmt.Errorf("join sequences do not increase from %s (%d) to %s (%d)", l.Queue[i-1], a, l.Queue[i], b))
		}
	}
	for _, w := range slices.Sorted(maps.Keys(l.Deadlines)) {
		if !seen[w] {
			errs = append(errs, fmt.Errorf("waiter %s has a deadline but is not queued", w))
		}
	}
	if l.GraceOwner != "" && (l.Locked() || len(l.Queue) == 0 || l.Queue[0] != l.GraceOwner) {
		errs = append(errs, fmt.Errorf("the head grace names %s, but the lock is not free with %s at the head (%v, queue %v)",
			l.GraceOwner, l.GraceOwner, l.Holds, l.Queue))
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
	Server   int64  // the server clock when the step ran, ms
	Now      int64  // the caller's clock (fair operations)
	WaitMs   int64  // the caller's slot (fair operations)
	GraceMs  int64  // the caller's head grace (fair operations)
	Acquired bool   // the reply said the caller holds the lock now
	Reply    int64  // fairTryLockWait, not acquired: the sleep it was told (ms; -1: until woken)

	Before, After *Lock
	Published     []Message // published during this step, in order
}

// History checks the properties that span steps, over a sequence of Steps
// of one lock fed to Observe in order. They are stated from the outside (the
// states, the replies and the messages), not from the scripts' code:
//
//   - wake-ups reach only the front of the queue: a fair operation publishes
//     on the waiter channels of the head and the second after the step, at
//     most once each, never the tryLockWait caller's (its reply bounds its
//     sleep); on the lock channel only when it releases the lock and
//     does not grant it directly (issue 33: the lock is held again);
//   - and they reach whoever must act: a waiter that moved into the first
//     or second place is woken, the first two and the lock channel when a
//     fair script frees the lock (the grantee instead when it grants it), the first two when it cuts the lease
//     short or starts the head's grace;
//   - no waiter acquires while an earlier live waiter is queued: when the
//     lock is freshly taken, every waiter that was queued ahead of the
//     taker had a deadline at or before the taker's now, or was the head of
//     a free lock whose grace had run out, and is gone;
//   - a caller is never pruned by its own call;
//   - a release grants the lock directly (a grant message, "g:...", on a
//     waiter's channel) only to a waiter that takes notes (the scalable
//     engine's, or one of this library's clients on the Redisson engine: a
//     Java client reads only "0"), which then holds it alone and has left
//     the queue, as after its own take;
//   - grants follow enqueue order: the queue is only ever appended to at
//     the tail and removed from (never reordered), and a waiter granted the
//     lock is the earliest-enqueued of those still queued once the dead
//     heads are pruned;
//   - deadlines change only by Redisson's rules (Java clients compute from
//     them): a take lowers every remaining one by the taker's slot, a
//     give-up lowers the ones behind the leaver by its slot, nothing else
//     moves one;
//   - deadlines are non-decreasing from head to tail, as long as every
//     waiter that gave up did so with the slot it queued with (a waiter
//     that leaves with another slot shifts the ones behind it by the wrong
//     amount; the check is suspended until the queue next empties);
//   - replies never send a waiter to sleep past the next event that can
//     change its place or free the lock: the lease of a held lock, the
//     grace for the waiter behind the head, the head's deadline and grace
//     when the lock is free; and never 0 (no busy polling);
//   - liveness: every queued waiter has an alarm, the latest time it will
//     call again (its last reply, or a wake-up since). The head of a free
//     lock is always due (its alarm has come), and the waiter behind it is
//     due by the end of the head's grace. A change made outside the fair
//     scripts (a plain forceUnlock, a renewal, PERSIST) may leave a waiter
//     sleeping on what it was told before; its alarm counts again once it
//     has called or been woken since.
//
// The zero value is ready to use.
type History struct {
	// Slack is how much a value that comes from the server's clock (a
	// PTTL, a lease end, a grace end) may lag in the observed states: 0
	// means exact.
	Slack int64

	tickets    map[string]int64 // queued waiter -> enqueue sequence number
	next       int64
	slots      map[string]int64 // queued waiter -> the slot it queued with
	slotsBroke bool
	alarms     map[string]alarm // queued waiter -> when it calls again at the latest
	steps      int64            // steps observed
	foreign    int64            // the last step that changed the lock outside the fair scripts (0: none)
}

type alarm struct {
	at    int64 // server clock
	never bool  // told to wait for a wake-up only (a lock without expiry)
	step  int64 // the step that set it
}

// SlotsKept reports whether the deadline-order check is in force: no waiter
// now queued was shifted by a give-up with a slot other than the leaver's.
func (h *History) SlotsKept() bool { return !h.slotsBroke }

func front(q []string) (head, second string) {
	if len(q) > 0 {
		head = q[0]
	}
	if len(q) > 1 {
		second = q[1]
	}
	return head, second
}

// Observe checks one step against the history so far and records it.
func (h *History) Observe(s Step) error {
	if h.tickets == nil {
		h.tickets = map[string]int64{}
		h.slots = map[string]int64{}
		h.alarms = map[string]alarm{}
	}
	h.steps++
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{s.Op}, args...)...))
	}
	before, after := s.Before, s.After
	names := after.Names()
	fair := strings.HasPrefix(string(s.Op), "fair")
	release := s.Op == OpFairUnlock || s.Op == OpFairForceUnlock
	headB, secondB := front(before.Queue)
	headA, secondA := front(after.Queue)

	// A direct grant: who may get one.
	granted := "" // the waiter a release granted the lock to directly
	for _, m := range s.Published {
		if fair && strings.HasPrefix(m.Payload, "g:") && strings.HasPrefix(m.Channel, names.Channel+":") {
			w := strings.TrimPrefix(m.Channel, names.Channel+":")
			_, _, _, ok := ParseGrantMessage(m.Payload)
			switch {
			case !ok:
				add("malformed grant %q to %s", m.Payload, w)
			case s.Op != OpFairUnlock:
				add("granted the lock to %s without a release", w)
			case granted != "":
				add("granted the lock to %s and %s", granted, w)
			case !after.Handoff && !TakesNotes(w):
				add("granted the lock to %s on the Redisson engine: a Java client reads only %q there", w, UnlockMessage)
			case !slices.Contains(before.Queue, w) || slices.Contains(after.Queue, w):
				add("granted the lock to %s, which was not queued before or still is", w)
			case after.Holds[w] != 1 || len(after.Holds) != 1:
				add("granted the lock to %s, but the lock's holds are %v", w, after.Holds)
			}
			granted = w
		}
	}

	// Notifications: who may be woken.
	woken := map[string]bool{}
	for _, m := range s.Published {
		switch {
		case fair && strings.HasPrefix(m.Payload, "g:") && strings.HasPrefix(m.Channel, names.Channel+":"):
			// checked above
		case fair && strings.HasPrefix(m.Payload, "s:") && strings.HasPrefix(m.Channel, names.Channel+":"):
			// a wake-up that carries its reply (the scalable engine)
			if err := CheckSleepMessage(after, s.Server, strings.TrimPrefix(m.Channel, names.Channel+":"), m.Payload, s.GraceMs, h.Slack); err != nil {
				add("%v", err)
			}
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
		case m.Channel == names.Channel:
			switch {
			case !release || after.Locked() && granted == "":
				add("published on the lock channel without releasing the lock")
			case granted != "":
				// issue 33: the lock is held again; a reentrant waiter
				// woken there would only fail its take
				add("granted the lock to %s directly and published on the lock channel too", granted)
			}
		default:
			w := strings.TrimPrefix(m.Channel, names.Channel+":")
			switch {
			case w == s.Owner && s.Op == OpFairTryLockWait:
				add("woke the caller %s, which its reply tells how long to sleep", w)
			case w != headA && w != secondA:
				add("woke %s, but the front of the queue is %v", w, after.Queue[:min(2, len(after.Queue))])
			}
		}
		if woken[m.Channel] {
			add("published twice on %s", m.Channel)
		}
		woken[m.Channel] = true
	}

	// Notifications: who must be woken.
	if fair {
		freed := release && before.Locked() && !after.Locked() || granted != ""
		cut := before.Locked() && after.Locked() && after.LeaseEnd != NoExpiry &&
			(before.LeaseEnd == NoExpiry || after.LeaseEnd < before.LeaseEnd-h.Slack)
		graceStarted := after.GraceOwner != "" &&
			(before.GraceOwner != after.GraceOwner || after.GraceEnd > before.GraceEnd+h.Slack)
		if freed && granted == "" && !woken[names.Channel] {
			add("released the lock without publishing on the lock channel")
		}
		for i, w := range []string{headA, secondA} {
			if w == "" || w == s.Owner && s.Op == OpFairTryLockWait || woken[names.WaiterChannel(w)] {
				continue
			}
			switch {
			case i == 0 && w != headB:
				add("%s became the head and was not woken", w)
			case i == 1 && w != secondB:
				add("%s moved behind the head and was not woken", w)
			case freed:
				add("the lock was released and %s (place %d) was not woken", w, i+1)
			case cut:
				add("the lease was cut short and %s (place %d) was not woken", w, i+1)
			case graceStarted:
				add("the head's grace started and %s (place %d) was not woken", w, i+1)
			}
		}
	}

	fresh := s.Acquired && before.Holds[s.Owner] == 0
	// taker: who took the lock in this step, the caller (fresh) or the
	// waiter a release granted it to; takerSlot: the slot by which the
	// remaining deadlines drop (the caller's, or the grantee's as it queued).
	taker, takerSlot := "", int64(0)
	switch {
	case fresh && fair:
		taker, takerSlot = s.Owner, s.WaitMs
	case granted != "":
		taker, takerSlot = granted, h.slots[granted]
	}
	// No acquisition past a live waiter.
	if taker != "" {
		ahead := before.Queue
		if i := slices.Index(before.Queue, taker); i >= 0 {
			ahead = before.Queue[:i]
		}
		for i, w := range ahead {
			d, ok := before.Deadlines[w]
			graceOver := i == 0 && !before.Locked() && before.GraceOwner == w && (before.GraceSecond || s.GraceMs <= 0) &&
				before.GraceEnd-GraceMargin <= s.Server+h.Slack
			if ok && d > s.Now && !graceOver {
				add("%s took the lock past live waiter %s (deadline %d > now %d)", taker, w, d, s.Now)
			}
			if slices.Contains(after.Queue, w) {
				add("%s took the lock but %s, queued ahead of it, is still queued", taker, w)
			}
		}
	}

	// The queue changes only by removals, and by the caller joining at the
	// tail. A caller that was pruned in the same step and queued again is
	// told apart from one that stayed queued by its new deadline.
	requeued := Requeued(s)
	wasQueued := slices.Contains(before.Queue, s.Owner) && s.Owner != ""
	if wasQueued && fair && (requeued || !slices.Contains(after.Queue, s.Owner) && !fresh && s.Op != OpFairAcquireFailed) {
		add("the caller %s was pruned by its own call", s.Owner)
	}
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

	// Deadlines move only by Redisson's rules.
	leaver := -1
	if s.Op == OpFairAcquireFailed {
		leaver = slices.Index(before.Queue, s.Owner)
	}
	for i, w := range before.Queue {
		d0, ok0 := before.Deadlines[w]
		d1, ok1 := after.Deadlines[w]
		if !ok0 || !ok1 || slices.Contains(removed, w) {
			continue
		}
		want := int64(0)
		switch {
		case taker != "":
			want = -takerSlot
		case leaver >= 0 && i > leaver:
			want = -s.WaitMs
		}
		if d1-d0 != want {
			add("the deadline of %s moved by %d (Redisson's rules: %d)", w, d1-d0, want)
		}
	}

	// Removals: the acquirer is granted, the leaver gave up, the others
	// were pruned. A grant must go to the earliest enqueued waiter left.
	for _, w := range removed {
		if w == taker {
			continue
		}
		if w == s.Owner && s.Op == OpFairAcquireFailed && h.slots[w] != s.WaitMs {
			h.slotsBroke = true
		}
		delete(h.tickets, w)
		delete(h.slots, w)
	}
	if _, queued := h.tickets[taker]; queued && taker != "" {
		for w, t := range h.tickets {
			if w != taker && t < h.tickets[taker] {
				add("granted %s out of enqueue order: %s was enqueued earlier and is still queued", taker, w)
			}
		}
		delete(h.tickets, taker)
		delete(h.slots, taker)
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

	// The reply: a sleep bounded by the next event, never a busy poll.
	queuedAfter := slices.Contains(after.Queue, s.Owner)
	if s.Op == OpFairTryLockWait && !s.Acquired && queuedAfter {
		h.checkReply(s, add)
	}

	// Liveness: alarms.
	for w := range h.alarms {
		if !slices.Contains(after.Queue, w) {
			delete(h.alarms, w)
		}
	}
	for _, m := range s.Published {
		if w := strings.TrimPrefix(m.Channel, names.Channel+":"); w != m.Channel && slices.Contains(after.Queue, w) {
			h.alarms[w] = alarm{at: s.Server, step: h.steps}
		}
	}
	if s.Op == OpFairTryLockWait && !s.Acquired && queuedAfter {
		h.alarms[s.Owner] = alarm{at: s.Server + s.Reply, never: s.Reply < 0, step: h.steps}
	}
	leaseChanged := before.Locked() && after.Locked() && (before.LeaseEnd == NoExpiry) != (after.LeaseEnd == NoExpiry)
	if !fair && (s.Op != OpTime || leaseChanged) {
		h.foreign = h.steps
	}
	h.checkAlarms(s, add)
	return errors.Join(errs...)
}

func (h *History) checkReply(s Step, add func(string, ...any)) {
	after, r := s.After, s.Reply
	_, second := front(after.Queue)
	if r == 0 {
		add("replied 0 to %s: a busy poll", s.Owner)
		return
	}
	if after.Locked() {
		switch {
		case after.LeaseEnd == NoExpiry:
			if r < 0 && s.GraceMs > 0 && second == s.Owner {
				add("the waiter %s behind the head was told to wait for a wake-up only (grace %d)", s.Owner, s.GraceMs)
			}
		case r < 0:
			add("%s was told to wait for a wake-up only, the lease ends in %d", s.Owner, after.LeaseEnd-s.Server)
		case r > after.LeaseEnd-s.Server+h.Slack:
			add("%s was told to sleep %d, past the end of the lease in %d", s.Owner, r, after.LeaseEnd-s.Server)
		}
		if s.GraceMs > 0 && second == s.Owner && r > s.GraceMs {
			add("the waiter %s behind the head was told to sleep %d, more than its grace %d", s.Owner, r, s.GraceMs)
		}
		return
	}
	head := after.Queue[0]
	if head == s.Owner {
		add("%s is the head of a free lock and did not take it", s.Owner)
		return
	}
	if r < 1 {
		add("%s was told %d on a free lock", s.Owner, r)
	}
	if d, ok := after.Deadlines[head]; ok && s.GraceMs <= 0 && r > max(1, d-s.Now) {
		add("%s was told to sleep %d, past the head's deadline in %d", s.Owner, r, d-s.Now)
	}
	if after.GraceOwner == head {
		if left := after.GraceEnd - GraceMargin - s.Server; r > max(1, left+h.Slack) {
			add("%s was told to sleep %d, past the end of the head's grace in %d", s.Owner, r, left)
		}
	}
}

// checkAlarms: the head of a free lock is due, and the waiter behind it is
// due by the end of the head's grace.
func (h *History) checkAlarms(s Step, add func(string, ...any)) {
	after := s.After
	if after.Locked() || len(after.Queue) == 0 {
		return
	}
	due := func(w string, by int64, why string) {
		a, ok := h.alarms[w]
		if !ok || a.step < h.foreign {
			return
		}
		if a.never || a.at > by+h.Slack {
			until := "a wake-up"
			if !a.never {
				until = fmt.Sprint(a.at)
			}
			add("%s sleeps until %s, but %s at %d (now %d)", w, until, why, by, s.Server)
		}
	}
	head := after.Queue[0]
	due(head, s.Server, "it is the head of a free lock")
	if len(after.Queue) > 1 && after.GraceOwner == head {
		end := after.GraceEnd - GraceMargin
		due(after.Queue[1], max(end, s.Server), "the grace of the head "+head+" ends")
	}
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
