package faulttests

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

// Deterministic tests, one fault kind each, on every kind of lock where it
// matters. Each scripts a few clients through one fault and runs the same
// checkers as the random test on the history. Most are values in the
// scenarios table below, run by TestScenarios; the ones of another shape
// are test functions after it.

var allKinds = []LockKind{Reentrant, FairRedisson, FairScalable}
var fairKinds = []LockKind{FairRedisson, FairScalable}

// eachKind runs f as one subtest per kind, all at once (t.Run may be
// called from several goroutines): the tests mostly wait, and this keeps
// the package's run short whatever go test's -parallel is.
func eachKind(t *testing.T, kinds []LockKind, f func(t *testing.T, k LockKind)) {
	var wg sync.WaitGroup
	for _, k := range kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(string(k), func(t *testing.T) { f(t, k) })
		}()
	}
	wg.Wait()
}

// holdCount reads h's hold count in Redis through a client without faults.
func holdCount(t *testing.T, h *Handle) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := h.L.HoldCount(ctx)
	if err != nil {
		t.Fatalf("HoldCount: %v", err)
	}
	return n
}

// The scenarios: on each of its kinds of lock, a holder takes lock "L" on
// its own client, waiters on other clients queue behind it one after
// another, a fault is injected, the holder lets go (or has lost the lock),
// and Script.Check runs the checkers on the history. Each subtest is named
// after the test it was (TestFaultRestart is TestScenarios/FaultRestart).
// The tests that do not fit this shape follow the table.
type scenario struct {
	name  string     // the subtest's name: the old test's name without "Test"
	kinds []LockKind // one subtest each, all at once (eachKind)

	// holderAt is the place of the holder's client among the scenario's
	// clients, in the order they are made; the waiters' clients are the
	// others, in order.
	holderAt int
	// warm: the holder's client makes one acquisition and release on
	// another lock (warm) before the fault starts and the holder acquires.
	warm    bool
	holder  acquire  // the holder's acquisition; the subtest stops if it fails
	waiters []waiter // started in this order, once the holder has the lock
	fault   fault

	settle time.Duration // sleep after the fault fired, before the holder's end
	// holderDone, when set, waits up to this long for the holder's Done to
	// close; notDone, when set, makes it an error that it did not: "the
	// holder's Done is still open <holderDone> after <notDone>".
	holderDone time.Duration
	notDone    string
	// forgetHolder: the holder is forgotten (its hold was lost or ran
	// out), not unlocked.
	forgetHolder bool
}

// acquire is one acquisition call: Lock, LockWithLease (lease set) or
// TryLockFor (wait set), with a ctx of timeout.
type acquire struct {
	wait, lease, timeout time.Duration
}

func lock(timeout time.Duration) acquire { return acquire{timeout: timeout} }
func lockWithLease(lease, timeout time.Duration) acquire {
	return acquire{lease: lease, timeout: timeout}
}
func tryLockFor(wait, lease, timeout time.Duration) acquire {
	return acquire{wait: wait, lease: lease, timeout: timeout}
}

// run makes the call on h; it reports whether h got the lock.
func (a acquire) run(s *Script, h *Handle) (bool, error) {
	switch {
	case a.wait > 0:
		return s.TryLockFor(h, a.wait, a.lease, a.timeout)
	case a.lease > 0:
		err := s.LockWithLease(h, a.lease, a.timeout)
		return err == nil, err
	default:
		err := s.Lock(h, a.timeout)
		return err == nil, err
	}
}

// waiter is one waiting client's part, run in the background (Script.Go).
type waiter struct {
	acquire
	then waiterEnd
	hold time.Duration // unlockAfterHold: how long it holds once granted
	gap  time.Duration // sleep after it started, before the next step
}

type waiterEnd int

const (
	unlockAfterHold waiterEnd = iota // once granted, holds for hold, then Unlock
	letLeaseRunOut                   // once granted, waits up to 10 s for Done, then is forgotten
	forgetIt                         // forgotten whatever its call returned (its client dies)
)

func (w waiter) run(s *Script, h *Handle) {
	got, _ := w.acquire.run(s, h)
	switch w.then {
	case unlockAfterHold:
		if got {
			time.Sleep(w.hold)
			_ = s.Unlock(h, 5*time.Second)
		}
	case letLeaseRunOut:
		if got {
			s.WaitDone(h, 10*time.Second)
			s.Forget(h)
		}
	case forgetIt:
		s.Forget(h)
	}
}

