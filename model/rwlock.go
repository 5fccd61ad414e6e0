package model

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// # The read-write lock
//
// Redisson's RReadWriteLock (rwlock package, lua/rw_*.lua): one hash with a
// "mode" field ("read" or "write"), reader fields "<uuid>:<tid>" and writer
// fields "<uuid>:<tid>:write", each a hold count; the hash's expiry is the
// lock's lease. Each read hold k of a reader also has a key
// "{name}:<reader>:rwlock_timeout:<k>" whose expiry is that hold's lease.
// Both halves publish on "redisson_rwlock:{name}": "0" when a read unlock
// frees the lock, "1" when a writer releases its last write hold.
//
// The rules, as Redisson's (reference section 7) except where marked:
//   - a hash with no "mode" is a lock of another kind (reentrant, fair,
//     fenced) on the same name: it keeps both halves out (Redisson took it);
//   - a free lock is taken by either half; a read-locked lock is shared by
//     every reader; a write-locked lock admits only its writer, to re-enter
//     or to read; no upgrade: any read hold keeps every writer out;
//   - an acquisition sets the lease to the larger of the TTL and its own
//     (Redisson: a write re-entry adds its lease to the TTL, H6);
//   - a read unlock drops the caller's latest read hold and its key; when
//     holds of the caller remain, the dropped key's expiry passes to the
//     caller's next key if later (not in Redisson: a Go handle's holds are
//     valid until its latest acquisition's lease); with other holds left,
//     in read mode, the lease becomes the longest read-hold key's remaining
//     time (in write mode it is left alone: not in Redisson, which cut the
//     writer's lease to its reads'); with none left the lock is deleted;
//   - the unlock replies: StillHeld when the caller still holds holds of
//     its half, Released when it holds none any more (Redisson replies 0
//     for a read unlock that leaves other owners' holds);
//   - an unlock of a free lock publishes but stores no latch (H5);
//   - a write unlock that leaves the writer's reads switches to read mode
//     and publishes "1" (Redisson: no message), with the lease of its
//     longest read hold's key; when none of those keys lives it frees the
//     lock (Redisson: read mode with the writer's lease all the same), so a
//     read-locked lock never outlives its longest read hold;
//   - a reader whose read-hold keys have all expired while other holds kept
//     the hash holds nothing (not in Redisson): its next acquisition
//     replaces its field with a new hold (count 1) instead of re-entering
//     it, and its unlock removes the field whole and replies NotHeld;
//   - renewal sets every read-hold key of the owner (writing an expired one
//     again), and the lock, to the larger of its TTL and the lease
//     (Redisson: to the lease, and an expired key stays gone); a reader
//     whose keys have all expired is not renewed (Redisson renews it: a
//     late renewal brought a lost hold back, issue 19 case 5).

// ReadUnlockMessage is what a write unlock publishes: wake every waiter.
const ReadUnlockMessage = "1"

// RWNames are the key and channel names of one read-write lock.
type RWNames struct {
	Lock    string // the hash
	Channel string // redisson_rwlock:{name}
	prefix  string // "{name}", or name when it carries a hash tag
	latch   string
}

// RWNamesFor returns the names of the read-write lock called name.
func RWNamesFor(name string) RWNames {
	p := "{" + name + "}"
	if strings.Contains(name, "{") {
		p = name
	}
	return RWNames{Lock: name, Channel: tagged("redisson_rwlock", name), prefix: p, latch: tagged("redisson_unlock_latch", name)}
}

// TimeoutKey is the key of owner's read hold k.
func (n RWNames) TimeoutKey(owner string, k int64) string {
	return fmt.Sprintf("%s:%s:rwlock_timeout:%d", n.prefix, owner, k)
}

// TimeoutPrefix is what every read-hold key starts with.
func (n RWNames) TimeoutPrefix() string { return n.prefix + ":" }

// LatchPrefix is what every unlock latch key of this lock starts with.
func (n RWNames) LatchPrefix() string { return n.latch + ":" }

// WriterOf is the writer id of reader: "<reader>:write".
func WriterOf(reader string) string { return reader + ":write" }

// IsWriter reports a writer id.
func IsWriter(owner string) bool { return strings.HasSuffix(owner, ":write") }

