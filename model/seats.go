package model

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Seats is the reference model of the fair multi-seat hold of one venue
// (lua/seats_*.lua), written from its rules (docs/design.md, "The fair
// multi-seat hold"), not from the scripts:
//
//   - a request names a set of seats; one that is not granted at once joins
//     the queue of every seat it names, at the tail, in one operation, and
//     leaves them only all at once (granted, gave up, pruned); one found
//     missing from any of its queues leaves all and joins all again;
//   - ready: a queued request heads every queue it is in and every one of
//     its seats is free; holders whose lease ended (server clock) are
//     reclaimed first by every operation;
//   - a caller is granted when it is ready, or when it is not queued, every
//     queue of its seats is empty and every seat is free: all seats at
//     once, one lease, one token from the venue's counter;
//   - a ready request has a grace; whoever finds it ready without one
//     starts it, run out the second; a second grace that ran out prunes it
//     from all its queues; never the caller;
//   - wake-ups: when a request's grace starts (first or second) it is woken,
//     and so is the waiter right behind it in each of its queues; at most
//     once each per operation, never the acquisition's caller;
//   - a not-granted caller's sleep: the least, over its seats, of the
//     holder's lease left, the grace left of a ready head ahead of it, or
//     one grace for a head that is not ready; at least 1;
//   - latches as the fair semaphore's (SemLatch).
//
// Each operation examines a list of seats, in order: the seats of holds it
// reclaims (by lease end, then owner), then the seats it acts on, then the
// seats of every waiter it removes; that order is the order of the
// wake-ups. Every instant is the server's clock in ms.
type Seats struct {
	Holds  map[string]int64      // holder -> number of seats
	Leases map[string]int64      // holder -> lease end
	Seat   map[string]string     // seat -> holder
	Req    map[string][]string   // owner (queued or holding) -> its seats
	Queues map[string][]string   // seat -> its queue, head first
	Grace  map[string]SeatsGrace // ready waiter -> its grace
	Token  int64
	// KeysEnd is when the venue's six keys (all but the token) expire
	// (0: not set): SeatsKeep after the last moment their entries matter,
	// set by every operation that writes and moved on by a renewal.
	KeysEnd  int64
	Acquires map[string]SemLatch // acquisition request id -> latch
	Releases map[string]SemLatch // release request id -> latch
	Woken    []string            // owners woken, in order
}

// SeatsGrace is a ready waiter's grace: when it ends, and whether it is
// the second.
type SeatsGrace struct {
	End    int64
	Second bool
}

// Errors of the model's seat operations; each leaves the state unchanged.
var (
	ErrSeatsAlreadyHolds = errors.New("owner already holds seats")
	ErrSeatsOtherSeats   = errors.New("owner is queued for other seats")
)

// NewSeats returns an empty venue.
func NewSeats() *Seats {
	return &Seats{Holds: map[string]int64{}, Leases: map[string]int64{}, Seat: map[string]string{},
		Req: map[string][]string{}, Queues: map[string][]string{}, Grace: map[string]SeatsGrace{},
		Acquires: map[string]SemLatch{}, Releases: map[string]SemLatch{}}
}

// Clone returns a deep copy.
func (s *Seats) Clone() *Seats {
	c := *s
	c.Holds, c.Leases, c.Seat, c.Grace = maps.Clone(s.Holds), maps.Clone(s.Leases), maps.Clone(s.Seat), maps.Clone(s.Grace)
	c.Acquires, c.Releases = maps.Clone(s.Acquires), maps.Clone(s.Releases)
	c.Req, c.Queues = map[string][]string{}, map[string][]string{}
	for o, v := range s.Req {
		c.Req[o] = slices.Clone(v)
	}
	for q, v := range s.Queues {
		c.Queues[q] = slices.Clone(v)
	}
	c.Woken = slices.Clone(s.Woken)
	return &c
}

// Advance drops the latches that expired by now, and every entry of the
// venue's keys once they end (KeysEnd: after every client is gone without
// a release or a leave, only the token is left). A hold whose lease ended
// stays until an operation reclaims it or the keys end.
func (s *Seats) Advance(now int64) {
	for _, m := range []map[string]SemLatch{s.Acquires, s.Releases} {
		maps.DeleteFunc(m, func(_ string, l SemLatch) bool { return l.ExpiresAt <= now })
	}
	if s.KeysEnd != 0 && s.KeysEnd <= now {
		clear(s.Holds)
		clear(s.Leases)
		clear(s.Seat)
		clear(s.Req)
		clear(s.Queues)
		clear(s.Grace)
		s.KeysEnd = 0
	}
}

