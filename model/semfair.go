package model

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// SemFair is the reference model of the fair semaphore (lua/sem_fair_*.lua),
// written from its rules, not from the scripts:
//
//   - a pool of Pool permits (PoolSet false: never set; acquisitions are
//     refused); an acquisition asks for n >= 1; one grant per owner at a
//     time;
//   - free permits are the pool less the permits of holders whose lease has
//     not ended; leases end on the server's clock, and a holder whose lease
//     ended is removed (reclaimed) by the next operation that runs, which
//     wakes the front of the queue as a release does;
//   - grants follow arrival order (golang.org/x/sync/semaphore.Weighted): a
//     caller is granted only when nobody is queued ahead of it and its ask
//     fits in the free permits; a head whose ask does not fit blocks every
//     waiter behind it; a request over the pool is refused, and a head whose
//     ask is over the pool (the pool shrank) is dropped;
//   - the fair lock's queue rules, with "the lock is free" read as "the head
//     could be granted now": wait slots and deadlines, pruning of dead heads,
//     the head's two graces, the wake-ups of the first two waiters, the
//     sleep bounds;
//   - an acquisition request id latches its grant (a copy gets the same
//     token while the grant lasts, an error after), abandon voids it and
//     gives a granted copy's permits back; a release id latches a release's
//     answer.
//
// Every instant is the server's clock in ms; each operation takes now.
type SemFair struct {
	Pool    int64
	PoolSet bool
	Holders map[string]int64 // owner -> permits
	Leases  map[string]int64 // owner -> lease end
	Queue   []string
	Wants   map[string]int64 // queued owner -> permits asked
	// Deadlines: queued owner -> deadline (its join time, plus the base,
	// plus its slot; lowered by the slots of those ahead who take or leave).
	Deadlines map[string]int64
	// Seqs are the join sequences (queue_scalable.lua), as Lock.Seqs:
	// the tail's + 1 at a join, 1 in an empty queue; only queued owners'
	// entries mean anything. Joined: the last Acquire put its caller at
	// the tail (the "joined" of its position reply). See Ahead.
	Seqs        map[string]int64
	Joined      bool
	GraceOwner  string
	GraceEnd    int64 // the grace ends; the key lives GraceMargin more
	GraceSecond bool
	// QueueKeysEnd is when the queue and asks keys expire (0: not set);
	// see QueueEnd.
	QueueKeysEnd int64
	Token        int64
	Acquires     map[string]SemLatch // acquisition request id -> latch
	Releases     map[string]SemLatch // release request id -> latch
	Woken        []string            // owners woken, in order
	// Notes are the handoff notes of queued owners that joined with an
	// acquisition latch: what a release needs to grant them the permits
	// directly (see handoff).
	Notes map[string]SemNote
	// Sent are the payloads of the Woken messages (the same index): "0"
	// (a plain wake-up), or a note "s:<sleep ms>:<ahead>" (a waiter woken
	// while the head cannot be granted gets its attempt's reply instead,
	// which its client takes without an attempt: see finish).
	Sent []string
}

// SemNote is a queued owner's handoff note: the lease, slot, request id
// and latch lifetime of the acquisition that joined.
type SemNote struct {
	Lease, Slot, LatchMs int64
	Request              string
}

// SemLatch is an acquisition latch (State "held", "granted" (a release
// granted the permits directly, see handoff), "void", "void:held"; Token
// when held or granted) or a release latch (Result), and when its key expires.
type SemLatch struct {
	State     string
	Token     int64
	Result    int64
	ExpiresAt int64
}

// Errors of the model's operations; each leaves the state unchanged.
var (
	ErrSemNotSet        = errors.New("permits not set")
	ErrSemTooMany       = errors.New("asked for more than the pool")
	ErrSemAlreadyHolds  = errors.New("owner already holds permits")
	ErrSemNegative      = errors.New("pool would be negative")
	ErrSemFairAbandoned = errors.New("request abandoned")
	ErrSemFairGrantOver = errors.New("request granted and its hold is over")
)

// NewSemFair returns an empty semaphore: no pool set, nobody holding or
// queued.
func NewSemFair() *SemFair {
	return &SemFair{Holders: map[string]int64{}, Leases: map[string]int64{}, Wants: map[string]int64{},
		Deadlines: map[string]int64{}, Seqs: map[string]int64{}, Acquires: map[string]SemLatch{}, Releases: map[string]SemLatch{},
		Notes: map[string]SemNote{}}
}

