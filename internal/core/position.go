package core

import (
	"context"
	"time"

	"github.com/fairlock-go/fairlock/internal/wire"
)

// Position is a queued waiter's place in a fair queue, reported to the
// callback of an acquisition (AcquireOpts.Position) after every attempt
// that leaves it queued, and on the scalable engine after a wake-up that
// carried an attempt's reply (wire.Note).
type Position struct {
	// Ahead is how many waiters are ahead of this one (0: it is the head,
	// next to take the lock once it is free); -1 when unknown (the server
	// lacks LPOS, or a queue written by an older version). On the Redisson
	// engine it is exact when read; on the scalable engine it is exact
	// unless waiters between the head and this one gave up, and then an
	// upper bound (each such gap counts until the head passes it). It never
	// goes up between two reports unless Joined is set.
	Ahead int
	// Joined: this waiter may have been put at the tail of the queue since
	// the last report: its first join, or a join again after it was pruned.
	// Ahead may then be larger than before. Once an attempt of the call got
	// no reply (or one so late that go-redis may have sent it again), every
	// later report of the call says Joined: a copy of that attempt may
	// still reach Redis and join again, and the client cannot tell.
	Joined bool
	// ETA estimates the time until this waiter takes the lock: (Ahead + 1)
	// divided by the rate at which the queue ahead of it moved, measured
	// from this waiter's own reports since it (last) joined, over its last
	// few reports. 0 until the queue has been seen to move (so a waiter
	// that never saw its Ahead fall has no estimate). It is an estimate: it
	// assumes the holds and give-ups to come are like the recent ones.
	ETA time.Duration
	// At is the local time of the attempt that read this position.
	At time.Time
}

// AheadTrier is an engine that can report the caller's queue position with
// an attempt (the fair lock's engines).
type AheadTrier interface {
	TryAhead(ctx context.Context, a wire.Args) (acquired bool, ttlMs int64, ahead wire.Ahead, err error)
}

// etaWindow is how many reports the rate is measured over.
const etaWindow = 8

// positionTrack is one acquisition's position reporting.
type positionTrack struct {
	fn      func(Position) // nil: none (the track serves an observer only)
	first   int            // the first position reported (-1: none yet)
	have    bool           // an answered attempt left the waiter queued: ahead is set
	ahead   wire.Ahead
	at      time.Time
	lost    bool // an attempt of this call went unanswered: a copy may join again later
	samples [etaWindow]struct {
		t time.Time
		a int
	}
	n int // samples taken since the last join
}

// report calls the callback with the position the last attempt read, if it
// read one.
func (p *positionTrack) report() {
	if p == nil || !p.have {
		return
	}
	p.have = false
	if p.fn == nil {
		if p.first < 0 {
			p.first = int(p.ahead.Ahead)
		}
		return
	}
	pos := Position{Ahead: int(p.ahead.Ahead), Joined: p.ahead.Joined || p.lost, At: p.at}
	// Between joins a place only moves up the queue, so a reading further
	// back than the last one reported is older than it: an attempt's reply
	// and a note (wire.Note) travel on two connections, and a note
	// published before the attempt ran can arrive after its reply (or the
	// reply after a later note). It is not reported.
	back := pos.Ahead >= 0 && p.n > 0 && pos.Ahead > p.samples[(p.n-1)%etaWindow].a
	if back && !pos.Joined {
		return
	}
	// the rate is measured since the waiter's current place began: a join
	// (or, after an unanswered attempt, a place further back) starts the
	// samples again
	if p.ahead.Joined || pos.Ahead < 0 || back {
		p.n = 0
	}
	if pos.Ahead >= 0 {
		s := &p.samples[p.n%etaWindow]
		s.t, s.a = p.at, pos.Ahead
		p.n++
		oldest := p.samples[0]
		if p.n > etaWindow {
			oldest = p.samples[p.n%etaWindow]
		}
		if moved, d := oldest.a-pos.Ahead, pos.At.Sub(oldest.t); moved > 0 && d > 0 {
			pos.ETA = time.Duration(float64(d) * float64(pos.Ahead+1) / float64(moved))
		}
	}
	if p.first < 0 {
		p.first = pos.Ahead
	}
	p.fn(pos)
}
