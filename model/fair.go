package model

import "slices"

// The fair lock (Redisson's RFairLock) adds a FIFO queue to the reentrant
// lock's hash. The rules, in the order a reader needs them:
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
// Pruning. Before anything else every fair script but acquireFailed drops
// dead heads: while the head's deadline is at or before the caller's now, it
// is removed. Nobody else's deadline moves: the dead waiter's slot has been
// spent in real time. Only heads are examined; since deadlines are ordered,
// a dead waiter is always reached through dead heads. Not in Redisson
// (hazard H1): a head with no deadline at all is pruned too, instead of
// blocking the lock for ever.
//
// Deadline shifting. The deadlines are built assuming every waiter ahead uses
// its whole slot. When the head takes the lock, its slot was not needed, so
// every remaining deadline drops by the acquirer's slot. When a waiter gives
// up (acquireFailed), the waiters behind it drop by its slot; those ahead of
// it are unaffected. Without these, deadlines drift into the future
// (Redisson #1104, #2099) and a dead waiter holds the lock up for long after.
//
// Waking. A release (unlock, forceUnlock) publishes "0" on the head's own
// channel only, never on the lock channel: nobody but the head can take the
// lock, so there is no thundering herd. The head stays queued until it takes
// the lock itself.
//
// Head grace (not in Redisson). Whenever the lock becomes free, or a waiter
// behind the head finds it free, the head must take it within grace ms: its
// deadline is lowered to now + grace if that is earlier. A live head takes
// the lock within a round trip of its wake-up; a dead one is then pruned
// after grace instead of after its whole slot. Deadlines only go down, and
// only at the head, so the order of the queue is kept. grace <= 0 turns
// this off (Redisson's behaviour).

// FairTryLock is fair_try_lock.lua: one attempt that never queues (Redisson's
// tryLock() with no arguments). It takes the lock when it is free and nobody
// alive is queued ahead (the caller may itself be the head: then it leaves
// the queue), or re-enters a lock owner holds. waitMs is the caller's slot,
// by which the remaining deadlines drop when it takes the lock.
func (l *Lock) FairTryLock(server, now int64, owner string, leaseMs, waitMs int64) (acquired bool) {
	l.Advance(server)
	l.pruneStaleHeads(now)
	return l.takeOrReenter(server, owner, leaseMs, waitMs)
}

// FairTryLockWait is fair_try_lock_wait.lua: take the lock as FairTryLock
// does, or else join the queue or stay in it. When not acquired the reply is
// how long to wait before trying again (a message on the waiter's channel
// may come sooner):
//
//   - newly queued: until the waiter ahead runs out (its deadline - now), or
//     the remaining lease when nobody is ahead (NoExpiry for no lease);
//   - already queued, lock held: the remaining lease; but for the waiter
//     right behind the head at most grace (not in Redisson), so that it is
//     the one to notice and prune a dead head soon after the release;
//   - already queued, lock free (so someone else is the head): the head gets
//     its grace, then the time until the head's deadline, at least 1 ms
//     (Redisson replies 0 and its waiters busy-poll, hazard H2).
func (l *Lock) FairTryLockWait(server, now int64, owner string, leaseMs, waitMs, graceMs int64) (acquired bool, ttlMs int64) {
	l.Advance(server)
	l.pruneStaleHeads(now)
	if l.takeOrReenter(server, owner, leaseMs, waitMs) {
		return true, 0
	}
	pttl := l.PTTL(server)

	if _, queued := l.Deadlines[owner]; queued {
		if l.Locked() {
			secondInLine := len(l.Queue) > 1 && l.Queue[1] == owner
			if graceMs > 0 && secondInLine && (pttl == NoExpiry || pttl > graceMs) {
				return false, graceMs
			}
			return false, pttl
		}
		// Free, and owner is queued but could not take it: someone else is
		// the head, and it is the head's turn to act.
		_, deadline := l.clampHead(now, graceMs)
		return false, max(1, deadline-now)
	}

	// Join at the tail. The reply is how long until this waiter can be
	// expected at the head: the tail's remaining time, or the lease.
	ttl := pttl
	if n := len(l.Queue); n > 0 {
		// A tail that is owner itself, or has no deadline, can only come
		// from keys edited by hand; the script then falls back to the lease.
		if tail := l.Queue[n-1]; tail != owner {
			if d, ok := l.Deadlines[tail]; ok {
				ttl = d - now
			}
		}
	}
	l.Deadlines[owner] = now + ttl + waitMs
	l.Queue = append(l.Queue, owner)
	return false, ttl
}

