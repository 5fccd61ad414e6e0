package faulttests

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock"
)

// Deterministic tests, one fault kind each, on every kind of lock where it
// matters. Each scripts a few clients through one fault and runs the same
// checkers as the random test on the history.

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

// A Lock whose request is held back longer than go-redis's read timeout
// fails (and its cleanup cannot reach Redis either); the application tries
// again once the network is back, succeeds, and unlocks once. The
// held-back request reaches Redis late: it must not make the owner hold
// the lock twice (after its one Unlock the owner holds nothing, and
// another client gets the lock at once).
func TestFaultStallDuringLock(t *testing.T) {
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

// A holder whose network stalls for longer than its lease (the watchdog
// cannot renew) must see Done close before the lease can have run out in
// Redis, so before a waiter on another client can take the lock.
func TestFaultStallDuringHold(t *testing.T) {
	eachKind(t, allKinds, func(t *testing.T, k LockKind) {
		e := NewSingle(t)
		s := e.Script()
		a, b := e.NewClient(), e.NewClient()
		ha, hb := a.Handle("L", k), b.Handle("L", k)
		if err := s.Lock(ha, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		s.Go(func() {
			if err := s.Lock(hb, 30*time.Second); err == nil {
				time.Sleep(500 * time.Millisecond)
				_ = s.Unlock(hb, 5*time.Second)
			}
		})
		time.Sleep(300 * time.Millisecond)
		e.Stall(a, WatchdogLease+2*time.Second)
		if !s.WaitDone(ha, 10*time.Second) {
			t.Errorf("the holder's Done is still open %v after a stall longer than its lease", 10*time.Second)
		}
		_ = s.Unlock(ha, 5*time.Second) // ErrNotHeld expected: it was lost
		s.Check(t)
	})
}

// With latency on the holder's network, an explicit lease starts in Redis
// after the request was sent: the hold is valid until send + lease - drift,
// not reply + lease. A waiter on a fast client takes the lock when the
// lease runs out in Redis; the holder must not still believe it holds it.
func TestFaultLatencyExplicitLease(t *testing.T) {
	eachKind(t, allKinds, func(t *testing.T, k LockKind) {
		e := NewSingle(t)
		s := e.Script()
		a, b := e.NewClient(), e.NewClient()
		ha, hb := a.Handle("L", k), b.Handle("L", k)
		warm(t, a.Handle("warm", k)) // connection made, scripts loaded
		undo := a.Net.Latency(700 * time.Millisecond)
		i := e.record(FLatency, a, "(700ms each way)")
		if err := s.LockWithLease(ha, ExplicitLeaseMin, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		s.Go(func() {
			if err := s.Lock(hb, 30*time.Second); err == nil {
				time.Sleep(300 * time.Millisecond)
				_ = s.Unlock(hb, 5*time.Second)
			}
		})
		// the holder lets its lease run out
		if !s.WaitDone(ha, ExplicitLeaseMin+5*time.Second) {
			t.Errorf("Done still open long after the explicit lease")
		}
		s.Forget(ha)
		undo()
		e.H.EndFault(i)
		s.Check(t)
	})
}

// Under a stall, every call still returns within its ctx deadline +
// the cleanup timeout + slack: an acquisition that waits, one that does
// not, and an unlock.
func TestFaultCtxDeadlineUnderStall(t *testing.T) {
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

// A fair waiter that becomes the head of the queue without being woken must
// not sleep past the lock's lease. Here three holders in a row let their
// explicit leases run out (no unlock, so nobody publishes); the waiter
// queued fourth sleeps on the reply it got when it joined the queue, and
// must still poll when the lock becomes free.
func TestFaultFairWaiterOversleep(t *testing.T) {
	eachKind(t, fairKinds, func(t *testing.T, k LockKind) {
		e := NewSingle(t)
		s := e.Script()
		var hs []*Handle
		for i := 0; i < 4; i++ {
			hs = append(hs, e.NewClient().Handle("L", k))
		}
		if err := s.LockWithLease(hs[0], ExplicitLeaseMin, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		for _, h := range hs[1:3] { // queue, take the lock in turn, let the lease run out
			s.Go(func() {
				if err := s.LockWithLease(h, ExplicitLeaseMin, 30*time.Second); err == nil {
					s.WaitDone(h, 10*time.Second)
					s.Forget(h)
				}
			})
			time.Sleep(300 * time.Millisecond)
		}
		s.Go(func() { // queued fourth
			if err := s.Lock(hs[3], 40*time.Second); err == nil {
				_ = s.Unlock(hs[3], 5*time.Second)
			}
		})
		s.WaitDone(hs[0], 10*time.Second)
		s.Forget(hs[0])
		s.Check(t)
	})
}

// A holder and the waiter at the head of a fair queue die (network cut for
// ever, nothing cleaned up): the holder's Done closes before its lease can
// run out, and the live waiter behind them gets the lock within the
// liveness bound (one more grace for the dead head).
func TestFaultDeadClients(t *testing.T) {
	eachKind(t, allKinds, func(t *testing.T, k LockKind) {
		e := NewSingle(t)
		s := e.Script()
		x, d, w := e.NewClient(), e.NewClient(), e.NewClient()
		hx, hd, hw := x.Handle("L", k), d.Handle("L", k), w.Handle("L", k)
		if err := s.Lock(hx, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		s.Go(func() { _ = s.Lock(hd, 20*time.Second); s.Forget(hd) })
		time.Sleep(300 * time.Millisecond)
		s.Go(func() {
			if err := s.Lock(hw, 40*time.Second); err == nil {
				_ = s.Unlock(hw, 5*time.Second)
			}
		})
		time.Sleep(300 * time.Millisecond)
		e.Kill(x)
		e.Kill(d)
		if !s.WaitDone(hx, 2*WatchdogLease) {
			t.Errorf("the dead holder's Done is still open %v after its network was cut", 2*WatchdogLease)
		}
		s.Forget(hx)
		s.Check(t)
	})
}

// The server restarts empty while a lock is held and waited for: the old
// holder's window ends within its lease of the restart, the waiter gets
// the lock.
func TestFaultRestart(t *testing.T) {
	eachKind(t, allKinds, func(t *testing.T, k LockKind) {
		e := NewSingle(t)
		s := e.Script()
		a, b := e.NewClient(), e.NewClient()
		ha, hb := a.Handle("L", k), b.Handle("L", k)
		if err := s.Lock(ha, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		s.Go(func() {
			if err := s.Lock(hb, 30*time.Second); err == nil {
				time.Sleep(300 * time.Millisecond)
				_ = s.Unlock(hb, 5*time.Second)
			}
		})
		time.Sleep(500 * time.Millisecond)
		e.Restart()
		if !s.WaitDone(ha, 2*WatchdogLease) {
			t.Errorf("the holder's Done is still open %v after a restart lost its lock", 2*WatchdogLease)
		}
		_ = s.Unlock(ha, 5*time.Second)
		s.Check(t)
	})
}

// The server process is stopped (SIGSTOP) for longer than the lease, then
// continued: the holder, unable to renew, learns it lost the lock before
// Redis can expire it; a waiter gets the lock afterwards.
func TestFaultSigStop(t *testing.T) {
	eachKind(t, allKinds, func(t *testing.T, k LockKind) {
		e := NewSingle(t)
		s := e.Script()
		a, b := e.NewClient(), e.NewClient()
		ha, hb := a.Handle("L", k), b.Handle("L", k)
		if err := s.Lock(ha, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		s.Go(func() {
			if err := s.Lock(hb, 40*time.Second); err == nil {
				time.Sleep(300 * time.Millisecond)
				_ = s.Unlock(hb, 5*time.Second)
			}
		})
		time.Sleep(500 * time.Millisecond)
		e.SigStop(WatchdogLease + 2*time.Second)
		s.WaitDone(ha, 2*WatchdogLease)
		_ = s.Unlock(ha, 5*time.Second)
		s.Check(t)
	})
}

// CLIENT PAUSE ALL for longer than the lease: as SIGSTOP, seen through
// Redis's own pause.
func TestFaultClientPause(t *testing.T) {
	eachKind(t, allKinds, func(t *testing.T, k LockKind) {
		e := NewSingle(t)
		s := e.Script()
		a, b := e.NewClient(), e.NewClient()
		ha, hb := a.Handle("L", k), b.Handle("L", k)
		if err := s.Lock(ha, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		s.Go(func() {
			if err := s.Lock(hb, 40*time.Second); err == nil {
				time.Sleep(300 * time.Millisecond)
				_ = s.Unlock(hb, 5*time.Second)
			}
		})
		time.Sleep(500 * time.Millisecond)
		e.ClientPause(WatchdogLease + 2*time.Second)
		s.WaitDone(ha, 2*WatchdogLease)
		_ = s.Unlock(ha, 5*time.Second)
		s.Check(t)
	})
}

// Every pub/sub connection is killed while waiters queue: they re-subscribe
// and still take the lock in order as soon as it is released.
func TestFaultPubSubKill(t *testing.T) {
	eachKind(t, allKinds, func(t *testing.T, k LockKind) {
		e := NewSingle(t)
		s := e.Script()
		a, b, c := e.NewClient(), e.NewClient(), e.NewClient()
		ha, hb, hc := a.Handle("L", k), b.Handle("L", k), c.Handle("L", k)
		if err := s.Lock(ha, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		for _, h := range []*Handle{hb, hc} {
			s.Go(func() {
				if err := s.Lock(h, 30*time.Second); err == nil {
					time.Sleep(200 * time.Millisecond)
					_ = s.Unlock(h, 5*time.Second)
				}
			})
			time.Sleep(300 * time.Millisecond)
		}
		e.KillPubSub()
		time.Sleep(500 * time.Millisecond)
		_ = s.Unlock(ha, 5*time.Second)
		s.Check(t)
	})
}

// Connection resets on the holder's and a waiter's clients: the lock is
// still handed over within the bound, exclusion holds.
func TestFaultReset(t *testing.T) {
	eachKind(t, allKinds, func(t *testing.T, k LockKind) {
		e := NewSingle(t)
		s := e.Script()
		a, b, c := e.NewClient(), e.NewClient(), e.NewClient()
		ha, hb, hc := a.Handle("L", k), b.Handle("L", k), c.Handle("L", k)
		if err := s.Lock(ha, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		for _, h := range []*Handle{hb, hc} {
			s.Go(func() {
				if err := s.Lock(h, 30*time.Second); err == nil {
					time.Sleep(200 * time.Millisecond)
					_ = s.Unlock(h, 5*time.Second)
				}
			})
			time.Sleep(300 * time.Millisecond)
		}
		e.Reset(a, 3, 300*time.Millisecond)
		e.Reset(b, 3, 300*time.Millisecond)
		time.Sleep(WatchdogLease) // a renewal goes through the reset connections
		_ = s.Unlock(ha, 5*time.Second)
		s.Check(t)
	})
}

// One client's clock runs ahead (by SkewMax, well inside the head grace)
// and it queues first: the others still get the lock in their queue order,
// and nobody waits past the bound.
func TestFaultSkew(t *testing.T) {
	eachKind(t, fairKinds, func(t *testing.T, k LockKind) {
		e := NewSingle(t)
		s := e.Script()
		sk, a, b, c := e.NewClient(), e.NewClient(), e.NewClient(), e.NewClient()
		hs, ha, hb, hc := sk.Handle("L", k), a.Handle("L", k), b.Handle("L", k), c.Handle("L", k)
		sk.clock.Set(SkewMax)
		i := e.record(FSkew, sk, fmt.Sprintf("(%v ahead)", SkewMax))
		if err := s.Lock(ha, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		for _, h := range []*Handle{hs, hb, hc} {
			s.Go(func() {
				if err := s.Lock(h, 30*time.Second); err == nil {
					time.Sleep(HeadGrace / 2)
					_ = s.Unlock(h, 5*time.Second)
				}
			})
			time.Sleep(300 * time.Millisecond)
		}
		time.Sleep(time.Second)
		_ = s.Unlock(ha, 5*time.Second)
		s.bg.Wait()
		e.H.EndFault(i)
		s.Check(t)
	})
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

// No fault at all: a TryLockFor waiter keeps its place in the queue for its
// whole wait (its wait is its slot). Here it queues behind a waiter whose
// turn came late (the holder kept the lock longer than its lease, renewed
// by the watchdog), and a Lock waiter queues behind it: it must still be
// granted before the Lock waiter that joined after it.
func TestFairTryLockForKeepsItsPlace(t *testing.T) {
	eachKind(t, fairKinds, func(t *testing.T, k LockKind) {
		e := NewSingle(t)
		s := e.Script()
		var hs []*Handle
		for i := 0; i < 4; i++ {
			hs = append(hs, e.NewClient().Handle("L", k))
		}
		h, a, b, c := hs[0], hs[1], hs[2], hs[3]
		if err := s.Lock(h, 5*time.Second); err != nil { // holds 2 leases
			t.Fatal(err)
		}
		s.Go(func() { // a queues first and holds for a lease once granted
			if err := s.Lock(a, 30*time.Second); err == nil {
				time.Sleep(WatchdogLease)
				_ = s.Unlock(a, 5*time.Second)
			}
		})
		time.Sleep(WatchdogLease + time.Second) // longer than the lock's lease when a joined
		s.Go(func() {                           // b queues second, for up to 2 leases
			if ok, err := s.TryLockFor(b, 2*WatchdogLease, 0, 30*time.Second); ok && err == nil {
				_ = s.Unlock(b, 5*time.Second)
			}
		})
		time.Sleep(500 * time.Millisecond)
		s.Go(func() { // c queues third
			if err := s.Lock(c, 30*time.Second); err == nil {
				time.Sleep(300 * time.Millisecond)
				_ = s.Unlock(c, 5*time.Second)
			}
		})
		time.Sleep(WatchdogLease - 1500*time.Millisecond)
		_ = s.Unlock(h, 5*time.Second)
		s.Check(t)
	})
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