// Clone returns a deep copy.
func (s *SemFair) Clone() *SemFair {
	c := *s
	c.Holders, c.Leases, c.Wants, c.Deadlines = maps.Clone(s.Holders), maps.Clone(s.Leases), maps.Clone(s.Wants), maps.Clone(s.Deadlines)
	c.Seqs, c.Notes = maps.Clone(s.Seqs), maps.Clone(s.Notes)
	c.Acquires, c.Releases = maps.Clone(s.Acquires), maps.Clone(s.Releases)
	c.Queue, c.Woken, c.Sent = slices.Clone(s.Queue), slices.Clone(s.Woken), slices.Clone(s.Sent)
	return &c
}

// SemKeep is how long the fair semaphore's holders and leases keys outlive
// the last lease end, SemQueueKeep how long its queue and asks keys outlive
// the last moment a waiter is known to matter (res_sem.lua's SEM_KEEP and
// SEM_QUEUE_KEEP), in ms.
const (
	SemKeep      int64 = 10_000
	SemQueueKeep int64 = 60_000
)

// HoldersEnd is when the holders and leases keys expire: the latest lease
// end plus SemKeep (ok false: nobody holds, no key).
func (s *SemFair) HoldersEnd() (end int64, ok bool) {
	for _, e := range s.Leases {
		if !ok || e > end {
			end, ok = e, true
		}
	}
	return end + SemKeep, ok
}

// QueueEnd is when the queue and asks keys expire (ok false: nobody
// queued, no key): set by every operation that writes (queueEnd).
func (s *SemFair) QueueEnd() (end int64, ok bool) {
	if len(s.Queue) == 0 || s.QueueKeysEnd == 0 {
		return 0, false
	}
	return s.QueueKeysEnd, true
}

// queueEnd, at the end of an operation that writes (grace: its head
// grace): SemQueueKeep past the latest of the tail's deadline, the end of
// the head's grace, the latest lease end and now plus the grace; 0 when
// nobody is queued (or the tail has no deadline: damage, no TTL).
func (op *semOp) queueEnd(grace int64) {
	s := op.s
	s.QueueKeysEnd = 0
	if len(s.Queue) == 0 {
		return
	}
	end, ok := s.Deadlines[s.Queue[len(s.Queue)-1]]
	if !ok {
		return
	}
	end = max(end, op.now+max(0, grace))
	for _, e := range s.Leases {
		end = max(end, e)
	}
	if s.GraceOwner != "" {
		end = max(end, s.GraceEnd)
	}
	s.QueueKeysEnd = end + SemQueueKeep
}

// Advance drops what expires by itself by now: latches, the grace key
// GraceMargin after its grace, and the holders, leases, queue and asks
// keys SemKeep after the last moment their entries matter (HoldersEnd,
// QueueEnd: after every client is gone without a release, nothing of the
// semaphore but the pool and the token is left). A holder whose lease
// ended stays until an operation reclaims it or its key expires.
func (s *SemFair) Advance(now int64) {
	for _, m := range []map[string]SemLatch{s.Acquires, s.Releases} {
		maps.DeleteFunc(m, func(_ string, l SemLatch) bool { return l.ExpiresAt <= now })
	}
	if end, ok := s.HoldersEnd(); ok && end <= now {
		clear(s.Holders)
		clear(s.Leases)
	}
	if end, ok := s.QueueEnd(); ok && end <= now {
		s.Queue = nil
		clear(s.Wants)
		clear(s.Deadlines)
		clear(s.Notes)
		s.QueueKeysEnd = 0
	}
	if s.GraceOwner != "" && s.GraceEnd+GraceMargin <= now {
		s.clearGrace()
	}
}

func (s *SemFair) clearGrace() { s.GraceOwner, s.GraceEnd, s.GraceSecond = "", 0, false }

// live: owner holds permits whose lease has not ended.
func (s *SemFair) live(owner string, now int64) bool {
	_, ok := s.Holders[owner]
	return ok && s.Leases[owner] > now
}

// used: permits of live holders.
func (s *SemFair) used(now int64) int64 {
	var u int64
	for o, n := range s.Holders {
		if s.live(o, now) {
			u += n
		}
	}
	return u
}