// Holding: owner holds seats whose lease has not ended.
func (s *Seats) Holding(owner string, now int64) bool {
	_, ok := s.Holds[owner]
	return ok && s.Leases[owner] > now
}

// Queued: owner waits (it has a request and holds nothing).
func (s *Seats) Queued(owner string) bool {
	_, req := s.Req[owner]
	_, holds := s.Holds[owner]
	return req && !holds
}

// Head is the head of seat's queue, "" when empty.
func (s *Seats) Head(seat string) string {
	if q := s.Queues[seat]; len(q) > 0 {
		return q[0]
	}
	return ""
}

// Ready: w is queued, heads the queue of every seat it names, and every
// one of its seats has no holder (reclaimed or not: the scripts' view
// after their reclaim is what counts).
func (s *Seats) Ready(w string) bool {
	if !s.Queued(w) {
		return false
	}
	for _, seat := range s.Req[w] {
		if _, held := s.Seat[seat]; held || s.Head(seat) != w {
			return false
		}
	}
	return true
}

// seatsOp is one operation in progress.
type seatsOp struct {
	s      *Seats
	now    int64
	grace  int64
	caller string
	work   []string
	seen   map[string]bool
	woken  map[string]bool
}

func (s *Seats) begin(now, grace int64, caller string) *seatsOp {
	s.Advance(now)
	return &seatsOp{s: s, now: now, grace: grace, caller: caller, seen: map[string]bool{}, woken: map[string]bool{}}
}

func (op *seatsOp) examine(seats ...string) {
	for _, x := range seats {
		if !op.seen[x] {
			op.seen[x] = true
			op.work = append(op.work, x)
		}
	}
}

// giveBack frees holder o's seats.
func (op *seatsOp) giveBack(o string) {
	s := op.s
	for _, x := range s.Req[o] {
		if s.Seat[x] == o {
			delete(s.Seat, x)
		}
		op.examine(x)
	}
	delete(s.Holds, o)
	delete(s.Leases, o)
	delete(s.Req, o)
}

// reclaim gives back every hold whose lease ended, by lease end then owner.
func (op *seatsOp) reclaim() {
	type e struct {
		o   string
		end int64
	}
	var ended []e
	for o, end := range op.s.Leases {
		if end <= op.now {
			ended = append(ended, e{o, end})
		}
	}
	slices.SortFunc(ended, func(a, b e) int { return cmp.Or(cmp.Compare(a.end, b.end), strings.Compare(a.o, b.o)) })
	for _, x := range ended {
		op.giveBack(x.o)
	}
}

// leaveAll takes w out of every queue; its grace goes.
func (op *seatsOp) leaveAll(w string) {
	s := op.s
	for _, x := range s.Req[w] {
		if i := slices.Index(s.Queues[x], w); i >= 0 {
			s.Queues[x] = slices.Delete(s.Queues[x], i, i+1)
			if len(s.Queues[x]) == 0 {
				delete(s.Queues, x)
			}
		}
		op.examine(x)
	}
	delete(s.Req, w)
	delete(s.Grace, w)
}

// prune drops, for every seat examined, heads whose second grace ran out
// while ready (never the caller).
func (op *seatsOp) prune() {
	s := op.s
	for i := 0; i < len(op.work); i++ {
		for {
			h := s.Head(op.work[i])
			if h == "" || h == op.caller || !s.Ready(h) {
				break
			}
			g, ok := s.Grace[h]
			if !ok || !g.Second || g.End > op.now {
				break
			}
			op.leaveAll(h)
		}
	}
}

func (op *seatsOp) wake(o string) {
	if o != "" && o != op.caller && !op.woken[o] {
		op.woken[o] = true
		op.s.Woken = append(op.s.Woken, o)
	}
}

// finish starts the grace of every ready head of a seat examined (the
// second when the first ran out) and wakes it and the waiters behind it;
// a head that is not ready keeps no grace.
func (op *seatsOp) finish() {
	s := op.s
	for _, x := range op.work {
		h := s.Head(x)
		if h == "" {
			continue
		}
		if !s.Ready(h) {
			delete(s.Grace, h)
			continue
		}
		g, ok := s.Grace[h]
		if ok && (g.Second || g.End > op.now) {
			continue
		}
		s.Grace[h] = SeatsGrace{End: op.now + op.grace, Second: ok}
		op.wake(h)
		for _, y := range s.Req[h] {
			if q := s.Queues[y]; len(q) > 1 {
				op.wake(q[1])
			}
		}
	}
	op.expire()
}

