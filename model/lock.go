// Package model is the reference semantics of the locks in plain Go: what
// each Lua script in package lua does to one lock's state, with time passed
// in as arguments. It imports nothing that talks to Redis.
//
// The property tests (package propertytests) run every operation both here
// and on a Redis through package lua, and require the same replies, the same
// keys and the same published messages. So this package is the specification
// the scripts are checked against; read it to learn the locks.
//
// # Two clocks
//
// A lock's lease and an unlock latch's lifetime are key expiries: they run
// on the Redis server's clock. A fair-lock waiter's deadline is a score that
// clients compare with their own wall clock ("now", passed by the caller),
// exactly as in Redisson. Every method therefore takes the server's clock,
// in milliseconds, and the fair-lock methods also take the caller's now.
// Methods never move time themselves: a key whose expiry is at or before the
// server clock a method is given is gone when the method starts.
//
// # The reentrant lock
//
// A hash from owner to hold count, whose key expiry is the lease. Acquire
// takes a free lock or re-enters a lock the owner holds; either way the lease
// is reset. Unlock drops one hold; dropping the last deletes the hash and
// publishes "0" on the lock's channel. Unlock is idempotent per request id:
// its outcome is stored in a latch key for a while and a retry returns it.
//
// # The fair lock
//
// The same hash, plus a FIFO queue of waiters and, for each waiter, a
// deadline: see fair.go.
package model

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Messages published on lock channels.
const (
	// UnlockMessage is what an unlock publishes: wake one waiter.
	UnlockMessage = "0"
)

// UnlockResult is what an unlock script replies.
type UnlockResult int

const (
	// NotHeld: the caller did not hold the lock (script reply nil).
	NotHeld UnlockResult = iota
	// StillHeld: one hold was released, the caller still holds the lock
	// (script reply 0).
	StillHeld
	// Released: the lock is free now (script reply 1).
	Released
)

func (r UnlockResult) String() string {
	switch r {
	case NotHeld:
		return "not-held"
	case StillHeld:
		return "still-held"
	case Released:
		return "released"
	}
	return fmt.Sprintf("UnlockResult(%d)", int(r))
}

// NoLock and NoExpiry are the values PTTL reports for a missing key and for
// a key without expiry; the scripts pass them on as replies.
const (
	NoLock   int64 = -2
	NoExpiry int64 = -1
)

// Message is one PUBLISH a script made.
type Message struct {
	Channel string
	Payload string
}

// Latch is a stored unlock outcome: the reply a retried unlock with the same
// request id gets, until the latch expires.
type Latch struct {
	Result    UnlockResult // StillHeld ("0") or Released ("1"); nil replies are never latched
	ExpiresAt int64        // server clock, ms
}

// Lock is the whole Redis state of one lock name, plus the log of messages
// its scripts published. The zero value is not usable: call New.
//
// Field by field it is what the keys hold, so a dump of a real Redis can be
// turned into a Lock and checked with the same invariants.
type Lock struct {
	names Names

	// Holds is the lock hash: owner id -> hold count. The lock exists (is
	// held) exactly when Holds is not empty.
	Holds map[string]int64
	// LeaseEnd is when the hash expires, on the server clock in ms, or
	// NoExpiry. Meaningful only while the lock is held.
	LeaseEnd int64

	// Queue is the fair lock's waiter list, head first.
	Queue []string
	// Deadlines is the fair lock's timeout zset: waiter -> absolute deadline
	// in client-clock ms. Go's map zero value matches ZINCRBY, which creates
	// a missing member at 0 before adding.
	Deadlines map[string]int64

	// GraceOwner and GraceEnd are the fair lock's head grace key (not in
	// Redisson): the owner id it names ("" when the key does not exist) and
	// when the key expires, on the server clock in ms. The grace itself ends
	// GraceMargin earlier. GraceSecond: it is the owner's second grace (the
	// key holds "+" + owner), started when its first ran out; only a second
	// grace that runs out prunes. See fair.go.
	GraceOwner  string
	GraceEnd    int64
	GraceSecond bool

	// Seqs are the scalable engine's join sequences (queue_scalable.lua):
	// a waiter joining gets the tail's + 1, or 1 when nobody is queued.
	// Only the entries of queued owners mean anything (others are left
	// behind by removals and overwritten by the next join). The Redisson
	// engine keeps none; its position is the index in Queue. See Ahead.
	Seqs map[string]int64

	// Latches are the unlock latches by request id.
	Latches map[string]Latch

	// Token is the fencing token key "redisson_lock_token:{name}" (0: absent):
	// INCRed by every fenced acquisition and by every fair take. It never
	// expires. See fenced.go.
	Token int64
	// AcquireLatches are the acquisition latches by request id (modelled for
	// the fenced lock's machine; see fenced.go).
	AcquireLatches map[string]AcquireLatch

	// Handoff: this is the scalable engine's lock, whose release grants
	// the lock to any live head directly (fair.go, handoff). The
	// Redisson-compatible engine's grants it only to a head of this
	// library's clients (TakesNotes; issue 33).
	Handoff bool
	// Notes are what a lock waiter joined with, for a direct handoff: every
	// waiter of the scalable engine (queue_scalable.lua keeps them after the
	// join sequence in s:<o>), on the Redisson engine those of this
	// library's clients (queue_redisson.lua, "fairlock_notes:{name}"). Only
	// the entries of queued owners mean anything. An owner's entry goes
	// when it leaves the queue (dropNote).
	Notes map[string]Note
	// NotesEnd: when the Redisson engine's notes hash expires (server
	// clock; 0: no hash). A join with a note keeps it until NoteMargin past
	// the joiner's deadline at least (queue_redisson.lua, q_append).
	NotesEnd int64

	// Published is every message published so far, in order.
	Published []Message
}