// RW is the whole Redis state of one read-write lock, plus the messages
// published. Make one with NewRW.
type RW struct {
	names RWNames
	// Mode is the hash's "mode" field: "" when the lock is free.
	Mode string
	// Holds are the hash's other fields: owner -> hold count.
	Holds map[string]int64
	// LeaseEnd is when the hash expires (server ms), or NoExpiry.
	LeaseEnd int64
	// Timeouts are the read-hold keys that exist: key -> expiry (server ms).
	Timeouts map[string]int64
	// Latches are the unlock latches by request id.
	Latches   map[string]Latch
	Published []Message
}

// NewRW returns the empty state of the read-write lock called name.
func NewRW(name string) *RW {
	return &RW{names: RWNamesFor(name), Holds: map[string]int64{}, Timeouts: map[string]int64{}, Latches: map[string]Latch{}}
}

// free reports a lock nobody holds. A hash with holds but no mode is a
// lock of another kind on the same name (reentrant, fair, fenced): held,
// and it keeps both halves out (not in Redisson, which took it).
func (l *RW) free() bool { return l.Mode == "" && len(l.Holds) == 0 }

// OtherOwner is the owner of a lock of another kind, in OtherLock.
const OtherOwner = "other:1"

// OtherLock is a lock of another kind (a reentrant lock, say) taking the
// free name for leaseMs: a hash with its owner's field and no mode. It
// reports false, changing nothing, when the name is held.
func (l *RW) OtherLock(server int64, leaseMs int64) bool {
	l.Advance(server)
	if !l.free() {
		return false
	}
	l.Holds[OtherOwner] = 1
	l.LeaseEnd = server + leaseMs
	return true
}

// OtherUnlock is that lock's release: it deletes the hash when held by it.
func (l *RW) OtherUnlock(server int64) bool {
	l.Advance(server)
	if l.Mode != "" || l.Holds[OtherOwner] == 0 {
		return false
	}
	clear(l.Holds)
	return true
}

// Names are the lock's names.
func (l *RW) Names() RWNames { return l.names }

// Clone is a deep copy.
func (l *RW) Clone() *RW {
	c := *l
	c.Holds = maps.Clone(l.Holds)
	c.Timeouts = maps.Clone(l.Timeouts)
	c.Latches = maps.Clone(l.Latches)
	c.Published = slices.Clone(l.Published)
	return &c
}

// Advance expires what has expired by server time server.
func (l *RW) Advance(server int64) {
	if !l.free() && l.LeaseEnd != NoExpiry && l.LeaseEnd <= server {
		l.Mode = ""
		clear(l.Holds)
	}
	for k, e := range l.Timeouts {
		if e <= server {
			delete(l.Timeouts, k)
		}
	}
	for id, la := range l.Latches {
		if la.ExpiresAt <= server {
			delete(l.Latches, id)
		}
	}
}

// PTTL is Redis's PTTL of the hash.
func (l *RW) PTTL(server int64) int64 {
	l.Advance(server)
	switch {
	case l.free():
		return NoLock
	case l.LeaseEnd == NoExpiry:
		return NoExpiry
	}
	return l.LeaseEnd - server
}

func (l *RW) keyPTTL(server int64, key string) int64 {
	e, ok := l.Timeouts[key]
	if !ok {
		return NoLock
	}
	return e - server
}

// extend sets the lease to the larger of the TTL and leaseMs.
func (l *RW) extend(server, leaseMs int64) {
	l.LeaseEnd = server + max(l.PTTL(server), leaseMs)
}

func (l *RW) publish(payload string) {
	l.Published = append(l.Published, Message{Channel: l.names.Channel, Payload: payload})
}

func (l *RW) latch(requestID string, r UnlockResult, server, latchMs int64) {
	l.Latches[requestID] = Latch{Result: r, ExpiresAt: server + latchMs}
}

// ReadAcquire is rw_read_acquire.lua for reader.
func (l *RW) ReadAcquire(server int64, reader string, leaseMs int64) (acquired bool, ttlMs int64) {
	l.Advance(server)
	switch {
	case l.free():
		l.Mode = "read"
		l.Holds[reader] = 1
		l.Timeouts[l.names.TimeoutKey(reader, 1)] = server + leaseMs
		l.LeaseEnd = server + leaseMs
	case l.Mode == "read" || (l.Mode == "write" && l.Holds[WriterOf(reader)] > 0):
		if l.Holds[reader] > 0 && !l.readerLive(server, reader) {
			delete(l.Holds, reader) // a stale field: a new hold replaces it
		}
		l.Holds[reader]++
		l.Timeouts[l.names.TimeoutKey(reader, l.Holds[reader])] = server + leaseMs
		l.extend(server, leaseMs)
	default:
		return false, l.PTTL(server)
	}
	return true, 0
}