// SeatsKeep is how long a venue's keys outlive the last moment any of
// their entries matters (seats_common.lua's SEATS_KEEP), in ms.
const SeatsKeep int64 = 60_000

// expire, at the end of every operation that writes: the venue's keys end
// SeatsKeep after the latest of the latest lease end, the latest grace end,
// now plus the operation's grace when anyone is queued (a live waiter
// calls again within its sleep), and now.
func (op *seatsOp) expire() {
	s := op.s
	end := op.now
	for _, e := range s.Leases {
		end = max(end, e)
	}
	for _, g := range s.Grace {
		end = max(end, g.End)
	}
	for _, q := range s.Queues {
		if len(q) > 0 {
			end = max(end, op.now+op.grace)
		}
	}
	s.KeysEnd = end + SeatsKeep
}

// reply is the sleep bound of caller o (not granted).
func (op *seatsOp) reply(o string, seats []string) int64 {
	s := op.s
	best, any := int64(0), false
	for _, x := range seats {
		var b int64
		if holder, ok := s.Seat[x]; ok {
			b = s.Leases[holder] - op.now
		} else if h := s.Head(x); h != "" && h != o {
			b = op.grace
			if g, ok := s.Grace[h]; ok {
				b = g.End - op.now
			}
		} else {
			continue
		}
		if !any || b < best {
			best, any = b, true
		}
	}
	return max(1, best)
}

// SeatsAcquire are the arguments of an acquisition.
type SeatsAcquire struct {
	Owner   string
	Seats   []string
	Lease   int64
	Grace   int64
	Queue   bool
	Request string // "" for none
	LatchMs int64
}

// Acquire runs an acquisition at now: (true, token) when granted, (false,
// sleep) when not; an error (ErrSeatsAlreadyHolds, ErrSeatsOtherSeats,
// ErrSemFairAbandoned, ErrSemFairGrantOver) changes nothing.
func (s *Seats) Acquire(now int64, a SeatsAcquire) (bool, int64, error) {
	s.Advance(now)
	if a.Request != "" {
		if l, ok := s.Acquires[a.Request]; ok {
			switch {
			case l.State == "void" || l.State == "void:held":
				return false, 0, ErrSemFairAbandoned
			case l.State == "held" && s.Holding(a.Owner, now):
				return true, l.Token, nil
			case l.State == "held":
				return false, 0, ErrSemFairGrantOver
			}
		}
	}
	if s.Holding(a.Owner, now) {
		// An owner id is one acquisition's: a live hold of these seats is
		// this request's, met by a copy whose latch expired.
		if !sameSet(s.Req[a.Owner], a.Seats) {
			return false, 0, ErrSeatsAlreadyHolds
		}
		s.Token++
		if a.Request != "" {
			s.Acquires[a.Request] = SemLatch{State: "held", Token: s.Token, ExpiresAt: now + a.LatchMs}
		}
		return true, s.Token, nil
	}
	if mine, ok := s.Req[a.Owner]; ok && s.Queued(a.Owner) && !sameSet(mine, a.Seats) {
		return false, 0, ErrSeatsOtherSeats
	}
	op := s.begin(now, a.Grace, a.Owner)
	op.reclaim()
	queued := s.Queued(a.Owner)
	op.examine(a.Seats...)
	op.prune()
	take := true
	for _, x := range a.Seats {
		if _, held := s.Seat[x]; held || s.Head(x) != "" && s.Head(x) != a.Owner {
			take = false
		}
	}
	if take {
		if queued {
			op.leaveAll(a.Owner)
		}
		for _, x := range a.Seats {
			s.Seat[x] = a.Owner
		}
		s.Holds[a.Owner] = int64(len(a.Seats))
		s.Leases[a.Owner] = now + a.Lease
		s.Req[a.Owner] = slices.Clone(a.Seats)
		s.Token++
		if a.Request != "" {
			s.Acquires[a.Request] = SemLatch{State: "held", Token: s.Token, ExpiresAt: now + a.LatchMs}
		}
		op.finish()
		return true, s.Token, nil
	}
	if a.Queue && !queued {
		for _, x := range a.Seats {
			s.Queues[x] = append(s.Queues[x], a.Owner)
		}
		s.Req[a.Owner] = slices.Clone(a.Seats)
	}
	op.finish()
	return false, op.reply(a.Owner, a.Seats), nil
}

func sameSet(a, b []string) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(x string) bool { return !slices.Contains(b, x) })
}