// Note is a waiter's handoff note: the lease, slot, acquisition request id
// and latch lifetime of the call that made it join.
type Note struct {
	LeaseMs, SlotMs, LatchMs int64
	RequestID                string
}

// New returns the empty state of the lock called name.
func New(name string) *Lock {
	return &Lock{
		names:     NamesFor(name),
		Holds:     map[string]int64{},
		Deadlines: map[string]int64{},
		Seqs:      map[string]int64{},
		Latches:   map[string]Latch{},

		AcquireLatches: map[string]AcquireLatch{},
		Notes:          map[string]Note{},
	}
}

// Names returns the lock's key and channel names.
func (l *Lock) Names() Names { return l.names }

// Clone returns a deep copy.
func (l *Lock) Clone() *Lock {
	c := *l
	c.Holds = maps.Clone(l.Holds)
	c.Deadlines = maps.Clone(l.Deadlines)
	c.Seqs = maps.Clone(l.Seqs)
	c.Latches = maps.Clone(l.Latches)
	c.AcquireLatches = maps.Clone(l.AcquireLatches)
	c.Notes = maps.Clone(l.Notes)
	c.Queue = slices.Clone(l.Queue)
	c.Published = slices.Clone(l.Published)
	return &c
}

// Locked reports whether anyone holds the lock.
func (l *Lock) Locked() bool { return len(l.Holds) > 0 }

// Holder returns the owner holding the lock, or "" when it is free. With
// more than one owner in the hash (never produced by the scripts) it
// returns the smallest.
func (l *Lock) Holder() string {
	owners := slices.Sorted(maps.Keys(l.Holds))
	if len(owners) == 0 {
		return ""
	}
	return owners[0]
}

// Advance expires what has expired by server time server: the lock when its
// lease has ended, the head grace key, and latches past their lifetime.
// Redis does this lazily on access; every method calls it first, so callers
// need not.
func (l *Lock) Advance(server int64) {
	if l.Locked() && l.LeaseEnd != NoExpiry && l.LeaseEnd <= server {
		clear(l.Holds)
	}
	if l.GraceOwner != "" && l.GraceEnd <= server {
		l.GraceOwner, l.GraceSecond = "", false
	}
	if l.NotesEnd != 0 && l.NotesEnd <= server {
		clear(l.Notes)
		l.NotesEnd = 0
	}
	for id, la := range l.Latches {
		if la.ExpiresAt <= server {
			delete(l.Latches, id)
		}
	}
	for id, la := range l.AcquireLatches {
		if la.ExpiresAt <= server {
			delete(l.AcquireLatches, id)
		}
	}
}

// PTTL is what Redis's PTTL of the lock hash reports at server time server:
// NoLock, NoExpiry, or the remaining lease in ms.
func (l *Lock) PTTL(server int64) int64 {
	l.Advance(server)
	switch {
	case !l.Locked():
		return NoLock
	case l.LeaseEnd == NoExpiry:
		return NoExpiry
	}
	return l.LeaseEnd - server
}

func (l *Lock) publish(channel string) {
	l.Published = append(l.Published, Message{Channel: channel, Payload: UnlockMessage})
}

func (l *Lock) latch(requestID string, r UnlockResult, server, latchMs int64) {
	if latchMs <= 0 {
		return // fair unlock: no latch lifetime, no latch (unlock.lua requires one)
	}
	l.Latches[requestID] = Latch{Result: r, ExpiresAt: server + latchMs}
}