// fault is what a scenario injects, given the holder's and the waiters'
// clients.
type fault struct {
	// start, when set, starts a fault before the holder's acquisition; the
	// function it returns ends it, right after the holder's end, or once
	// every waiter is done when stopAfterWaiters.
	start            func(e *Env, holder *Client, waiters []*Client) (stop func())
	stopAfterWaiters bool
	// fire, when set, fires a fault once the waiters have started; it
	// blocks for the fault's length (faults_test.go's functions do).
	fire func(e *Env, holder *Client, waiters []*Client)
}

var scenarios = []scenario{
	// A holder whose network stalls for longer than its lease (the watchdog
	// cannot renew) must see Done close before the lease can have run out in
	// Redis, so before a waiter on another client can take the lock.
	{
		name: "FaultStallDuringHold", kinds: allKinds,
		holder:  lock(5 * time.Second),
		waiters: []waiter{{acquire: lock(30 * time.Second), hold: 500 * time.Millisecond, gap: 300 * time.Millisecond}},
		fault: fault{fire: func(e *Env, holder *Client, _ []*Client) {
			e.Stall(holder, WatchdogLease+2*time.Second)
		}},
		holderDone: 10 * time.Second, notDone: "a stall longer than its lease",
		// then Unlock: ErrNotHeld expected, it was lost
	},
	// With latency on the holder's network, an explicit lease starts in Redis
	// after the request was sent: the hold is valid until send + lease - drift,
	// not reply + lease. A waiter on a fast client takes the lock when the
	// lease runs out in Redis; the holder must not still believe it holds it.
	{
		name: "FaultLatencyExplicitLease", kinds: allKinds,
		warm: true, // connection made, scripts loaded
		fault: fault{start: func(e *Env, holder *Client, _ []*Client) func() {
			undo := holder.Net.Latency(700 * time.Millisecond)
			i := e.record(FLatency, holder, "(700ms each way)")
			return func() { undo(); e.H.EndFault(i) }
		}},
		holder:  lockWithLease(ExplicitLeaseMin, 10*time.Second),
		waiters: []waiter{{acquire: lock(30 * time.Second), hold: 300 * time.Millisecond}},
		// the holder lets its lease run out
		holderDone: ExplicitLeaseMin + 5*time.Second, notDone: "its explicit lease was granted",
		forgetHolder: true,
	},
	// A fair waiter that becomes the head of the queue without being woken must
	// not sleep past the lock's lease. Here three holders in a row let their
	// explicit leases run out (no unlock, so nobody publishes); the waiter
	// queued fourth sleeps on the reply it got when it joined the queue, and
	// must still poll when the lock becomes free.
	{
		name: "FaultFairWaiterOversleep", kinds: fairKinds,
		holder: lockWithLease(ExplicitLeaseMin, 5*time.Second),
		waiters: []waiter{
			{acquire: lockWithLease(ExplicitLeaseMin, 30*time.Second), then: letLeaseRunOut, gap: 300 * time.Millisecond},
			{acquire: lockWithLease(ExplicitLeaseMin, 30*time.Second), then: letLeaseRunOut, gap: 300 * time.Millisecond},
			{acquire: lock(40 * time.Second)}, // queued fourth, unlocks at once
		},
		holderDone: 10 * time.Second, forgetHolder: true,
	},
	// A holder and the waiter at the head of a fair queue die (network cut for
	// ever, nothing cleaned up): the holder's Done closes before its lease can
	// run out, and the live waiter behind them gets the lock within the
	// liveness bound (one more grace for the dead head).
	{
		name: "FaultDeadClients", kinds: allKinds,
		holder: lock(5 * time.Second),
		waiters: []waiter{
			{acquire: lock(20 * time.Second), then: forgetIt, gap: 300 * time.Millisecond}, // dies
			{acquire: lock(40 * time.Second), gap: 300 * time.Millisecond},                 // unlocks at once
		},
		fault: fault{fire: func(e *Env, holder *Client, waiters []*Client) {
			e.Kill(holder)
			e.Kill(waiters[0])
		}},
		holderDone: 2 * WatchdogLease, notDone: "its network was cut (it died)",
		forgetHolder: true,
	},
	// The server restarts empty while a lock is held and waited for: the old
	// holder's window ends within its lease of the restart, the waiter gets
	// the lock.
	{
		name: "FaultRestart", kinds: allKinds,
		holder:     lock(5 * time.Second),
		waiters:    []waiter{{acquire: lock(30 * time.Second), hold: 300 * time.Millisecond, gap: 500 * time.Millisecond}},
		fault:      fault{fire: func(e *Env, _ *Client, _ []*Client) { e.Restart() }},
		holderDone: 2 * WatchdogLease, notDone: "a restart lost its lock",
	},
	// The server process is stopped (SIGSTOP) for longer than the lease, then
	// continued: the holder, unable to renew, learns it lost the lock before
	// Redis can expire it; a waiter gets the lock afterwards.
	{
		name: "FaultSigStop", kinds: allKinds,
		holder:     lock(5 * time.Second),
		waiters:    []waiter{{acquire: lock(40 * time.Second), hold: 300 * time.Millisecond, gap: 500 * time.Millisecond}},
		fault:      fault{fire: func(e *Env, _ *Client, _ []*Client) { e.SigStop(WatchdogLease + 2*time.Second) }},
		holderDone: 2 * WatchdogLease, // waited for, not asserted
	},
	// CLIENT PAUSE ALL for longer than the lease: as SIGSTOP, seen through
	// Redis's own pause.
	{
		name: "FaultClientPause", kinds: allKinds,
		holder:     lock(5 * time.Second),
		waiters:    []waiter{{acquire: lock(40 * time.Second), hold: 300 * time.Millisecond, gap: 500 * time.Millisecond}},
		fault:      fault{fire: func(e *Env, _ *Client, _ []*Client) { e.ClientPause(WatchdogLease + 2*time.Second) }},
		holderDone: 2 * WatchdogLease, // waited for, not asserted
	},
	// Every pub/sub connection is killed while waiters queue: they re-subscribe
	// and still take the lock in order as soon as it is released.
	{
		name: "FaultPubSubKill", kinds: allKinds,
		holder: lock(5 * time.Second),
		waiters: []waiter{
			{acquire: lock(30 * time.Second), hold: 200 * time.Millisecond, gap: 300 * time.Millisecond},
			{acquire: lock(30 * time.Second), hold: 200 * time.Millisecond, gap: 300 * time.Millisecond},
		},
		fault:  fault{fire: func(e *Env, _ *Client, _ []*Client) { e.KillPubSub() }},
		settle: 500 * time.Millisecond,
	},
	// Connection resets on the holder's and a waiter's clients: the lock is
	// still handed over within the bound, exclusion holds.
	{
		name: "FaultReset", kinds: allKinds,
		holder: lock(5 * time.Second),
		waiters: []waiter{
			{acquire: lock(30 * time.Second), hold: 200 * time.Millisecond, gap: 300 * time.Millisecond},
			{acquire: lock(30 * time.Second), hold: 200 * time.Millisecond, gap: 300 * time.Millisecond},
		},
		fault: fault{fire: func(e *Env, holder *Client, waiters []*Client) {
			e.Reset(holder, 3, 300*time.Millisecond)
			e.Reset(waiters[0], 3, 300*time.Millisecond)
		}},
		settle: WatchdogLease, // a renewal goes through the reset connections
	},
	// One client's clock runs ahead (by SkewMax, well inside the head grace)
	// and it queues first: the others still get the lock in their queue order,
	// and nobody waits past the bound.
	{
		name: "FaultSkew", kinds: fairKinds,
		holderAt: 1, // the skewed client is made first
		fault: fault{start: func(e *Env, _ *Client, waiters []*Client) func() {
			sk := waiters[0]
			sk.clock.Set(SkewMax)
			i := e.record(FSkew, sk, fmt.Sprintf("(%v ahead)", SkewMax))
			return func() { e.H.EndFault(i) }
		}, stopAfterWaiters: true},
		holder: lock(5 * time.Second),
		waiters: []waiter{
			{acquire: lock(30 * time.Second), hold: HeadGrace / 2, gap: 300 * time.Millisecond}, // skewed
			{acquire: lock(30 * time.Second), hold: HeadGrace / 2, gap: 300 * time.Millisecond},
			{acquire: lock(30 * time.Second), hold: HeadGrace / 2, gap: 300 * time.Millisecond},
		},
		settle: time.Second,
	},
	// No fault at all: a TryLockFor waiter keeps its place in the queue for its
	// whole wait (its wait is its slot). Here it queues behind a waiter whose
	// turn came late (the holder kept the lock longer than its lease, renewed
	// by the watchdog), and a Lock waiter queues behind it: it must still be
	// granted before the Lock waiter that joined after it.
	{
		name: "FairTryLockForKeepsItsPlace", kinds: fairKinds,
		holder: lock(5 * time.Second), // holds 2 leases
		waiters: []waiter{
			// a queues first and holds for a lease once granted; the gap is
			// longer than the lock's lease when a joined
			{acquire: lock(30 * time.Second), hold: WatchdogLease, gap: WatchdogLease + time.Second},
			// b queues second, for up to 2 leases, and unlocks at once
			{acquire: tryLockFor(2*WatchdogLease, 0, 30*time.Second), gap: 500 * time.Millisecond},
			// c queues third
			{acquire: lock(30 * time.Second), hold: 300 * time.Millisecond, gap: WatchdogLease - 1500*time.Millisecond},
		},
	},
}