// op is one operation in progress: its clock, the caller's ask, whether
// it reclaimed.
type semOp struct {
	s         *SemFair
	now       int64
	caller    string
	ask       int64
	reclaimed bool
}

func (s *SemFair) begin(now int64) *semOp {
	s.Advance(now)
	op := &semOp{s: s, now: now}
	for o, end := range s.Leases {
		if end <= now {
			delete(s.Holders, o)
			delete(s.Leases, o)
			op.reclaimed = true
		}
	}
	return op
}

func (op *semOp) want(w string) (int64, bool) {
	if w != "" && w == op.caller {
		return op.ask, true
	}
	n, ok := op.s.Wants[w]
	return n, ok
}

// fits: w could be granted now.
func (op *semOp) fits(w string) bool {
	n, ok := op.want(w)
	return op.s.PoolSet && ok && n <= op.s.Pool-op.s.used(op.now)
}

// doomed: w can never be granted.
func (op *semOp) doomed(w string) bool {
	n, ok := op.want(w)
	return !op.s.PoolSet || !ok || n > op.s.Pool
}

func (op *semOp) front() (head, second string) {
	q := op.s.Queue
	if len(q) > 0 {
		head = q[0]
	}
	if len(q) > 1 {
		second = q[1]
	}
	return head, second
}

// remove takes w out of the queue; everyone behind it gets drop earlier.
func (op *semOp) remove(w string, drop int64) bool {
	i := slices.Index(op.s.Queue, w)
	if i < 0 {
		return false
	}
	for _, o := range op.s.Queue[i+1:] {
		op.s.Deadlines[o] -= drop
	}
	op.s.Queue = slices.Delete(op.s.Queue, i, i+1)
	delete(op.s.Deadlines, w)
	delete(op.s.Wants, w)
	delete(op.s.Notes, w)
	return true
}

// prune drops dead heads ahead of caller: doomed, without a deadline, past
// their deadline (only with the caller's grace off), or whose grace ran
// out while they could be granted (the second grace; either with the
// caller's grace off).
func (op *semOp) prune(caller string, grace int64) {
	s := op.s
	for len(s.Queue) > 0 && s.Queue[0] != caller {
		head := s.Queue[0]
		graceRanOut := op.fits(head) && s.GraceOwner == head && s.GraceEnd <= op.now && (s.GraceSecond || grace <= 0)
		deadline, hasDeadline := s.Deadlines[head]
		doomed := op.doomed(head)
		dead := doomed || !hasDeadline || (grace <= 0 && deadline <= op.now) || graceRanOut
		if !dead {
			return
		}
		op.remove(head, 0)
		if doomed {
			s.wake(head, "0") // its next attempt is refused at once
		}
	}
}

// finish keeps the grace valid, starts the head's grace (its second when
// the first ran out) when it could be granted, and wakes the first two
// waiters when they moved up, when capacity was freed or when a grace
// started; never caller.
func (op *semOp) finish(caller, head0, second0 string, freed bool, grace int64) {
	s := op.s
	head, second := op.front()
	started := false
	if head != "" && op.fits(head) {
		if s.GraceOwner != "" && s.GraceOwner != head {
			s.clearGrace()
		}
		if grace > 0 && (s.GraceOwner == "" || (!s.GraceSecond && s.GraceEnd <= op.now)) {
			s.GraceSecond = s.GraceOwner != ""
			s.GraceOwner, s.GraceEnd = head, op.now+grace
			started = true
		}
	} else {
		s.clearGrace()
	}
	if head != "" && head != caller && (freed || started || head != head0) {
		s.wake(head, op.note(head, grace))
	}
	if second != "" && second != caller && (freed || started || second != second0) {
		s.wake(second, op.note(second, grace))
	}
	if len(s.Queue) == 0 {
		clear(s.Wants)
	}
	op.queueEnd(grace)
}

func (s *SemFair) wake(w, payload string) {
	s.Woken = append(s.Woken, w)
	s.Sent = append(s.Sent, payload)
}

// note is what finish sends queued waiter w: a plain wake-up ("0") when
// the head could be granted now (the head must take, the waiter behind it
// may have to prune it), else the reply w's attempt would get, its sleep
// and place, "s:<sleep>:<ahead>" (issue 33: an attempt that changes
// nothing is saved).
func (op *semOp) note(w string, grace int64) string {
	head, _ := op.front()
	if op.fits(head) {
		return "0"
	}
	return "s:" + strconv.FormatInt(op.sleep(w, grace), 10) + ":" + strconv.FormatInt(op.s.Ahead(w), 10)
}