// Release gives back owner's seats at now: 1 when it held seats (lease
// not ended), 0 when not; latched by request.
func (s *Seats) Release(now int64, owner, request string, latchMs, grace int64) int64 {
	s.Advance(now)
	if request != "" {
		if l, ok := s.Releases[request]; ok {
			return l.Result
		}
	}
	op := s.begin(now, grace, "")
	op.reclaim()
	var r int64
	if _, ok := s.Holds[owner]; ok {
		op.giveBack(owner)
		r = 1
	}
	if request != "" && latchMs > 0 {
		s.Releases[request] = SemLatch{Result: r, ExpiresAt: now + latchMs}
	}
	op.prune()
	op.finish()
	return r
}

// Leave takes owner out of every queue at now; whether it was queued.
func (s *Seats) Leave(now int64, owner string, grace int64) bool {
	op := s.begin(now, grace, "")
	op.reclaim()
	was := s.Queued(owner)
	if was {
		op.leaveAll(owner)
	}
	op.prune()
	op.finish()
	return was
}

// Abandon voids request at now (see SemFair.Abandon); whether a copy of it
// had been granted.
func (s *Seats) Abandon(now int64, owner, request string, latchMs, grace int64) bool {
	s.Advance(now)
	l, ok := s.Acquires[request]
	if ok && l.State == "void:held" {
		return true
	}
	if ok && l.State == "void" {
		return false
	}
	give := s.Holding(owner, now) // an owner id is one acquisition's: its grant, latched or not
	granted := ok && l.State == "held" || give
	state := "void"
	if granted {
		state = "void:held"
	}
	s.Acquires[request] = SemLatch{State: state, ExpiresAt: now + max(1, latchMs)}
	op := s.begin(now, grace, "")
	op.reclaim()
	if give {
		op.giveBack(owner)
	}
	op.prune()
	op.finish()
	return granted
}

// Renew sets owner's lease to end at now + lease (never earlier) when it
// still holds; whether it did.
func (s *Seats) Renew(now int64, owner string, lease int64) bool {
	if !s.Holding(owner, now) {
		return false
	}
	if now+lease > s.Leases[owner] {
		s.Leases[owner] = now + lease
		s.KeysEnd = max(s.KeysEnd, now+lease+SeatsKeep)
	}
	return true
}

// CheckSeatsInvariants checks what must hold after every operation.
func (s *Seats) CheckSeatsInvariants() error {
	for o, n := range s.Holds {
		seats, ok := s.Req[o]
		if _, lease := s.Leases[o]; !ok || !lease || int64(len(seats)) != n {
			return fmt.Errorf("holder %s: seats %v, lease %v, count %d", o, seats, lease, n)
		}
		for _, x := range seats {
			if s.Seat[x] != o || slices.Contains(s.Queues[x], o) {
				return fmt.Errorf("holder %s: seat %s held by %q, queue %v", o, x, s.Seat[x], s.Queues[x])
			}
		}
	}
	for x, o := range s.Seat {
		if _, ok := s.Holds[o]; !ok || !slices.Contains(s.Req[o], x) {
			return fmt.Errorf("seat %s held by %s, who holds %v", x, o, s.Req[o])
		}
	}
	pos := map[string]map[string]int{} // seat -> owner -> place
	for x, q := range s.Queues {
		pos[x] = map[string]int{}
		for i, o := range q {
			if !s.Queued(o) || !slices.Contains(s.Req[o], x) {
				return fmt.Errorf("queue %s: %s is not a waiter for it", x, o)
			}
			if _, dup := pos[x][o]; dup {
				return fmt.Errorf("queue %s: %s twice", x, o)
			}
			pos[x][o] = i
		}
	}
	for o, seats := range s.Req {
		if !s.Queued(o) {
			continue
		}
		for _, x := range seats {
			if _, ok := pos[x][o]; !ok {
				return fmt.Errorf("waiter %s missing from the queue of %s", o, x)
			}
		}
	}
	// One total order: two waiters sharing two queues are in the same order
	// in both.
	for x, q := range s.Queues {
		for y, r := range s.Queues {
			for i, a := range q {
				for _, b := range q[i+1:] {
					pa, okA := pos[y][a]
					pb, okB := pos[y][b]
					if okA && okB && pa > pb {
						return fmt.Errorf("%s before %s in %s's queue %v, after in %s's %v", a, b, x, q, y, r)
					}
				}
			}
		}
	}
	for o := range s.Grace {
		if !s.Queued(o) {
			return fmt.Errorf("grace of %s, who is not queued", o)
		}
	}
	return nil
}

func (s *Seats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seat=%v holds=%v leases=%v queues=%v grace=%v token=%d", s.Seat, s.Holds, s.Leases, s.Queues, s.Grace, s.Token)
	return b.String()
}