// TestScenarios runs the scenarios one after another.
func TestScenarios(t *testing.T) {
	redistest.Long(t)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) { eachKind(t, sc.kinds, sc.run) })
	}
}

// run runs the scenario on a lock of kind k.
func (sc scenario) run(t *testing.T, k LockKind) {
	e := NewSingle(t)
	s := e.Script()
	var holder *Client
	var waiters []*Client
	for i := range len(sc.waiters) + 1 {
		if c := e.NewClient(); i == sc.holderAt {
			holder = c
		} else {
			waiters = append(waiters, c)
		}
	}
	hh := holder.Handle("L", k)
	var wh []*Handle
	for _, c := range waiters {
		wh = append(wh, c.Handle("L", k))
	}
	if sc.warm {
		warm(t, holder.Handle("warm", k))
	}
	var stop func()
	if sc.fault.start != nil {
		stop = sc.fault.start(e, holder, waiters)
	}
	if ok, err := sc.holder.run(s, hh); !ok {
		t.Fatal(err)
	}
	for i, w := range sc.waiters {
		s.Go(func() { w.run(s, wh[i]) })
		time.Sleep(w.gap)
	}
	if sc.fault.fire != nil {
		sc.fault.fire(e, holder, waiters)
	}
	time.Sleep(sc.settle)
	if sc.holderDone > 0 {
		if !s.WaitDone(hh, sc.holderDone) && sc.notDone != "" {
			t.Errorf("the holder's Done is still open %v after %s", sc.holderDone, sc.notDone)
		}
	}
	if sc.forgetHolder {
		s.Forget(hh)
	} else {
		_ = s.Unlock(hh, 5*time.Second)
	}
	if stop != nil {
		if sc.fault.stopAfterWaiters {
			s.bg.Wait()
		}
		stop()
	}
	s.Check(t)
}