// sleep is a waiter's bound: while the front cannot be granted, until the
// next lease ends (the waiter behind the head at most the grace); while
// the head (someone else) could be granted, until its grace ends (its
// deadline when graces are off); at least 1.
func (op *semOp) sleep(owner string, grace int64) int64 {
	s := op.s
	head, second := op.front()
	w := head
	if w == "" {
		w = owner
	}
	if !op.fits(w) {
		next := int64(-1)
		for o, end := range s.Leases {
			if _, ok := s.Holders[o]; ok && (next < 0 || end-op.now < next) {
				next = end - op.now
			}
		}
		if grace > 0 && second == owner && (next < 0 || next > grace) {
			return grace
		}
		return next
	}
	if head == "" || head == owner {
		return 1
	}
	wait := s.Deadlines[head] - op.now
	if grace > 0 {
		wait = grace
		if s.GraceOwner == head {
			wait = s.GraceEnd - op.now
		}
	} else if s.GraceOwner == head && s.GraceEnd-op.now < wait {
		wait = s.GraceEnd - op.now
	}
	return max(1, wait)
}

// nextEnd: ms until the next lease ends, 0 when nobody holds.
func (op *semOp) nextEnd() int64 {
	next, any := int64(0), false
	for _, end := range op.s.Leases {
		if !any || end-op.now < next {
			next, any = end-op.now, true
		}
	}
	return next
}

// SemAcquire is one acquisition's arguments.
type SemAcquire struct {
	Owner   string
	N       int64
	Lease   int64 // ms, >= 1
	Wait    int64 // the wait slot, ms
	Grace   int64 // head grace, ms (<= 0: off)
	Queue   bool  // join or stay in the queue when not granted
	Request string
	LatchMs int64 // latch lifetime (0: no latch)
}

// Acquire runs one acquisition at now. It returns whether the owner was
// granted, the token (granted) or the sleep bound (not), or an error (the
// state unchanged).
func (s *SemFair) Acquire(now int64, a SemAcquire) (granted bool, value int64, err error) {
	s.Advance(now)
	s.Joined = false
	if a.LatchMs > 0 {
		if l, ok := s.Acquires[a.Request]; ok {
			switch l.State {
			case "void", "void:held":
				return false, 0, ErrSemFairAbandoned
			case "held":
				if s.live(a.Owner, now) {
					return true, l.Token, nil
				}
				return false, 0, ErrSemFairGrantOver
			case "granted":
				// A release granted this request the permits (handoff):
				// the first copy claims the grant, its lease becoming
				// this copy's (never shorter), the latch held.
				if s.live(a.Owner, now) {
					s.Leases[a.Owner] = max(s.Leases[a.Owner], now+a.Lease)
					s.Acquires[a.Request] = SemLatch{State: "held", Token: l.Token, ExpiresAt: now + a.LatchMs}
					return true, l.Token, nil
				}
				return false, 0, ErrSemFairGrantOver
			}
		}
	}
	if s.live(a.Owner, now) {
		// An owner id is one acquisition's: a live grant of the same count
		// is this request's, met by a copy whose latch expired.
		if s.Holders[a.Owner] != a.N {
			return false, 0, ErrSemAlreadyHolds
		}
		s.Token++
		if a.LatchMs > 0 {
			s.Acquires[a.Request] = SemLatch{State: "held", Token: s.Token, ExpiresAt: now + a.LatchMs}
		}
		return true, s.Token, nil
	}
	switch {
	case !s.PoolSet:
		return false, 0, ErrSemNotSet
	case a.N > s.Pool:
		return false, 0, ErrSemTooMany
	}
	op := s.begin(now)
	op.caller, op.ask = a.Owner, a.N
	head0, second0 := op.front()
	queued := slices.Contains(s.Queue, a.Owner)
	if queued {
		s.Wants[a.Owner] = a.N
	}
	op.prune(a.Owner, a.Grace)
	head, _ := op.front()
	if op.fits(a.Owner) && (head == "" || head == a.Owner) {
		if head == a.Owner {
			op.remove(a.Owner, a.Wait)
		}
		s.Holders[a.Owner], s.Leases[a.Owner] = a.N, now+a.Lease
		s.Token++
		if a.LatchMs > 0 {
			s.Acquires[a.Request] = SemLatch{State: "held", Token: s.Token, ExpiresAt: now + a.LatchMs}
		}
		op.finish(a.Owner, head0, second0, op.reclaimed, a.Grace)
		return true, s.Token, nil
	}
	caller := ""
	if a.Queue {
		caller = a.Owner
		if !queued {
			deadline := now + op.nextEnd() + a.Wait
			seq := int64(1)
			if n := len(s.Queue); n > 0 {
				deadline = s.Deadlines[s.Queue[n-1]] + a.Wait
				seq = s.Seqs[s.Queue[n-1]] + 1
			}
			s.Seqs[a.Owner], s.Joined = seq, true
			s.Queue = append(s.Queue, a.Owner)
			s.Deadlines[a.Owner], s.Wants[a.Owner] = deadline, a.N
			if a.LatchMs > 0 {
				s.Notes[a.Owner] = SemNote{Lease: a.Lease, Slot: a.Wait, LatchMs: a.LatchMs, Request: a.Request}
			}
		}
	}
	op.finish(caller, head0, second0, op.reclaimed, a.Grace)
	return false, op.sleep(a.Owner, a.Grace), nil
}