// WriteAcquire is rw_write_acquire.lua for writer ("<uuid>:<tid>:write").
func (l *RW) WriteAcquire(server int64, writer string, leaseMs int64) (acquired bool, ttlMs int64) {
	l.Advance(server)
	switch {
	case l.free():
		l.Mode = "write"
		l.Holds[writer] = 1
		l.LeaseEnd = server + leaseMs
	case l.Mode == "write" && l.Holds[writer] > 0:
		l.Holds[writer]++
		l.extend(server, leaseMs)
	default:
		return false, l.PTTL(server)
	}
	return true, 0
}

// ReadUnlock is rw_read_unlock.lua for reader.
func (l *RW) ReadUnlock(server int64, reader, requestID string, latchMs int64) UnlockResult {
	l.Advance(server)
	if la, ok := l.Latches[requestID]; ok {
		return la.Result
	}
	if l.Mode == "" {
		l.publish(UnlockMessage)
		return NotHeld
	}
	if l.Holds[reader] == 0 {
		return NotHeld
	}
	// A reader whose keys have all expired: its field is removed whole, the
	// rest as for a last hold, the reply NotHeld and no latch.
	stale := !l.readerLive(server, reader)
	latch := func(r UnlockResult) UnlockResult {
		if stale {
			return NotHeld
		}
		l.latch(requestID, r, server, latchMs)
		return r
	}
	var left int64
	if stale {
		delete(l.Holds, reader)
	} else {
		l.Holds[reader]--
		left = l.Holds[reader]
		if left == 0 {
			delete(l.Holds, reader)
		}
	}
	dropped := l.names.TimeoutKey(reader, left+1)
	if left > 0 {
		if t := l.keyPTTL(server, dropped); t > 0 && t > l.keyPTTL(server, l.names.TimeoutKey(reader, left)) {
			l.Timeouts[l.names.TimeoutKey(reader, left)] = server + t
		}
	}
	delete(l.Timeouts, dropped)
	mine := Released
	if left > 0 {
		mine = StillHeld
	}
	if len(l.Holds) > 0 {
		if l.Mode == "write" {
			return latch(mine)
		}
		if longest := l.longestRead(server); longest > 0 {
			l.LeaseEnd = server + longest
			return latch(mine)
		}
	}
	l.Mode = ""
	clear(l.Holds)
	l.publish(UnlockMessage)
	return latch(Released)
}

// WriteUnlock is rw_write_unlock.lua for writer.
func (l *RW) WriteUnlock(server int64, writer string, leaseMs int64, requestID string, latchMs int64) UnlockResult {
	l.Advance(server)
	if la, ok := l.Latches[requestID]; ok {
		return la.Result
	}
	if l.Mode == "" {
		l.publish(ReadUnlockMessage)
		return NotHeld
	}
	if l.Mode != "write" || l.Holds[writer] == 0 {
		return NotHeld
	}
	if l.Holds[writer]--; l.Holds[writer] > 0 {
		l.extend(server, leaseMs)
		l.latch(requestID, StillHeld, server, latchMs)
		return StillHeld
	}
	delete(l.Holds, writer)
	if longest := l.longestRead(server); longest > 0 {
		l.Mode = "read"
		l.LeaseEnd = server + longest
	} else {
		l.Mode = ""
		clear(l.Holds)
	}
	l.publish(ReadUnlockMessage)
	l.latch(requestID, Released, server, latchMs)
	return Released
}

// ForceUnlock is rw_force_unlock.lua: the read half (write false) deletes a
// read-locked lock and publishes "0", the write half a write-locked lock
// and publishes "1". The read-hold keys are left to expire.
func (l *RW) ForceUnlock(server int64, write bool) bool {
	l.Advance(server)
	mode, msg := "read", UnlockMessage
	if write {
		mode, msg = "write", ReadUnlockMessage
	}
	if l.Mode != mode {
		return false
	}
	l.Mode = ""
	clear(l.Holds)
	l.publish(msg)
	return true
}

