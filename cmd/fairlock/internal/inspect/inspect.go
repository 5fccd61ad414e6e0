// Package inspect reads the state of one lock from Redis, read-only, and
// reports who holds it, who waits for it in which order with which deadline,
// and anything in that state that the scripts should never leave behind.
//
// The state is read and checked by internal/lockstate (one MULTI/EXEC of
// read commands, so the report describes one instant of the server, and
// never writes); this package turns it into the report the command prints.
// For inspect --watch, ReadFrame adds the lock's unlock and acquisition
// latch keys, found with a bounded SCAN MATCH (ReadLatches), also read-only.
package inspect

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/lockstate"
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
}

// Report is the state of one lock at one instant.
type Report struct {
	Name string `json:"name"`
	Keys struct {
		Lock          string `json:"lock"`
		Queue         string `json:"queue"`
		Timeouts      string `json:"timeouts"`
		ScalableQueue string `json:"scalable_queue"`
		Grace         string `json:"grace"`
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
	Grace    *Grace    `json:"grace,omitempty"`
	Problems []Problem `json:"problems"`
	// OK is false when a problem of severity Error was found.
	OK bool `json:"ok"`
}

// Read reads the lock called name from rdb and analyses it. now is the
// inspector's clock (deadlines are client-clock instants). It sends only
// read commands, in one MULTI/EXEC.
func Read(ctx context.Context, rdb redis.Cmdable, name string, now time.Time) (*Report, error) {
	s, err := lockstate.ReadAt(ctx, rdb, name, now)
	if err != nil {
		return nil, err
	}
	r := &Report{Name: name, Engine: s.Engine, NowMs: s.NowMs, RedisTimeMs: s.RedisTimeMs,
		Locked: s.Locked, LeaseMs: s.LeaseMs, OK: s.OK,
		Holders: make([]Holder, 0, len(s.Holders)), Queue: waiters(s.Queue), Unqueued: waiters(s.Unqueued),
		Problems: make([]Problem, 0, len(s.Problems))}
	r.Keys.Lock, r.Keys.Queue, r.Keys.Timeouts, r.Keys.ScalableQueue, r.Keys.Grace =
		s.Keys.Lock, s.Keys.Queue, s.Keys.Timeouts, s.Keys.ScalableQueue, s.Keys.Grace
	if s.Grace.Owner != "" {
		r.Grace = &Grace{Owner: s.Grace.Owner, Second: s.Grace.Second, LeftMs: s.Grace.LeftMs}
	}
	for _, h := range s.Holders {
		r.Holders = append(r.Holders, Holder{Owner: h.Owner, HoldCount: h.HoldCount, Raw: h.Raw})
	}
	for _, p := range s.Problems {
		r.Problems = append(r.Problems, Problem{Code: p.Code, Severity: p.Severity, Message: p.Message})
	}
	return r, nil
}

func waiters(ws []lockstate.Waiter) []Waiter {
	out := make([]Waiter, 0, len(ws))
	for _, w := range ws {
		x := Waiter{Position: w.Position, Owner: w.Owner, HasDeadline: w.HasDeadline}
		if w.HasDeadline {
			x.DeadlineMs, x.LeftMs = w.DeadlineMs, w.LeftMs
			x.Deadline = stamp(w.DeadlineMs)
		}
		out = append(out, x)
	}
	return out
}