// A Lock whose request is held back longer than go-redis's read timeout
// fails (and its cleanup cannot reach Redis either); the application tries
// again once the network is back, succeeds, and unlocks once. The
// held-back request reaches Redis late: it must not make the owner hold
// the lock twice (after its one Unlock the owner holds nothing, and
// another client gets the lock at once).
func TestFaultStallDuringLock(t *testing.T) {
	redistest.Long(t)
	eachKind(t, allKinds, func(t *testing.T, k LockKind) {
		e := NewSingle(t)
		s := e.Script()
		a, b := e.NewClient(), e.NewClient()
		ha, hb := a.Handle("L", k), b.Handle("L", k)
		warm(t, a.Handle("warm", k))
		undo := a.Net.Stall()
		i := e.record(FStall, a, "(until the Lock under it has returned)")
		err := s.Lock(ha, 2*ReadTimeout)
		t.Logf("Lock under the stall: %v", err)
		time.Sleep(time.Second)
		undo() // the held-back request reaches Redis now
		e.H.EndFault(i)
		if err == nil {
			t.Fatalf("Lock succeeded under a stall")
		}
		time.Sleep(300 * time.Millisecond)
		if err := s.Lock(ha, 5*time.Second); err != nil {
			t.Fatalf("Lock after the stall: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
		if err := s.Unlock(ha, 5*time.Second); err != nil {
			t.Errorf("Unlock: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
		if n := holdCount(t, ha); n != 0 {
			t.Errorf("after its one successful Lock and its Unlock, the owner still holds the lock %d time(s) in Redis: the failed Lock under the stall counted too", n)
		}
		// the bound for b is liveBound(1 faulty other client): 16s; give it 20
		if err := s.Lock(hb, 20*time.Second); err == nil {
			_ = s.Unlock(hb, 5*time.Second)
		} else {
			t.Errorf("the other client could not get the lock: %v", err)
		}
		s.Check(t)
	})
}

// Under a stall, every call still returns within its ctx deadline +
// the cleanup timeout + slack: an acquisition that waits, one that does
// not, and an unlock.
func TestFaultCtxDeadlineUnderStall(t *testing.T) {
	redistest.Long(t)
	eachKind(t, allKinds, func(t *testing.T, k LockKind) {
		e := NewSingle(t)
		s := e.Script()
		a := e.NewClient()
		ha, hb, hc := a.Handle("L", k), a.Handle("M", k), a.Handle("N", k)
		warm(t, ha)
		if err := s.Lock(hc, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		stall := callBound(time.Second) + 3*time.Second
		undo := a.Net.Stall()
		i := e.record(FStall, a, fmt.Sprintf("(%v)", stall))
		s.Go(func() { _ = s.Lock(ha, time.Second) })
		s.Go(func() { _, _ = s.TryLockFor(hb, 500*time.Millisecond, 0, time.Second) })
		s.Go(func() { _ = s.Unlock(hc, time.Second) })
		time.Sleep(stall)
		undo()
		e.H.EndFault(i)
		s.bg.Wait()
		s.Forget(ha)
		s.Forget(hb)
		s.Forget(hc)
		time.Sleep(WatchdogLease + time.Second) // whatever the stalled calls did expires
		s.Check(t)
	})
}

// Client.Close while the client holds locks (watchdog and explicit lease)
// and waits for others: when Close returns, every hold has ended with an
// error matching ErrClosed and every wait has returned ErrClosed.
func TestFaultClose(t *testing.T) {
	e := NewSingle(t)
	s := e.Script()
	c, other := e.NewClient(), e.NewClient()
	var holders, waiters []*Handle
	for _, k := range allKinds {
		h1, h2 := c.Handle("held-"+string(k), k), c.Handle("leased-"+string(k), k)
		if err := s.Lock(h1, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := s.LockWithLease(h2, ExplicitLeaseMax, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		holders = append(holders, h1, h2)
		// a lock the other client holds, that c waits for
		o := other.Handle("busy-"+string(k), k)
		if err := s.Lock(o, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		w := c.Handle("busy-"+string(k), k)
		waiters = append(waiters, w)
		s.Go(func() { _ = s.Lock(w, 10*time.Second) })
		defer func() { _ = s.Unlock(o, 5*time.Second) }()
	}
	time.Sleep(500 * time.Millisecond)
	c.Close()
	for _, h := range holders {
		select {
		case <-h.L.Done():
			if !errors.Is(h.L.Err(), fairlock.ErrClosed) {
				t.Errorf("%s: after Close, Err = %v, want ErrClosed", h.Lock, h.L.Err())
			}
		default:
			t.Errorf("%s: Done still open after Close returned", h.Lock)
		}
		s.Forget(h)
	}
	s.Check(t)
}

// warm makes one acquisition and release on h, so that the client has a
// connection and Redis has the scripts before a test's fault.
func warm(t *testing.T, h *Handle) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.L.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.L.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// joinedSince waits until h's owner has a queue join sent at or after
// from, or until d passes; it reports whether one came.
func joinedSince(e *Env, h *Handle, from, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		found := false
		e.H.Update(func() {
			for _, j := range e.H.Joins {
				if j.Owner == h.L.Owner() && j.Start >= from {
					found = true
				}
			}
		})
		if found {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// A waiter whose give-up cannot reach Redis when its wait ends (its
// network is down: in TestReplicaFailover, a failover) leaves the give-up
// to a background retry. The same handle's next Lock must not join the
// queue before that give-up is done: the give-up removes the owner's entry,
// whichever call made it, so landing after the new join it took the new
// call's place away, and a waiter that joined after it was granted first
// (TestReplicaFailover, seed 2953879420059320300: "[order] ... 20a8d0:6
// joined the queue at 14.511s, before a17339:3 joined at 14.673s, but was
// granted after it"; its give-up of the call that ended at 14.276s ran at
// 14.304s in another run of the seed, 0.1 s after the owner's new join).
func TestFairGiveUpBeforeRejoin(t *testing.T) {
	redistest.Long(t)
	t.Parallel() // it mostly waits
	eachKind(t, fairKinds, func(t *testing.T, k LockKind) {
		e := NewSingle(t)
		s := e.Script()
		h := e.NewClient().Handle("L", k)
		xc := e.NewClient()
		x := xc.Handle("L", k)
		y := e.NewClient().Handle("L", k)
		if err := s.Lock(h, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		// x queues; its network is cut; its wait ends: the give-up
		// fails and goes on in the background.
		start := e.H.Now()
		first := make(chan error, 1)
		go func() { first <- s.Lock(x, 1500*time.Millisecond) }()
		if !joinedSince(e, x, start, 5*time.Second) {
			t.Fatal("x never queued")
		}
		fi := e.record(FReset, xc, "(connections closed and refused until the wait ended)")
		undo := xc.Net.Cut()
		if err := <-first; err == nil {
			t.Fatal("x's Lock succeeded with its network cut")
		}
		undo()
		e.H.EndFault(fi)
		// x again, at once; then y, once x has queued.
		order := make(chan string, 2)
		again := e.H.Now()
		s.Go(func() {
			if err := s.Lock(x, 30*time.Second); err == nil {
				order <- "x"
				_ = s.Unlock(x, 5*time.Second)
			}
		})
		if !joinedSince(e, x, again, 15*time.Second) {
			t.Fatal("x's second Lock never queued")
		}
		yAt := e.H.Now()
		s.Go(func() {
			if err := s.Lock(y, 30*time.Second); err == nil {
				order <- "y"
				_ = s.Unlock(y, 5*time.Second)
			}
		})
		if !joinedSince(e, y, yAt, 5*time.Second) {
			t.Fatal("y never queued")
		}
		// The background retry's backoff doubles from 100 ms: the try
		// after the network came back is due about 1 s later. A give-up
		// still pending would have landed by now (before the fix it
		// always had).
		time.Sleep(4 * time.Second)
		_ = s.Unlock(h, 5*time.Second)
		if a, b := <-order, <-order; a != "x" || b != "y" {
			t.Errorf("granted %s then %s; x queued (again) before y", a, b)
		}
		s.Check(t)
	})
}

// A client whose network is cut (a host that lost its network: Kill) and
// that is closed while a Lock of it waits gets ErrClosed from that Lock, as
// Close promises: the cut is a network failure, which the wait rides out
// within its outage budget, and Close ends the wait. The fault proxy's cut
// was once an error of its own kind, which the lock took for a permanent
// one: the wait ended at its first attempt, and its call, still awaiting
// the give-back when Close came, returned the cut instead
// (TestPositionFaults, FAULT_SEED=4788594480416065339: "a wait ended by
// Close did not return ErrClosed").
func TestCloseEndsTheWaitOfACutClient(t *testing.T) {
	redistest.Long(t)
	t.Parallel() // it mostly waits
	eachKind(t, fairKinds, func(t *testing.T, k LockKind) {
		e := NewSingle(t)
		s := e.Script()
		h := e.NewClient().Handle("L", k)
		xc := e.NewClient()
		x := xc.Handle("L", k)
		const lease = 1500 * time.Millisecond
		if err := s.LockWithLease(h, lease, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		leaseEnds := time.Now().Add(lease)
		start := e.H.Now()
		res := make(chan error, 1)
		go func() { res <- s.Lock(x, 20*time.Second) }()
		if !joinedSince(e, x, start, 5*time.Second) {
			t.Fatal("x never queued")
		}
		e.Kill(xc)
		// x attempts when h's lease ends, and meets the cut network.
		time.Sleep(time.Until(leaseEnds) + 700*time.Millisecond)
		xc.Close()
		select {
		case err := <-res:
			if !errors.Is(err, fairlock.ErrClosed) {
				t.Fatalf("x's Lock, waiting when its client was closed, returned %v, want ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("x's Lock did not return after its client was closed")
		}
	})
}