// latched returns the stored outcome of an earlier unlock with the same
// request id, if its latch is still alive.
func (l *Lock) latched(requestID string) (UnlockResult, bool) {
	la, ok := l.Latches[requestID]
	return la.Result, ok
}

// Acquire is acquire.lua: take the lock when it is free, or re-enter it when
// owner holds it; either way the lease is reset to leaseMs. Otherwise the
// reply is the holder's remaining lease (NoExpiry for none).
func (l *Lock) Acquire(server int64, owner string, leaseMs int64) (acquired bool, ttlMs int64) {
	l.Advance(server)
	if l.Locked() && l.Holds[owner] == 0 {
		return false, l.PTTL(server)
	}
	l.Holds[owner]++
	l.LeaseEnd = server + leaseMs
	return true, 0
}

// Unlock is unlock.lua: release one hold of owner. A retry with a request id
// whose latch is alive replies the first outcome without doing anything.
// Releasing the last hold deletes the lock and publishes "0" on the lock
// channel, which wakes one waiter of each subscribed client, and on the
// channel of a fair queue's head, if any.
func (l *Lock) Unlock(server int64, owner string, leaseMs int64, requestID string, latchMs int64) UnlockResult {
	l.Advance(server)
	if r, ok := l.latched(requestID); ok {
		return r
	}
	if l.Holds[owner] == 0 {
		return NotHeld
	}
	if l.Holds[owner]--; l.Holds[owner] > 0 {
		// Still re-entered: the remaining holds get a fresh lease.
		l.LeaseEnd = server + leaseMs
		l.latch(requestID, StillHeld, server, latchMs)
		return StillHeld
	}
	clear(l.Holds)
	l.publish(l.names.Channel)
	l.wakeFairHead()
	l.latch(requestID, Released, server, latchMs)
	return Released
}

// wakeFairHead: a reentrant release also wakes the head of a fair queue kept
// on the same name, on its own channel (fair waiters do not listen on the
// plain one). Not in Redisson.
func (l *Lock) wakeFairHead() {
	if len(l.Queue) > 0 {
		l.publish(l.names.WaiterChannel(l.Queue[0]))
	}
}

// ForceUnlock is force_unlock.lua: delete the lock whoever holds it, and
// publish "0" when there was one (and wake a fair queue's head).
func (l *Lock) ForceUnlock(server int64) bool {
	l.Advance(server)
	if !l.Locked() {
		return false
	}
	clear(l.Holds)
	l.publish(l.names.Channel)
	l.wakeFairHead()
	return true
}

// Renew is renew.lua for this one lock: when owner still holds it, reset the
// lease to leaseMs and report true.
func (l *Lock) Renew(server int64, owner string, leaseMs int64) bool {
	l.Advance(server)
	if l.Holds[owner] == 0 {
		return false
	}
	l.LeaseEnd = server + leaseMs
	return true
}

// Persist is Redis's PERSIST on the lock hash (Redisson's clearExpire): the
// lock loses its lease and stays until it is unlocked or deleted. No script
// does this; the property tests use it to reach the scripts' branches for a
// lock without expiry (PTTL -1).
func (l *Lock) Persist(server int64) bool {
	l.Advance(server)
	if !l.Locked() || l.LeaseEnd == NoExpiry {
		return false
	}
	l.LeaseEnd = NoExpiry
	return true
}

// String is a compact description for test failures.
func (l *Lock) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "holds=%v", l.Holds)
	if l.Locked() {
		fmt.Fprintf(&b, " leaseEnd=%d", l.LeaseEnd)
	}
	b.WriteString(" queue=[")
	for i, w := range l.Queue {
		if i > 0 {
			b.WriteByte(' ')
		}
		if d, ok := l.Deadlines[w]; ok {
			fmt.Fprintf(&b, "%s@%d", w, d)
		} else {
			fmt.Fprintf(&b, "%s@none", w)
		}
	}
	b.WriteByte(']')
	if l.GraceOwner != "" {
		fmt.Fprintf(&b, " grace=%s@%d", l.GraceOwner, l.GraceEnd-GraceMargin)
		if l.GraceSecond {
			b.WriteString("(second)")
		}
	}
	for w, d := range l.Deadlines {
		if !slices.Contains(l.Queue, w) {
			fmt.Fprintf(&b, " unqueued:%s@%d", w, d)
		}
	}
	if len(l.Latches) > 0 {
		fmt.Fprintf(&b, " latches=%v", l.Latches)
	}
	if l.Token != 0 {
		fmt.Fprintf(&b, " token=%d", l.Token)
	}
	if len(l.AcquireLatches) > 0 {
		fmt.Fprintf(&b, " acquireLatches=%v", l.AcquireLatches)
	}
	return b.String()
}
