// Package inspect reads what the library keeps under one name from Redis,
// read-only: each kind of state found (a lock, a read-write lock, a fair or
// a permit-expirable semaphore, a seat venue), who holds it, who waits for
// it in which order with which deadline, and anything in that state that
// the scripts should never leave behind; or that there is no such lock.
//
// The state is read and checked by internal/lockstate (one MULTI/EXEC of
// read commands, so the report describes one instant of the server, and
// never writes); this package turns it into the report the command prints.
// For inspect --watch, ReadFrame adds the name's unlock, acquisition and
// release latch keys, found with a bounded SCAN MATCH (ReadLatches), also
// read-only.
package inspect

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/lockstate"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Severity of a problem.
const (
	Error   = lockstate.Error
	Warning = lockstate.Warning
)

// Problem is one inconsistency found in a lock's state.
type Problem struct {
	Code     string `json:"code"`
	Severity string `json:"severity"`
	Message  string `json:"message"`
}

// Holder is one owner in the lock hash.
type Holder struct {
	Owner     string `json:"owner"`
	HoldCount int64  `json:"hold_count"`
	// Raw is the stored value when it is not a positive integer.
	Raw string `json:"raw,omitempty"`
}

// Grace is the fair lock's head grace key (fair_common.lua): the head that
// may take the free lock, and how long it has left to do so.
type Grace struct {
	Owner  string `json:"owner"`
	Second bool   `json:"second"` // the head's second (last) grace
	// LeftMs is the grace left on the Redis server's clock (the key's
	// PTTL less its margin); 0 or less when it ran out.
	LeftMs int64 `json:"left_ms"`
}

// Waiter is one queued owner.
type Waiter struct {
	Position    int    `json:"position"` // 1 is the head
	Owner       string `json:"owner"`
	HasDeadline bool   `json:"has_deadline"`
	// DeadlineMs is the waiter's deadline, Unix milliseconds on the
	// clock of the client that queued it (the zset score).
	DeadlineMs int64 `json:"deadline_ms,omitempty"`
	// Deadline is DeadlineMs as RFC 3339 UTC.
	Deadline string `json:"deadline,omitempty"`
	// LeftMs is DeadlineMs minus the inspector's clock; negative when
	// the deadline has passed; 0 when there is no deadline.
	LeftMs int64 `json:"left_ms"`
	// Handoff: the waiter joined with a handoff note (this library's
	// client, with an acquisition request): as the head, a release grants
	// it the lock directly. Java's waiters take the lock themselves.
	Handoff bool `json:"direct_handoff"`
}

// Kinds of state, as Report.Kinds names them (see internal/lockstate).
const (
	// KindLock: the reentrant, fenced or fair lock (their common hash and
	// the fair lock's queue keys); Report's top-level lock fields.
	KindLock = lockstate.KindLock
	// KindRWLock: the read-write lock (Report.RWLock).
	KindRWLock = lockstate.KindRWLock
	// KindFairSemaphore: semaphore.NewFair (Report.FairSemaphore).
	KindFairSemaphore = lockstate.KindFairSemaphore
	// KindExpirableSemaphore: semaphore.NewExpirable, Redisson's
	// RPermitExpirableSemaphore (Report.ExpirableSemaphore).
	KindExpirableSemaphore = lockstate.KindExpirableSemaphore
	// KindSeats: a venue of multi.NewSeats (Report.Seats).
	KindSeats = lockstate.KindSeats
)

// Report is the state kept under one name at one instant: each kind found.
// The lock's fields are at the top level (zero when Kinds has no
// KindLock); each other kind has its own object.
type Report struct {
	Name string `json:"name"`
	// Found is false when the name has no key of any kind: no such lock.
	Found bool `json:"found"`
	// Kinds are the kinds of state found (KindLock ...), usually one.
	Kinds []string `json:"kinds"`
	// Venue, when the name is not found but is a seat name whose venue
	// has state (a misspelled seat?), is that venue.
	Venue string `json:"venue,omitempty"`
	// LockKind says which lock the lock's keys are: "reentrant", "fenced
	// or fair" (a token counter, nobody queued) or "fair" (a queue).
	LockKind string `json:"lock_kind,omitempty"`
	Keys     struct {
		Lock          string `json:"lock"`
		Queue         string `json:"queue"`
		Timeouts      string `json:"timeouts"`
		ScalableQueue string `json:"scalable_queue"`
		Grace         string `json:"grace"`
		Notes         string `json:"notes"`
	} `json:"keys"`
	// Engine is "redisson" (queue list and timeout zset), "scalable"
	// (fair.Scalable's linked list), "both" (an error), or "" when no
	// queue key exists.
	Engine string `json:"engine"`
	// NowMs is the inspector's clock, Unix ms; RedisTimeMs the server's
	// (TIME), to show how far apart the two are.
	NowMs       int64 `json:"now_ms"`
	RedisTimeMs int64 `json:"redis_time_ms"`
	Locked      bool  `json:"locked"`
	// Holders is normally one owner; more is a problem.
	Holders []Holder `json:"holders"`
	// LeaseMs is the lock's PTTL: -1 for a lock with no expiry; 0 when
	// the lock is free.
	LeaseMs int64    `json:"lease_ms"`
	Queue   []Waiter `json:"queue"`
	// Unqueued are owners with a deadline in the timeout zset but not in
	// the queue list.
	Unqueued []Waiter `json:"deadlines_not_queued"`
	// Grace is the fair lock's head grace key, nil when it does not exist.
	Grace *Grace `json:"grace,omitempty"`
	// Token is the lock's fencing token counter (the fenced and fair
	// locks), nil when there is none.
	Token *int64 `json:"token,omitempty"`
	// The other kinds, nil when not found.
	RWLock             *lockstate.RWState      `json:"rwlock,omitempty"`
	FairSemaphore      *lockstate.FairSemState `json:"fair_semaphore,omitempty"`
	ExpirableSemaphore *lockstate.ExpSemState  `json:"expirable_semaphore,omitempty"`
	Seats              *lockstate.SeatsState   `json:"seats,omitempty"`
	// Problems are every kind's problems (each kind's own are in its
	// object too; the lock's only here).
	Problems []Problem `json:"problems"`
	// OK is false when a problem of severity Error was found.
	OK bool `json:"ok"`

	lockProblems []Problem
}