// Release gives back owner's permits at now: 1 when it held live permits,
// 0 when not. A release id latches the answer (latchMs > 0).
// Ahead is sem_fair_acquire.lua's position reply for owner (ARGV 9): the
// join-sequence difference with the head, which counts the waiters ahead
// and the gaps left by waiters that left from between the head and owner;
// -1 when owner is not queued.
func (s *SemFair) Ahead(owner string) int64 {
	if !slices.Contains(s.Queue, owner) {
		return -1
	}
	return s.Seqs[owner] - s.Seqs[s.Queue[0]]
}

func (s *SemFair) Release(now int64, owner, request string, latchMs, grace int64) int64 {
	s.Advance(now)
	if l, ok := s.Releases[request]; ok && request != "" {
		return l.Result
	}
	op := s.begin(now)
	head0, second0 := op.front()
	op.prune(owner, grace)
	var result int64
	if _, ok := s.Holders[owner]; ok {
		delete(s.Holders, owner)
		delete(s.Leases, owner)
		result = 1
	}
	if latchMs > 0 {
		s.Releases[request] = SemLatch{Result: result, ExpiresAt: now + latchMs}
	}
	for op.handoff(owner, grace) {
	}
	op.finish("", head0, second0, result == 1 || op.reclaimed, grace)
	return result
}

// handoff is a release's direct grant (issue 33; the fair lock's, model
// Lock.handoff): when the caller's grace is on and the head (not the
// caller) fits in the free permits, joined with a note whose request was
// not given up (no latch yet), the head is granted its ask as its own take
// would (it leaves the queue, those behind it drop by its slot, the token
// is incremented) for min(its lease, 2 graces), its latch says "granted"
// for max(its latch life, that grant), and the grant is published on its
// channel. It reports whether it granted (the release then tries the next
// head).
func (op *semOp) handoff(caller string, grace int64) bool {
	s := op.s
	head, _ := op.front()
	if grace <= 0 || head == "" || head == caller || !op.fits(head) {
		return false
	}
	n, ok := s.Notes[head]
	if !ok {
		return false
	}
	if _, exists := s.Acquires[n.Request]; exists {
		return false
	}
	ask := s.Wants[head]
	ttl := min(n.Lease, 2*grace)
	op.remove(head, n.Slot)
	s.Holders[head], s.Leases[head] = ask, op.now+ttl
	s.Token++
	s.Acquires[n.Request] = SemLatch{State: "granted", Token: s.Token, ExpiresAt: op.now + max(n.LatchMs, ttl)}
	s.wake(head, GrantMessage(s.Token, ttl, n.Request))
	return true
}

// Leave takes owner out of the queue (those behind it get wait earlier);
// it reports whether owner was queued.
func (s *SemFair) Leave(now int64, owner string, wait, grace int64) bool {
	op := s.begin(now)
	head0, second0 := op.front()
	was := op.remove(owner, wait)
	op.finish("", head0, second0, op.reclaimed, grace)
	return was
}