// FairAcquireFailed is fair_acquire_failed.lua: owner gives up waiting and
// leaves the queue. Everyone behind it moves up by its slot waitMs, which
// must be the slot it queued with (else the deadlines behind it are shifted
// wrongly, Redisson's hazard H3). Running it again, or for an owner that is
// not queued, changes nothing.
//
// Not in Redisson: when the leaver was the head and the lock is free, the
// new head is woken, since no release is coming that would wake it.
func (l *Lock) FairAcquireFailed(server int64, owner string, waitMs int64) {
	l.Advance(server)
	at := slices.Index(l.Queue, owner)
	if at >= 0 {
		for _, w := range l.Queue[at+1:] {
			l.Deadlines[w] -= waitMs
		}
	}
	delete(l.Deadlines, owner)
	l.Queue = slices.DeleteFunc(l.Queue, func(w string) bool { return w == owner })
	if at == 0 && !l.Locked() && len(l.Queue) > 0 {
		l.publish(l.names.WaiterChannel(l.Queue[0]))
	}
}

// FairUnlock is fair_unlock.lua: release one hold of owner, as Unlock does,
// but a release wakes only the queue head, on its own channel, after giving
// it its grace.
//
// Not in Redisson (hazard H4): when the lock no longer exists at all
// (expired, or forced), the reply is NotHeld, but the head is still given its
// grace and woken: the lock is free and nobody else would tell it. That
// reply is not latched.
func (l *Lock) FairUnlock(server, now int64, owner string, leaseMs int64, requestID string, latchMs, graceMs int64) UnlockResult {
	l.Advance(server)
	if r, ok := l.latched(requestID); ok {
		return r
	}
	l.pruneStaleHeads(now)
	if !l.Locked() {
		l.handOver(now, graceMs)
		return NotHeld
	}
	if l.Holds[owner] == 0 {
		return NotHeld
	}
	if l.Holds[owner]--; l.Holds[owner] > 0 {
		l.LeaseEnd = server + leaseMs
		l.latch(requestID, StillHeld, server, latchMs)
		return StillHeld
	}
	clear(l.Holds)
	l.latch(requestID, Released, server, latchMs)
	l.handOver(now, graceMs)
	return Released
}

// FairForceUnlock is fair_force_unlock.lua: delete the lock whoever holds
// it; if there was one, hand it over to the head as a release does.
func (l *Lock) FairForceUnlock(server, now int64, graceMs int64) bool {
	l.Advance(server)
	l.pruneStaleHeads(now)
	if !l.Locked() {
		return false
	}
	clear(l.Holds)
	l.handOver(now, graceMs)
	return true
}

// pruneStaleHeads removes dead heads: a head whose deadline is at or before
// now, or that has no deadline (H1). Deadlines of the others stay.
func (l *Lock) pruneStaleHeads(now int64) {
	for len(l.Queue) > 0 {
		head := l.Queue[0]
		if d, ok := l.Deadlines[head]; ok && d > now {
			return
		}
		delete(l.Deadlines, head)
		l.Queue = l.Queue[1:]
	}
}

// takeOrReenter takes a free lock for owner if nobody is queued or owner is
// the head, or re-enters a lock owner holds. A fresh take removes owner from
// the queue and moves every remaining deadline earlier by owner's slot.
func (l *Lock) takeOrReenter(server int64, owner string, leaseMs, waitMs int64) bool {
	if l.Locked() {
		if l.Holds[owner] == 0 {
			return false
		}
		l.Holds[owner]++
		l.LeaseEnd = server + leaseMs
		return true
	}
	if len(l.Queue) > 0 && l.Queue[0] != owner {
		return false
	}
	if len(l.Queue) > 0 {
		l.Queue = l.Queue[1:]
	}
	delete(l.Deadlines, owner)
	for w := range l.Deadlines {
		l.Deadlines[w] -= waitMs
	}
	l.Holds[owner] = 1
	l.LeaseEnd = server + leaseMs
	return true
}

// clampHead gives the head its grace: its deadline becomes now + grace if
// that is earlier. It returns the head and its deadline; the caller has
// pruned, so the head has a deadline.
func (l *Lock) clampHead(now, graceMs int64) (head string, deadline int64) {
	if len(l.Queue) == 0 {
		return "", 0
	}
	head = l.Queue[0]
	deadline = l.Deadlines[head]
	if graceMs > 0 && deadline > now+graceMs {
		deadline = now + graceMs
		l.Deadlines[head] = deadline
	}
	return head, deadline
}

// handOver runs when the lock has just become free: the head gets its grace
// and is woken on its own channel. Nobody else is woken.
func (l *Lock) handOver(now, graceMs int64) {
	if head, _ := l.clampHead(now, graceMs); head != "" {
		l.publish(l.names.WaiterChannel(head))
	}
}
