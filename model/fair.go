package model

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The fair lock (Redisson's RFairLock) adds a FIFO queue to the reentrant
// lock's hash. Both engines of package fair (the Redisson-compatible one and
// the scalable one) keep exactly this state, each in its own keys, and run
// the same rules. The rules, in the order a reader needs them:
//
// Queue and deadlines. A caller that cannot take the lock and is willing to
// wait joins the tail of Queue. It also gets a deadline in Deadlines: if it
// has not taken the lock by then (by the clock of whoever looks), it is
// considered dead. Each waiter brings its own wait slot, a duration (its
// tryLock wait, or the default of five minutes). The first waiter's deadline
// is "the lease ends, then my slot": now + remaining lease + slot. Every
// later waiter's is "the waiter ahead of me runs out, then my slot":
// deadline(tail) + slot. So deadlines are non-decreasing from head to tail.
//
// Only the head may take the lock. A free lock with someone else at the head
// of the queue stays free for the head; callers that do not queue
// (FairTryLock) fail, callers that do are queued behind.
//
// Deadline shifting. The deadlines are built assuming every waiter ahead uses
// its whole slot. When the head takes the lock, its slot was not needed, so
// every remaining deadline drops by the acquirer's slot. When a waiter gives
// up (acquireFailed), the waiters behind it drop by its slot; those ahead of
// it are unaffected. Without these, deadlines drift into the future
// (Redisson #1104, #2099). These are Redisson's rules, and the only ways a
// deadline ever changes: Java clients sharing the lock compute from them.
//
// Head grace (not in Redisson). While the lock is free, its head must take
// it within a grace or be pruned as dead: a dead head then stalls its
// followers for about a grace instead of its whole slot. The grace is kept
// apart from the deadlines, in GraceOwner / GraceEnd (the key
// "fairlock_grace:{name}"), on the server's clock: whoever finds the lock
// free with a head that has no grace starts one (when its own grace setting
// is on), and it is dropped as soon as its owner is no longer the head of a
// free lock. The key lives GraceMargin past the grace, so that the next
// caller sees that it ran out. A grace that ran out does not prune by itself
// (issue 19: it can run out while the server refuses writes or the head's
// link stalls, the head's attempt held back): whoever next finds it run out,
// the lock still free and the head the same, starts the head's second grace
// (GraceSecond) and wakes it; only a second grace that runs out prunes.
//
// Pruning. Before anything else every fair script but acquireFailed drops
// dead heads: while the head has no deadline (H1: Redisson stops there and
// blocks for ever), or the lock is free and the head's second grace ran out, or
// (only when the caller's grace is off: Redisson's rule) its deadline is at
// or before the caller's now, the head is removed. With the grace on, a
// deadline alone never prunes: it is an estimate that a holder renewed by
// its watchdog outlasts, and a live waiter would lose its place early. Nobody
// else's deadline moves. Not in Redisson: the caller is never pruned by its
// own call (it is alive by definition), so a head whose deadline passed
// still takes a free lock, and a clock that lags or leads cannot make a live
// head prune itself and rejoin at the tail.
//
// Waking. Every fair script ends by waking, on their own channels, the
// waiters that must act (the head to take the lock, the waiter behind it to
// prune the head if it does not): a waiter that moved into the first or
// second place of the queue, and the first two whenever the lock became
// free, its lease was cut short (the waiters sleep until the lease they
// were told) or the head's grace started. At most once each, and never the
// caller of FairTryLockWait, whose reply tells it how long to sleep (the
// caller of another script may be an owner with a wait in progress in
// another goroutine: it is woken like anyone). A release (unlock, forceUnlock) also
// publishes on the lock's own channel, which wakes reentrant waiters of the
// same name.
//
// Replies. A queued waiter that did not get the lock is told how long it may
// sleep: never past the next event that can change its place or free the
// lock (see FairTryLockWait).
//
// Direct handoff (the scalable engine, Lock.Handoff, issue 23; on the
// Redisson-compatible engine only to a head of this library's clients,
// TakesNotes, issue 33). A release grants the free lock to the live head
// itself, doing what the head's take would, and publishes the grant on the
// head's channel instead of a wake-up (see handoff). A Java head of the
// Redisson engine is woken and takes the lock itself: the same state.

// GraceMargin is how long the head grace key outlives the grace, in ms.
const GraceMargin int64 = 60_000

// NoteMargin is how long the Redisson engine's notes hash outlives the
// deadline of the latest waiter that stored a note in it, in ms.
const NoteMargin int64 = 60_000

// keepNote keeps owner's handoff note n, made when it joined with deadline
// rel ms past its now.
func (l *Lock) keepNote(server int64, owner string, n Note, rel int64) {
	l.Notes[owner] = n
	if l.Handoff {
		return // kept in the queue's own hash, which never expires
	}
	if keep := max(rel, 0) + NoteMargin; l.NotesEnd == 0 || l.NotesEnd-server < keep {
		l.NotesEnd = server + keep
	}
}

// dropNote: owner left the queue (or joined without a note); its note goes,
// and with the last one the Redisson engine's notes hash.
func (l *Lock) dropNote(owner string) {
	delete(l.Notes, owner)
	if len(l.Notes) == 0 {
		l.NotesEnd = 0
	}
}

// FairTryLock is fair_try_lock.lua: one attempt that never queues (Redisson's
// tryLock() with no arguments). It takes the lock when it is free and nobody
// alive is queued ahead (the caller may itself be the head: then it leaves
// the queue), or re-enters a lock owner holds. waitMs is the caller's slot,
// by which the remaining deadlines drop when it takes the lock.
func (l *Lock) FairTryLock(server, now int64, owner string, leaseMs, waitMs, graceMs int64) (acquired bool) {
	acquired, _ = l.FairTryLockToken(server, now, owner, leaseMs, waitMs, graceMs)
	return acquired
}

// FairTryLockToken is FairTryLock also replying the holder's fencing token
// when acquired (see fairToken).
func (l *Lock) FairTryLockToken(server, now int64, owner string, leaseMs, waitMs, graceMs int64) (acquired bool, token int64) {
	l.Advance(server)
	head0, second0 := l.front()
	l.prune(server, now, owner, graceMs)
	held, cut := l.takeOrReenter(server, owner, leaseMs, waitMs)
	if held {
		token = l.fairToken(owner)
	}
	l.finish(server, "", head0, second0, cut, graceMs)
	return held, token
}

// fairToken is the fair lock's fencing token (not in Redisson's RFairLock;
// the key is its fenced lock's): the take (free -> held, the owner's count
// is 1) increments it; a re-entry keeps the holder's token, incrementing it
// only when the key holds none.
func (l *Lock) fairToken(owner string) int64 {
	if l.Holds[owner] == 1 || l.Token <= 0 {
		l.Token++
	}
	return l.Token
}

// FairTryLockWait is fair_try_lock_wait.lua: take the lock as FairTryLock
// does, or else join the queue or stay in it. When not acquired the reply is
// how long to wait before trying again (a message on the waiter's channel
// may come sooner), bounded by the next event that can change the waiter's
// place or free the lock:
//
//   - lock held: the remaining lease (NoExpiry for none); but for the waiter
//     right behind the head at most grace (not in Redisson), so that it
//     notices a dead head soon after a release even if a wake-up is lost;
//   - lock free (so someone else is the head): until the head's deadline or
//     the end of its grace, whichever comes first, at least 1 ms (Redisson
//     replies 0 and its waiters busy-poll, hazard H2).
//
// A new waiter gets the same reply (Redisson tells it the time until the
// tail runs out; the reply is only the caller's to read).
func (l *Lock) FairTryLockWait(server, now int64, owner string, leaseMs, waitMs, graceMs int64) (acquired bool, ttlMs int64) {
	acquired, ttlMs, _ = l.FairTryLockWaitToken(server, now, owner, leaseMs, waitMs, graceMs)
	return acquired, ttlMs
}

// FairTryLockWaitToken is FairTryLockWait also replying the holder's
// fencing token when acquired (see fairToken).
func (l *Lock) FairTryLockWaitToken(server, now int64, owner string, leaseMs, waitMs, graceMs int64) (acquired bool, ttlMs, token int64) {
	acquired, ttlMs, token, _ = l.FairTryLockWaitRequest(server, now, owner, leaseMs, waitMs, graceMs, "", 0)
	return acquired, ttlMs, token
}

// FairTryLockWaitRequest is FairTryLockWaitToken sent with an acquisition
// request id and latch lifetime (latchMs 0: none; latch_common.lua). A
// copy of a request whose latch is live replies from it (see latchHit),
// and claims a grant (LatchGranted: the lock's TTL becomes leaseMs, the
// latch LatchHeld). A take writes the latch; a join with a latch keeps its
// Note on the scalable engine (Handoff), and on the Redisson engine when
// owner takes notes (TakesNotes: the release may grant it the lock).
func (l *Lock) FairTryLockWaitRequest(server, now int64, owner string, leaseMs, waitMs, graceMs int64, requestID string, latchMs int64) (acquired bool, ttlMs, token int64, err error) {
	l.Advance(server)
	if latchMs > 0 {
		if la, found := l.AcquireLatches[requestID]; found && la.State == LatchGranted && l.Holds[owner] > 0 {
			if l.LeaseEnd != NoExpiry && l.LeaseEnd < server+leaseMs {
				l.LeaseEnd = server + leaseMs // a claim never shortens the lease
			}
			l.AcquireLatches[requestID] = AcquireLatch{State: LatchHeld, Token: la.Token, ExpiresAt: server + latchMs}
			return true, 0, la.Token, nil
		}
	}
	if acquired, token, err, hit := l.latchHit(owner, requestID, latchMs); hit {
		return acquired, 0, token, err
	}
	head0, second0 := l.front()
	l.prune(server, now, owner, graceMs)
	if held, cut := l.takeOrReenter(server, owner, leaseMs, waitMs); held {
		token = l.fairToken(owner)
		if latchMs > 0 {
			l.AcquireLatches[requestID] = AcquireLatch{State: LatchHeld, Token: token, ExpiresAt: server + latchMs}
		}
		l.finish(server, owner, head0, second0, cut, graceMs)
		return true, 0, token, nil
	}
	if _, queued := l.Deadlines[owner]; !queued {
		l.join(server, now, owner, waitMs)
		if (l.Handoff || TakesNotes(owner)) && latchMs > 0 {
			l.keepNote(server, owner, Note{LeaseMs: leaseMs, SlotMs: waitMs, LatchMs: latchMs, RequestID: requestID}, l.Deadlines[owner]-now)
		} else {
			l.dropNote(owner)
		}
	}
	l.finish(server, owner, head0, second0, false, graceMs)
	return false, l.reply(server, now, owner, graceMs), 0, nil
}

// FairAcquireFailed is fair_acquire_failed.lua: owner gives up waiting and
// leaves the queue. Everyone behind it moves up by its slot waitMs, which
// must be the slot it queued with (else the deadlines behind it are shifted
// wrongly, Redisson's hazard H3). Running it again, or for an owner that is
// not queued, changes nothing. Not in Redisson: the waiters that move into
// the first two places are woken, and a new head of a free lock gets its
// grace.
func (l *Lock) FairAcquireFailed(server int64, owner string, waitMs, graceMs int64) {
	l.Advance(server)
	head0, second0 := l.front()
	if at := slices.Index(l.Queue, owner); at >= 0 {
		for _, w := range l.Queue[at+1:] {
			l.Deadlines[w] -= waitMs
		}
	}
	delete(l.Deadlines, owner)
	l.Queue = slices.DeleteFunc(l.Queue, func(w string) bool { return w == owner })
	l.dropNote(owner)
	l.finish(server, "", head0, second0, false, graceMs)
}

// FairUnlock is fair_unlock.lua: release one hold of owner, as Unlock does.
// A release publishes on the lock channel (waking reentrant waiters) unless
// it grants the lock directly (handoff: the lock is held again, a reentrant
// waiter would only fail its take), and wakes the head and the waiter behind
// it, after giving the head its grace.
//
// Not in Redisson (hazard H4): when the lock no longer exists at all
// (expired, or forced), the reply is NotHeld, but the lock is free and
// nobody else would say so: it wakes as a release does. That reply is not
// latched.
func (l *Lock) FairUnlock(server, now int64, owner string, leaseMs int64, requestID string, latchMs, graceMs int64) UnlockResult {
	l.Advance(server)
	if r, ok := l.latched(requestID); ok {
		return r
	}
	head0, second0 := l.front()
	l.prune(server, now, owner, graceMs)
	result, freed := NotHeld, false
	switch {
	case !l.Locked():
		freed = true
	case l.Holds[owner] > 0:
		pttl := l.PTTL(server)
		if l.Holds[owner]--; l.Holds[owner] > 0 {
			l.LeaseEnd = server + leaseMs
			l.latch(requestID, StillHeld, server, latchMs)
			result, freed = StillHeld, pttl == NoExpiry || leaseMs < pttl
		} else {
			clear(l.Holds)
			l.latch(requestID, Released, server, latchMs)
			result, freed = Released, true
		}
	}
	if result != StillHeld && freed && !l.handoff(server, owner, graceMs) {
		l.publish(l.names.Channel)
	}
	l.finish(server, "", head0, second0, freed, graceMs)
	return result
}

// Direct handoff (the scalable engine, Handoff, issue 23; on the Redisson
// engine a head that takes notes, issue 33: only such a head has a Note
// there). A release that leaves the lock free grants it to the live head
// (after pruning) as the
// head's own take would: the head leaves the queue and every remaining
// deadline drops by the slot it joined with, it holds the lock once, the
// token is incremented, and its acquisition latch says LatchGranted with
// that token; the latch lives at least the grant's TTL (a copy of the
// request that finds the lock still granted must see it, or it would
// re-enter). The lease is min(its lease, 2 graces): a dead head holds the
// lock no longer than the two graces it would have had as the head of a
// free lock. The grant is published on the head's channel:
// "g:<token>:<granted ms>:<request id>". No grant (the head takes the lock
// itself): the caller's grace is off, the head is the caller, it joined
// without a latch (no Note), is a Java client's on the Redisson engine, or
// its latch exists (the request was given up). Returns whether it granted.
func (l *Lock) handoff(server int64, caller string, graceMs int64) bool {
	if graceMs <= 0 || l.Locked() || len(l.Queue) == 0 {
		return false
	}
	head := l.Queue[0]
	n, ok := l.Notes[head]
	if head == caller || !ok || !l.Handoff && !TakesNotes(head) {
		return false
	}
	if _, exists := l.AcquireLatches[n.RequestID]; exists {
		return false
	}
	ttl := min(n.LeaseMs, 2*graceMs)
	l.takeOrReenter(server, head, ttl, n.SlotMs)
	l.Token++
	l.AcquireLatches[n.RequestID] = AcquireLatch{State: LatchGranted, Token: l.Token, ExpiresAt: server + max(n.LatchMs, ttl)}
	l.Published = append(l.Published, Message{Channel: l.names.WaiterChannel(head),
		Payload: GrantMessage(l.Token, ttl, n.RequestID)})
	return true
}

// GrantMessage is the payload of a direct handoff's message.
func GrantMessage(token, ttlMs int64, requestID string) string {
	return "g:" + strconv.FormatInt(token, 10) + ":" + strconv.FormatInt(ttlMs, 10) + ":" + requestID
}

// ParseGrantMessage reads a GrantMessage payload.
func ParseGrantMessage(p string) (token, ttlMs int64, requestID string, ok bool) {
	rest, found := strings.CutPrefix(p, "g:")
	if !found {
		return 0, 0, "", false
	}
	f := strings.SplitN(rest, ":", 3)
	if len(f) != 3 || f[2] == "" {
		return 0, 0, "", false
	}
	t, err1 := strconv.ParseInt(f[0], 10, 64)
	d, err2 := strconv.ParseInt(f[1], 10, 64)
	return t, d, f[2], err1 == nil && err2 == nil && t > 0 && d > 0
}

// FairForceUnlock is fair_force_unlock.lua: delete the lock whoever holds
// it; if there was one, wake as a release does.
func (l *Lock) FairForceUnlock(server, now int64, graceMs int64) bool {
	l.Advance(server)
	head0, second0 := l.front()
	l.prune(server, now, "", graceMs)
	deleted := l.Locked()
	clear(l.Holds)
	if deleted {
		l.publish(l.names.Channel)
	}
	l.finish(server, "", head0, second0, deleted, graceMs)
	return deleted
}

// Grace reports the head grace at server time: the owner it is for and the
// milliseconds it has left (0 or less: it ran out), or ok false when there
// is none. GraceSecond says whether it is the owner's second.
func (l *Lock) Grace(server int64) (owner string, leftMs int64, ok bool) {
	l.Advance(server)
	if l.GraceOwner == "" {
		return "", 0, false
	}
	return l.GraceOwner, l.GraceEnd - GraceMargin - server, true
}

// front returns the head and the waiter behind it ("" for none).
func (l *Lock) front() (head, second string) {
	if len(l.Queue) > 0 {
		head = l.Queue[0]
	}
	if len(l.Queue) > 1 {
		second = l.Queue[1]
	}
	return head, second
}

// prune removes dead heads, never caller: a head without a deadline (H1),
// with a deadline at or before now (only when the caller's grace is off),
// or, while the lock is free, whose second grace ran out (any grace that ran
// out, when the caller's grace is off). Deadlines of the others stay.
func (l *Lock) prune(server, now int64, caller string, graceMs int64) {
	free := !l.Locked()
	graced, left, hasGrace := l.Grace(server)
	for len(l.Queue) > 0 {
		head := l.Queue[0]
		if head == caller {
			return
		}
		d, ok := l.Deadlines[head]
		// A first grace that ran out is renewed by finish (a second grace)
		// rather than pruning; a caller with its grace off renews nothing
		// and prunes it (Redisson's way: it prunes by deadline anyway).
		graceOver := free && hasGrace && graced == head && left <= 0 && (l.GraceSecond || graceMs <= 0)
		// With the grace on, the deadline alone never prunes: it is
		// Redisson's estimate (the lease at join time plus slots), which a
		// holder renewed by its watchdog outlasts, and a live waiter would
		// lose its place before its own slot ran out. A dead head is
		// pruned by its second grace once the lock is free; while the lock is
		// held a dead waiter blocks nobody.
		if ok && (graceMs > 0 || d > now) && !graceOver {
			return
		}
		delete(l.Deadlines, head)
		l.Queue = l.Queue[1:]
		l.dropNote(head)
	}
}

// takeOrReenter takes a free lock for owner if nobody is queued or owner is
// the head, or re-enters a lock owner holds. A fresh take removes owner from
// the queue and moves every remaining deadline earlier by owner's slot. cut
// reports a re-entry that shortened the lease.
func (l *Lock) takeOrReenter(server int64, owner string, leaseMs, waitMs int64) (held, cut bool) {
	if l.Locked() {
		if l.Holds[owner] == 0 {
			return false, false
		}
		pttl := l.PTTL(server)
		l.Holds[owner]++
		l.LeaseEnd = server + leaseMs
		return true, pttl == NoExpiry || leaseMs < pttl
	}
	if len(l.Queue) > 0 && l.Queue[0] != owner {
		return false, false
	}
	if len(l.Queue) > 0 {
		l.Queue = l.Queue[1:]
	}
	delete(l.Deadlines, owner)
	l.dropNote(owner)
	for w := range l.Deadlines {
		l.Deadlines[w] -= waitMs
	}
	l.Holds[owner] = 1
	l.LeaseEnd = server + leaseMs
	return true, false
}

// join appends owner at the tail. Its deadline is one slot after the tail's,
// or now + the remaining lease + slot when nobody with a deadline is ahead
// (a tail that is owner itself, or has no deadline, can only come from keys
// edited by hand).
func (l *Lock) join(server, now int64, owner string, waitMs int64) {
	ttl := l.PTTL(server)
	if n := len(l.Queue); n > 0 {
		if tail := l.Queue[n-1]; tail != owner {
			if d, ok := l.Deadlines[tail]; ok {
				ttl = d - now
			}
		}
	}
	l.Deadlines[owner] = now + ttl + waitMs
	seq := int64(1)
	if n := len(l.Queue); n > 0 {
		seq = l.Seqs[l.Queue[n-1]] + 1
	}
	l.Seqs[owner] = seq
	l.Queue = append(l.Queue, owner)
}

// Ahead is what fair_try_lock_wait.lua replies as owner's position when
// asked (ARGV 9): exact, the number of waiters ahead of owner (the
// Redisson engine's LPOS), and bySeq, the scalable engine's join-sequence
// difference with the head (Seqs), which also counts the gaps left by
// waiters that gave up from between the head and owner. -1 both when owner
// is not queued.
func (l *Lock) Ahead(owner string) (exact, bySeq int64) {
	i := slices.Index(l.Queue, owner)
	if i < 0 {
		return -1, -1
	}
	return int64(i), l.Seqs[owner] - l.Seqs[l.Queue[0]]
}

// finish ends every fair script: the grace is dropped unless the lock is
// free and it is the head's, a head of a free lock without one gets one,
// and one whose first grace ran out gets its second (graceMs > 0), and the
// waiters that must act are woken: a waiter that
// moved into the first or second place (head0, second0: the front when the
// script started), and the first two when freed (the lock became free, or
// its lease was cut short) or when the head's grace starts. Never caller:
// the FairTryLockWait caller, told how long to sleep by its reply ("" for
// the other scripts).
func (l *Lock) finish(server int64, caller, head0, second0 string, freed bool, graceMs int64) {
	head, second := l.front()
	free := !l.Locked()
	if l.GraceOwner != "" && (!free || l.GraceOwner != head) {
		l.GraceOwner, l.GraceSecond = "", false
	}
	started := false
	if free && head != "" && graceMs > 0 {
		switch {
		case l.GraceOwner == "":
			l.GraceOwner, l.GraceEnd, l.GraceSecond = head, server+graceMs+GraceMargin, false
			started = true
		case !l.GraceSecond && l.GraceEnd-GraceMargin <= server:
			l.GraceEnd, l.GraceSecond = server+graceMs+GraceMargin, true
			started = true
		}
	}
	if head != "" && head != caller && (freed || started || head != head0) {
		l.wakeFront(server, head, false, graceMs)
	}
	if second != "" && second != caller && (freed || started || second != second0) {
		l.wakeFront(server, second, true, graceMs)
	}
}

// wakeFront wakes owner, the head or (second) the waiter behind it. On the
// scalable engine (Handoff), and on the Redisson engine for an owner of this
// library's clients (TakesNotes), a waiter woken while the lock is held is
// sent the reply its attempt would get instead, SleepMessage: how long to
// sleep (the lock's PTTL, for the second at most the grace) and its place
// (place); its client re-arms its timer without a script. So is the waiter
// behind the head of a free lock whose grace runs, told the grace left
// (issue 33): its attempt would reply that and change nothing.
func (l *Lock) wakeFront(server int64, owner string, second bool, graceMs int64) {
	pttl := l.PTTL(server)
	noted := l.Handoff || TakesNotes(owner)
	if noted && pttl == NoLock && second && graceMs > 0 {
		// The lock is free: the head must act; the waiter behind it would
		// be told to sleep until the head's grace ends (reply).
		if graced, left, ok := l.Grace(server); ok && graced == l.Queue[0] && left > 0 {
			l.note(owner, left)
			return
		}
	}
	if !noted || pttl == NoLock {
		l.publish(l.names.WaiterChannel(owner))
		return
	}
	l.note(owner, sleepHeld(pttl, graceMs, second))
}

// note sends owner the reply its attempt would get: sleep and its place.
func (l *Lock) note(owner string, sleepMs int64) {
	l.Published = append(l.Published, Message{Channel: l.names.WaiterChannel(owner), Payload: SleepMessage(sleepMs, l.place(owner))})
}

// place is the position a note tells owner: on the scalable engine
// (Handoff) the join-sequence Ahead, on the Redisson engine the exact one
// (its LPOS).
func (l *Lock) place(owner string) int64 {
	exact, bySeq := l.Ahead(owner)
	if l.Handoff {
		return bySeq
	}
	return exact
}

// TakesNotes reports whether owner ("<client-uuid>:<thread-id>") is one of
// this library's clients, which understand a SleepMessage: their client
// ids are version-8 UUIDs (RFC 9562). Redisson's are version 4
// (UUID.randomUUID), and a Java client decodes every message on its
// waiter channel as a number, so it only ever gets UnlockMessage.
func TakesNotes(owner string) bool {
	return len(owner) > 18 && isHex(owner[0:8]) && owner[8] == '-' && isHex(owner[9:13]) &&
		owner[13] == '-' && owner[14] == '8' && isHex(owner[15:18]) && owner[18] == '-'
}

func isHex(s string) bool {
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// sleepHeld is a queued waiter's sleep while the lock is held (pttl: its
// PTTL; second: the waiter is right behind the head): the PTTL, for the
// second at most the grace, so that it notices a dead head soon after a
// release even if a wake-up is lost.
func sleepHeld(pttl, graceMs int64, second bool) int64 {
	if graceMs > 0 && second && (pttl == NoExpiry || pttl > graceMs) {
		return graceMs
	}
	return pttl
}

// SleepMessage is the payload of a wake-up that carries its reply (the
// scalable engine, issue 23): "s:<sleep ms>:<ahead>".
func SleepMessage(sleepMs, ahead int64) string {
	return "s:" + strconv.FormatInt(sleepMs, 10) + ":" + strconv.FormatInt(ahead, 10)
}

// ParseSleepMessage reads a SleepMessage payload.
func ParseSleepMessage(p string) (sleepMs, ahead int64, ok bool) {
	rest, found := strings.CutPrefix(p, "s:")
	if !found {
		return 0, 0, false
	}
	a, b, found := strings.Cut(rest, ":")
	if !found {
		return 0, 0, false
	}
	s, err1 := strconv.ParseInt(a, 10, 64)
	n, err2 := strconv.ParseInt(b, 10, 64)
	return s, n, err1 == nil && err2 == nil
}

// CheckSleepMessage checks a SleepMessage published to owner in a step
// that left the lock as after (at server time), against the promise a
// note replaces a wake-up with: the lock is held (a free lock gets a
// wake-up, so the head takes it), the waiter is the head or the one behind
// it, it is not told to sleep past the lock's expiry (slack: the
// comparison's tolerance), the one behind the head not past the grace
// either (so it notices a dead head), and its place is its join-sequence
// Ahead.
func CheckSleepMessage(after *Lock, server int64, owner, payload string, graceMs, slack int64) error {
	sleep, ahead, ok := ParseSleepMessage(payload)
	if !ok {
		return fmt.Errorf("malformed sleep message %q to %s", payload, owner)
	}
	pttl := after.PTTL(server)
	head, second := front(after.Queue)
	graced, left, graceOK := after.Grace(server)
	switch {
	case pttl == NoLock && owner == second && graceMs > 0 && graceOK && graced == head:
		// The waiter behind the head of a free lock: until the head's grace
		// ends, when it must act (prune the head if it has not taken it).
		if sleep < 0 || sleep > left+slack {
			return fmt.Errorf("sleep message %q to %s behind the head of a free lock: past the head's grace (%d ms left)", payload, owner, left)
		}
	case pttl == NoLock:
		return fmt.Errorf("sleep message %q to %s while the lock is free", payload, owner)
	case owner != head && owner != second:
		return fmt.Errorf("sleep message %q to %s, not at the front of %v", payload, owner, after.Queue)
	case sleep < 0 && (sleep != NoExpiry || pttl != NoExpiry):
		return fmt.Errorf("sleep message %q to %s: negative sleep, lock PTTL %d", payload, owner, pttl)
	case sleep >= 0 && pttl != NoExpiry && sleep > pttl+slack:
		return fmt.Errorf("sleep message %q to %s: past the lock's expiry (PTTL %d)", payload, owner, pttl)
	case owner == second && graceMs > 0 && (sleep < 0 || sleep > graceMs):
		return fmt.Errorf("sleep message %q to %s, behind the head: beyond the grace %d", payload, owner, graceMs)
	}
	if !after.Handoff && !TakesNotes(owner) {
		return fmt.Errorf("sleep message %q to %s on the Redisson engine: a Java client reads only %q there", payload, owner, UnlockMessage)
	}
	if want := after.place(owner); ahead != want {
		return fmt.Errorf("sleep message %q to %s: ahead %d, its place in the queue says %d", payload, owner, ahead, want)
	}
	return nil
}

// reply is a queued owner's sleep bound (see FairTryLockWait).
func (l *Lock) reply(server, now int64, owner string, graceMs int64) int64 {
	pttl := l.PTTL(server)
	head, second := l.front()
	if pttl != NoLock {
		return sleepHeld(pttl, graceMs, second == owner)
	}
	if head == "" || head == owner {
		return 1
	}
	wait := int64(0)
	if d, ok := l.Deadlines[head]; ok {
		wait = d - now
	}
	graced, left, ok := l.Grace(server)
	switch {
	case graceMs > 0 && ok && graced == head:
		wait = left // the deadline does not prune: only the grace's end can
	case graceMs > 0:
		wait = graceMs
	case ok && graced == head && left < wait:
		wait = left
	}
	return max(1, wait)
}
