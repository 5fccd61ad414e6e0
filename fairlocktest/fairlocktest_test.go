package fairlocktest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/fairlocktest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/reentrant"
	"github.com/fairlock-go/fairlock/semaphore"
)

// bound is how long a test waits for something that should happen at once:
// generous, so that a loaded machine never fails a test; it only keeps a
// broken one from hanging.
const bound = 30 * time.Second

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds, failing t after bound.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", bound, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFairLockAcquireRelease(t *testing.T) {
	c := fairlocktest.New(t)
	ctx := ctxFor(t)
	m, err := fair.New(c, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if held, err := m.IsHeld(ctx); err != nil || !held {
		t.Fatalf("IsHeld after Lock = %v, %v; want true", held, err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if locked, err := m.IsLocked(ctx); err != nil || locked {
		t.Fatalf("IsLocked after Unlock = %v, %v; want false", locked, err)
	}
	if err := m.Unlock(ctx); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("second Unlock = %v; want ErrNotHeld", err)
	}
}

// Waiters on two clients (two processes) queue behind a holder and are
// granted in the order they joined once it unlocks.
func TestFairWaitersGrantedInOrder(t *testing.T) {
	s := fairlocktest.NewServer(t)
	clients := []*fairlock.Client{s.Client(t), s.Client(t)}
	ctx := ctxFor(t)
	const name = "printer"
	queue := wire.KeysFor(name).Queue

	holder, err := fair.New(clients[0], name)
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	const waiters = 4
	granted := make(chan int, waiters)
	errs := make(chan error, waiters)
	for i := range waiters {
		m, err := fair.New(clients[i%2], name)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			if err := m.Lock(ctx); err != nil {
				errs <- err
				return
			}
			granted <- i
			errs <- m.Unlock(ctx)
		}()
		// the next waiter arrives once this one is queued
		eventually(t, "waiter not queued", func() bool {
			return s.Redis().LLen(ctx, queue).Val() == int64(i+1)
		})
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for want := range waiters {
		select {
		case got := <-granted:
			if got != want {
				t.Fatalf("grant %d went to waiter %d; want waiter %d", want, got, want)
			}
		case <-ctx.Done():
			t.Fatalf("waiter %d never granted", want)
		}
	}
	for range waiters {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// Two clients of one server are two owners.
func TestClientsAreDistinctOwners(t *testing.T) {
	s := fairlocktest.NewServer(t)
	a, b := s.Client(t), s.Client(t)
	if a.ID() == b.ID() {
		t.Fatalf("two clients share the id %q", a.ID())
	}
	ctx := ctxFor(t)
	ma, _ := reentrant.New(a, "job")
	mb, _ := reentrant.New(b, "job")
	if err := ma.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := mb.TryLock(ctx); err != nil || ok {
		t.Fatalf("second owner's TryLock = %v, %v; want false", ok, err)
	}
	if err := ma.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := mb.TryLock(ctx); err != nil || !ok {
		t.Fatalf("TryLock after Unlock = %v, %v; want true", ok, err)
	}
}

// Options reach NewClient.
func TestOptionsPassedThrough(t *testing.T) {
	c := fairlocktest.New(t, fairlock.WithLease(2*time.Second))
	ctx := ctxFor(t)
	m, _ := reentrant.New(c, "lease")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	left, err := m.RemainingLease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if left <= 0 || left > 2*time.Second {
		t.Fatalf("RemainingLease = %v; want the 2 s watchdog lease or less", left)
	}
}

// A nil option is refused by NewClient, which fails the test.
func TestBadOptionFailsTest(t *testing.T) {
	ft := runQuiet(func(t testing.TB) {
		fairlocktest.New(t, nil)
		t.Error("New returned after a refused option")
	})
	if !ft.Failed() || !strings.Contains(ft.log.String(), "option 0 is nil") {
		t.Fatalf("failed=%v log=%q; want a failure naming the nil option", ft.Failed(), ft.log.String())
	}
}

// FastForward ends a lease in Redis at once: another owner takes the lock,
// and the old holder's Unlock finds it gone.
func TestFastForwardEndsLease(t *testing.T) {
	s := fairlocktest.NewServer(t)
	ctx := ctxFor(t)
	a, _ := fair.New(s.Client(t), "slot")
	b, _ := fair.New(s.Client(t), "slot")
	if err := a.LockWithLease(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.TryLock(ctx); err != nil || ok {
		t.Fatalf("TryLock while held = %v, %v; want false", ok, err)
	}
	s.FastForward(2 * time.Hour)
	if ok, err := b.TryLock(ctx); err != nil || !ok {
		t.Fatalf("TryLock after the lease ran out = %v, %v; want true", ok, err)
	}
	if err := a.Unlock(ctx); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("old holder's Unlock = %v; want ErrNotHeld", err)
	}
}

// The semaphores' leases are on the server clock (TIME): FastForward does
// not end them; moving the clock with SetTime does.
func TestSemaphoreLeaseFollowsServerClock(t *testing.T) {
	s := fairlocktest.NewServer(t)
	ctx := ctxFor(t)
	a, _ := semaphore.NewExpirable(s.Client(t), "pool")
	b, _ := semaphore.NewExpirable(s.Client(t), "pool")
	if _, err := a.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Acquire(ctx, 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	s.FastForward(2 * time.Hour)
	if p, err := b.TryAcquire(ctx, 1, 0, time.Hour); err != nil || p != nil {
		t.Fatalf("TryAcquire after FastForward = %v, %v; want no permit", p, err)
	}
	s.Miniredis().SetTime(time.Now().Add(2 * time.Hour))
	if p, err := b.TryAcquire(ctx, 1, 0, time.Hour); err != nil || p == nil {
		t.Fatalf("TryAcquire after SetTime = %v, %v; want a permit", p, err)
	}
}

// A holder kept by the watchdog learns of a lease FastForward ended at its
// next renewal.
func TestFastForwardWatchdogSeesLoss(t *testing.T) {
	s := fairlocktest.NewServer(t)
	ctx := ctxFor(t)
	m, _ := reentrant.New(s.Client(t, fairlock.WithLease(300*time.Millisecond)), "renewed")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	s.FastForward(time.Hour)
	select {
	case <-m.Done():
	case <-ctx.Done():
		t.Fatal("the holder never saw its lock gone")
	}
	if err := m.Err(); !errors.Is(err, fairlock.ErrLost) {
		t.Fatalf("Err = %v; want ErrLost", err)
	}
}

// Leases run down with the wall clock, as on Redis, without FastForward:
// the lock of a holder whose process died (its link to Redis gone, so it
// cannot give the lock back) is free once its lease has run out.
func TestDeadHoldersLeaseRunsOut(t *testing.T) {
	s := fairlocktest.NewServer(t)
	ctx := ctxFor(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	dying, err := fairlock.NewClient(rdb, fairlock.WithCleanupTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dying.Close() }) // its goroutines end; it cannot reach Redis
	a, _ := reentrant.New(dying, "short")
	if err := a.LockWithLease(ctx, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	_ = rdb.Close() // the holder's process is gone
	b, _ := reentrant.New(s.Client(t), "short")
	eventually(t, "the dead holder's 100 ms lease never ran out", func() bool {
		ok, err := b.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	})
}

// Everything a test double started ends with its test: clients with a hold
// and a waiter still pending, the watchdog, pub/sub, go-redis, miniredis.
func TestCleanupLeavesNoGoroutines(t *testing.T) {
	before := goleak.IgnoreCurrent()
	waitErr := make(chan error, 1)
	t.Run("use", func(t *testing.T) {
		s := fairlocktest.NewServer(t)
		ctx := ctxFor(t)
		holder, _ := fair.New(s.Client(t), "left-held")
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		waiter, _ := fair.New(s.Client(t), "left-held")
		go func() { waitErr <- waiter.Lock(context.Background()) }()
		eventually(t, "waiter not queued", func() bool {
			return s.Redis().LLen(ctx, wire.KeysFor("left-held").Queue).Val() == 1
		})
		// the test ends holding the lock, with the waiter still waiting
	})
	select {
	case err := <-waitErr:
		if !errors.Is(err, fairlock.ErrClosed) {
			t.Fatalf("pending Lock returned %v; want ErrClosed", err)
		}
	case <-time.After(bound):
		t.Fatal("pending Lock never returned after cleanup")
	}
	if err := goleak.Find(before); err != nil {
		t.Fatal(err)
	}
}