// Abandon voids an acquisition request; a copy's grant that owner still
// holds is given back. It reports whether a copy had been granted.
func (s *SemFair) Abandon(now int64, owner, request string, latchMs, grace int64) bool {
	s.Advance(now)
	l, ok := s.Acquires[request]
	if ok && l.State == "void:held" {
		return true
	}
	if ok && l.State == "void" {
		return false
	}
	give := s.live(owner, now) // an owner id is one acquisition's: its grant, latched or not
	granted := ok && (l.State == "held" || l.State == "granted") || give
	state := "void"
	if granted {
		state = "void:held"
	}
	s.Acquires[request] = SemLatch{State: state, ExpiresAt: now + max(1, latchMs)}
	op := s.begin(now)
	head0, second0 := op.front()
	if give {
		delete(s.Holders, owner)
		delete(s.Leases, owner)
	}
	op.finish("", head0, second0, give || op.reclaimed, grace)
	return granted
}

// Renew sets a live grant's lease to end at now + lease (never earlier).
func (s *SemFair) Renew(now int64, owner string, lease int64) bool {
	if !s.live(owner, now) {
		return false
	}
	s.Leases[owner] = max(s.Leases[owner], now+lease)
	return true
}

// SetPermits sets the pool; it returns the old one (-1: none).
func (s *SemFair) SetPermits(now, pool, grace int64) int64 {
	old := int64(-1)
	if s.PoolSet {
		old = s.Pool
	}
	s.setPool(now, pool, grace, !s.PoolSet || pool > s.Pool)
	return old
}

// AddPermits adds delta to the pool; it returns the new pool.
func (s *SemFair) AddPermits(now, delta, grace int64) (int64, error) {
	if !s.PoolSet {
		return 0, ErrSemNotSet
	}
	if s.Pool+delta < 0 {
		return 0, ErrSemNegative
	}
	s.setPool(now, s.Pool+delta, grace, delta > 0)
	return s.Pool, nil
}

func (s *SemFair) setPool(now, pool, grace int64, grew bool) {
	s.Pool, s.PoolSet = pool, true
	op := s.begin(now)
	head0, second0 := op.front()
	op.prune("", grace)
	op.finish("", head0, second0, grew || op.reclaimed, grace)
}

// Available is the pool less live holders' permits (-1 with no pool).
func (s *SemFair) Available(now int64) int64 {
	if !s.PoolSet {
		return -1
	}
	return s.Pool - s.used(now)
}

// CheckSemInvariants checks what must hold after every operation: the
// queue has no duplicates, its waiters and only they have deadlines and
// asks, nobody both holds and waits, every holder has a lease.
func (s *SemFair) CheckSemInvariants() error {
	seen := map[string]bool{}
	for _, o := range s.Queue {
		if seen[o] {
			return fmt.Errorf("%s queued twice", o)
		}
		seen[o] = true
		if _, ok := s.Deadlines[o]; !ok {
			return fmt.Errorf("%s queued without a deadline", o)
		}
		if _, ok := s.Wants[o]; !ok {
			return fmt.Errorf("%s queued without an ask", o)
		}
		if _, ok := s.Holders[o]; ok {
			return fmt.Errorf("%s holds and waits", o)
		}
	}
	if len(s.Deadlines) != len(s.Queue) || len(s.Wants) != len(s.Queue) {
		return fmt.Errorf("deadlines %v or asks %v of owners not queued (%v)", s.Deadlines, s.Wants, s.Queue)
	}
	if len(s.Holders) != len(s.Leases) {
		return fmt.Errorf("holders %v and leases %v differ", s.Holders, s.Leases)
	}
	for o, n := range s.Holders {
		if _, ok := s.Leases[o]; !ok || n < 1 {
			return fmt.Errorf("holder %s: %d permits, lease %v", o, n, ok)
		}
	}
	return nil
}

func (s *SemFair) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pool %d (set %v) holders %v leases %v queue %v wants %v deadlines %v token %d",
		s.Pool, s.PoolSet, s.Holders, s.Leases, s.Queue, s.Wants, s.Deadlines, s.Token)
	if s.GraceOwner != "" {
		fmt.Fprintf(&b, " grace %s@%d (second %v)", s.GraceOwner, s.GraceEnd, s.GraceSecond)
	}
	return b.String()
}