// Read reads every kind of state kept under name from rdb and analyses
// it. now is the inspector's clock (a lock's deadlines are client-clock
// instants). It sends only read commands: one MULTI/EXEC (and one more
// with the PTTL of a read-write lock's read holds).
func Read(ctx context.Context, rdb redis.Cmdable, name string, now time.Time) (*Report, error) {
	f, err := lockstate.ReadAll(ctx, rdb, name, now)
	if err != nil {
		return nil, err
	}
	r := &Report{Name: name, Found: f.Found(), Kinds: f.Kinds, NowMs: f.NowMs, RedisTimeMs: f.RedisTimeMs, OK: f.OK,
		Holders: []Holder{}, Queue: []Waiter{}, Unqueued: []Waiter{}, Problems: []Problem{},
		RWLock: f.RW, FairSemaphore: f.FairSem, ExpirableSemaphore: f.ExpSem, Seats: f.Seats}
	if !r.Found {
		r.Venue = f.OtherVenue
	}
	k := wire.KeysFor(name)
	r.Keys.Lock, r.Keys.Queue, r.Keys.Timeouts, r.Keys.ScalableQueue, r.Keys.Grace, r.Keys.Notes =
		k.Name, k.Queue, k.Timeouts, k.ScalableQueue(), k.Grace(), k.Notes()
	if s := f.Lock; s != nil {
		r.Engine, r.Locked, r.LeaseMs = s.Engine, s.Locked, s.LeaseMs
		r.Queue, r.Unqueued = waiters(s.Queue), waiters(s.Unqueued)
		switch {
		case s.Engine != "":
			r.LockKind = "fair"
		case s.HasToken:
			r.LockKind = "fenced or fair"
		default:
			r.LockKind = "reentrant"
		}
		if s.HasToken {
			r.Token = &s.Token
		}
		if s.Grace.Owner != "" {
			r.Grace = &Grace{Owner: s.Grace.Owner, Second: s.Grace.Second, LeftMs: s.Grace.LeftMs}
		}
		for _, h := range s.Holders {
			r.Holders = append(r.Holders, Holder{Owner: h.Owner, HoldCount: h.HoldCount, Raw: h.Raw})
		}
		for _, p := range s.Problems {
			r.lockProblems = append(r.lockProblems, Problem{Code: p.Code, Severity: p.Severity, Message: p.Message})
		}
		r.Problems = append(r.Problems, r.lockProblems...)
	}
	for _, p := range kindProblems(f) {
		r.Problems = append(r.Problems, Problem{Code: p.Code, Severity: p.Severity, Message: p.Message})
	}
	return r, nil
}

// kindProblems are the problems of the kinds other than the lock.
func kindProblems(f *lockstate.Found) []lockstate.Problem {
	var ps []lockstate.Problem
	if f.RW != nil {
		ps = append(ps, f.RW.Problems...)
	}
	if f.FairSem != nil {
		ps = append(ps, f.FairSem.Problems...)
	}
	if f.ExpSem != nil {
		ps = append(ps, f.ExpSem.Problems...)
	}
	if f.Seats != nil {
		ps = append(ps, f.Seats.Problems...)
	}
	return ps
}

func waiters(ws []lockstate.Waiter) []Waiter {
	out := make([]Waiter, 0, len(ws))
	for _, w := range ws {
		x := Waiter{Position: w.Position, Owner: w.Owner, HasDeadline: w.HasDeadline, Handoff: w.Handoff}
		if w.HasDeadline {
			x.DeadlineMs, x.LeftMs = w.DeadlineMs, w.LeftMs
			x.Deadline = stamp(w.DeadlineMs)
		}
		out = append(out, x)
	}
	return out
}