// Renew is rw_renew.lua for one (lock, owner): when owner holds the lock,
// every key of its read holds and the lock get the larger of their TTL and
// leaseMs.
func (l *RW) Renew(server int64, owner string, leaseMs int64) bool {
	l.Advance(server)
	n := l.Holds[owner]
	if n == 0 {
		return false
	}
	if !IsWriter(owner) {
		if !l.readerLive(server, owner) {
			return false // its lease is over: a late renewal does not revive it
		}
		for k := n; k >= 1; k-- {
			key := l.names.TimeoutKey(owner, k)
			l.Timeouts[key] = server + max(l.keyPTTL(server, key), leaseMs)
		}
	}
	l.extend(server, leaseMs)
	return true
}

// longestRead is the longest remaining time of a read hold's key (of holds
// 1..count of each field), or a negative number when none lives.
func (l *RW) longestRead(server int64) int64 {
	longest := int64(-3)
	for f, n := range l.Holds {
		for k := n; k >= 1; k-- {
			longest = max(longest, l.keyPTTL(server, l.names.TimeoutKey(f, k)))
		}
	}
	return longest
}

// CheckReadLive checks, on a state at server time server, that a lock in
// read mode lives no longer than its longest read hold (within tol): the
// lock is never read-locked by nobody.
func (l *RW) CheckReadLive(server, tol int64) error {
	if l.Mode != "read" {
		return nil
	}
	longest := l.longestRead(server)
	if l.LeaseEnd == NoExpiry || longest <= 0 || server+longest < l.LeaseEnd-tol {
		return fmt.Errorf("read mode until %d, but the longest read hold ends at %d", l.LeaseEnd, server+longest)
	}
	return nil
}

// readerLive reports whether one of reader's read holds' keys (1..its hold
// count) still lives: a reader whose keys have all expired holds nothing in
// Redis's terms, though its field may still be in the hash (another hold
// kept the hash alive).
func (l *RW) readerLive(server int64, reader string) bool {
	for k := l.Holds[reader]; k >= 1; k-- {
		if l.keyPTTL(server, l.names.TimeoutKey(reader, k)) > 0 {
			return true
		}
	}
	return false
}

// CheckShape checks the read-write lock's exclusion rule on a state,
// whoever made it: the lock is free with no holds, or held in write mode
// by one writer (with, at most, that writer's own read holds), or held in
// read mode by readers only; every hold count is positive.
func (l *RW) CheckShape() error {
	for o, n := range l.Holds {
		if n <= 0 {
			return fmt.Errorf("%s has hold count %d", o, n)
		}
	}
	var writers, readers []string
	for o := range l.Holds {
		if IsWriter(o) {
			writers = append(writers, o)
		} else {
			readers = append(readers, o)
		}
	}
	slices.Sort(writers)
	slices.Sort(readers)
	if l.Holds[OtherOwner] > 0 && (l.Mode != "" || len(l.Holds) > 1) {
		return fmt.Errorf("a lock of another kind's holder %s shares the hash: mode %q, holds %v", OtherOwner, l.Mode, l.Holds)
	}
	switch l.Mode {
	case "":
		if len(l.Holds) > 0 && l.Holds[OtherOwner] == 0 {
			return fmt.Errorf("no mode but holds %v", l.Holds)
		}
	case "write":
		if len(writers) != 1 {
			return fmt.Errorf("write mode with writers %v", writers)
		}
		for _, r := range readers {
			if WriterOf(r) != writers[0] {
				return fmt.Errorf("reader %s holds beside writer %s", r, writers[0])
			}
		}
	case "read":
		if len(writers) > 0 || len(readers) == 0 {
			return fmt.Errorf("read mode with writers %v, readers %v", writers, readers)
		}
	default:
		return fmt.Errorf("mode %q", l.Mode)
	}
	return nil
}

// String is a compact description for test failures.
func (l *RW) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mode=%q holds=%v lease=%d", l.Mode, l.Holds, l.LeaseEnd)
	keys := slices.Sorted(maps.Keys(l.Timeouts))
	for _, k := range keys {
		fmt.Fprintf(&b, " %s@%d", strings.TrimPrefix(k, l.names.TimeoutPrefix()), l.Timeouts[k])
	}
	if len(l.Latches) > 0 {
		fmt.Fprintf(&b, " latches=%v", l.Latches)
	}
	return b.String()
}
