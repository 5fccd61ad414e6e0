package fairlock

import "time"

// Position is a queued waiter's place in a fair queue, reported by a
// waiting fair acquisition that asked for it (fair.AcquireOptions.Position):
// how many waiters are ahead (Ahead), whether it (re)joined the tail since
// the last report (Joined), and an estimate of its wait (ETA, from the rate
// at which the queue ahead of it moved; 0 until measurable). Each field's
// doc says how exact it is on each engine; docs/design.md ("Queue position
// and ETA") says how it is computed and what it costs.
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
