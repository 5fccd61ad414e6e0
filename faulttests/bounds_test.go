package faulttests

import "time"

// Every number the checkers and the workload rely on is here, named and
// commented, so that it can be tuned in one place. The bounds are the
// promises of the lock code (docs/design.md and the fault-suite issue);
// the tolerances only absorb the measuring itself (a goroutine that sees a
// closed channel late on a loaded machine), never the lock's behaviour.
const (
	// WatchdogLease is the clients' watchdog lease (fairlock.WithLease):
	// renewed every lease/3. Never sub-second in these tests.
	WatchdogLease = 3 * time.Second
	// ExplicitLeaseMin and ExplicitLeaseMax bound the leases the workload
	// passes to LockWithLease and TryLockFor.
	ExplicitLeaseMin = 2 * time.Second
	ExplicitLeaseMax = 4 * time.Second
	// HeadGrace is the fair lock's head grace (fairlock.WithHeadGrace).
	HeadGrace = 2 * time.Second
	// WaitSlot is the fair lock's default wait slot (fairlock.WithWaitSlot):
	// long, so that no live waiter is pruned for waiting.
	WaitSlot = 60 * time.Second
	// CleanupTime is fairlock.WithCleanupTimeout: the work a call may do
	// after its context ended.
	CleanupTime = 2 * time.Second
	// LatchTTL is fairlock.WithLatchTTL, the lifetime of an unlock or acquisition latch.
	LatchTTL = 10 * time.Second
	// ReadTimeout is the go-redis ReadTimeout and WriteTimeout of every
	// test client: go-redis's default, as are MaxRetries and
	// ContextTimeoutEnabled, as an application would leave them. Stalls
	// are made longer than this.
	ReadTimeout = 3 * time.Second

	// CallSlack: every call returns within its ctx deadline (or the
	// moment its ctx was cancelled) + CleanupTime + CallSlack.
	CallSlack = 2 * time.Second
	// CloseBound: Client.Close returns within this.
	CloseBound = CleanupTime + CallSlack
	// LiveSlack is the slack of the liveness bound (liveBound).
	LiveSlack = 2 * time.Second
	// DoneTolerance: where a lock type has no ValidUntil, a hold's window
	// ends when a watcher goroutine saw Done() closed; that goroutine may
	// run late on a loaded machine, so an overlap of at most this much
	// after such an end is not counted. Also how late a worker may record
	// the end of a call that Close ended.
	DoneTolerance = 250 * time.Millisecond
	// CloseTolerance: a waiting call that Close ended must have been
	// recorded as returned within this of Close returning (the worker
	// goroutine records the return once it runs). Holds are checked
	// without it: their Done and Err are read right after Close returns.
	CloseTolerance = time.Second
	// SkewMax bounds the clock skews the suite injects (its injected SkewedClock):
	// well inside the head grace, as docs/design.md asks of clocks.
	SkewMax = HeadGrace / 4
	// FailoverRecovery is how long a Redis Cluster or Sentinel takes to
	// promote a replica after its primary dies (design.md measured
	// 2.2-3.4 s; doubled for a loaded machine).
	FailoverRecovery = 8 * time.Second
	// LeftoverWait: after the last client is closed, how long the server
	// may take to drop its subscriptions.
	LeftoverWait = 5 * time.Second
)

// DeadSlack: a dead holder's permits are back (their lease ended on the
// server's clock) within its lease of its death plus this (check (d); a
// renewal already on the wire when the network was cut may still land).
const DeadSlack = time.Second

// semLiveBound is check (c)'s bound, liveBound read for a fair semaphore:
// how long a live waiter, whose own client had no fault during its wait,
// may see its ask fit in the permits no believed-valid window holds, with
// nobody that joined the queue before it still waiting, before it must
// have been granted. The same terms as liveBound: a lease (a hold that
// ended on its client but not yet in Redis, or a wake-up lost, after
// which the waiter's sleep is bounded by the earliest lease end or the
// watchdog lease), two head graces and the slack; per other client that
// was faulty, dead or closed and took part meanwhile, a lease (a hold or
// a late-delivered acquisition it may leave behind) and three graces (a
// dead waiter ahead costs up to 3 g, docs/design.md, the fair semaphore's
// promise (c)); per server-wide fault its length, a lease and its
// recovery.
func semLiveBound(faultyOthers int, global []Fault) time.Duration {
	b := maxLease() + 2*HeadGrace + LiveSlack
	b += time.Duration(faultyOthers) * (maxLease() + 3*HeadGrace)
	for _, f := range global {
		b += f.End - f.Start + maxLease() + f.Kind.recovery()
	}
	return b
}

// drift is the clock-drift allowance of a hold: a hold whose request was
// sent at s is valid until s + lease - drift(lease).
func drift(lease time.Duration) time.Duration { return lease/100 + 2*time.Millisecond }

// maxLease is the longest lease any hold in the suite has.
func maxLease() time.Duration { return max(WatchdogLease, ExplicitLeaseMax) }

// liveBound is how long a live waiter, whose own client had no fault
// during its wait, may see the lock free (no believed-valid window open)
// with no earlier live waiter in its way, before it must have been granted:
// the promise is lease + 2*grace + slack, plus for every other client that
// was faulty, dead or closed and took part in the lock meanwhile one lease
// (a hold or a late-delivered acquisition it may leave behind) and one grace
// (a dead queue head ahead), plus for every server-wide fault that
// overlapped the wait its own length, a lease and its recovery time.
func liveBound(faultyOthers int, global []Fault) time.Duration {
	b := maxLease() + 2*HeadGrace + LiveSlack
	b += time.Duration(faultyOthers) * (maxLease() + HeadGrace)
	for _, f := range global {
		b += f.End - f.Start + maxLease() + f.Kind.recovery()
	}
	return b
}

// callBound is how long a call whose ctx ends at ctxEnd (since the call's
// start) may take.
func callBound(ctxEnd time.Duration) time.Duration { return ctxEnd + CleanupTime + CallSlack }

// seatsLiveBound is the seats liveness check's bound (CheckSeatsLiveness),
// liveBound read for the fair multi-seat hold: how long a live waiter,
// whose own client had no fault during its wait, may see every seat it
// names free (no believed-valid window on it) with nobody ahead of it
// still waiting, before it must have been granted. The same terms as
// liveBound: a lease (a hold that ended on its client but not yet in
// Redis: a release in flight, or a lease to run out; or a wake-up lost,
// after which the waiter's sleep is bounded by a lease end or one grace),
// two head graces and the slack; per other client that was faulty, dead
// or closed and took part in the venue meanwhile, a lease and three
// graces: a hold or a late-delivered acquisition it leaves behind, or a
// dead request ahead, which is pruned only after two graces as a ready
// head (docs/design.md, "Head grace, two graces before a prune"), once the
// holds on its other seats (a lease) are gone, plus the poll that prunes
// it (at most a grace later); per server-wide fault its length, a lease
// and its recovery.
func seatsLiveBound(faultyOthers int, global []Fault) time.Duration {
	b := maxLease() + 2*HeadGrace + LiveSlack
	b += time.Duration(faultyOthers) * (maxLease() + 3*HeadGrace)
	for _, f := range global {
		b += f.End - f.Start + maxLease() + f.Kind.recovery()
	}
	return b
}
