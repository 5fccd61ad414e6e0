package fairlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/fenced"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/multi"
	"github.com/fairlock-go/fairlock/reentrant"
	"github.com/fairlock-go/fairlock/semaphore"
)

// Every client option given a value outside what its doc defines is
// refused with ErrInvalidValue, naming the option and the value, and makes
// no client; each documented special value is accepted, and 0 keeps the
// option's default.
func TestClientOptionValues(t *testing.T) {
	b := redistest.Mini(t)
	rdb := b.Client(t)
	bad := []struct {
		o    fairlock.Option
		want string // in the message: the option and its value
	}{
		{fairlock.WithLease(time.Millisecond), "WithLease(1ms)"},
		{fairlock.WithLease(2 * time.Millisecond), "WithLease(2ms)"},
		{fairlock.WithLease(-time.Second), "WithLease(-1s)"},
		{fairlock.WithWaitSlot(500 * time.Microsecond), "WithWaitSlot(500µs)"},
		{fairlock.WithWaitSlot(-time.Second), "WithWaitSlot(-1s)"},
		{fairlock.WithHeadGrace(500 * time.Microsecond), "WithHeadGrace(500µs)"},
		{fairlock.WithLatchTTL(500 * time.Microsecond), "WithLatchTTL(500µs)"},
		{fairlock.WithLatchTTL(-time.Second), "WithLatchTTL(-1s)"},
		{fairlock.WithCleanupTimeout(-time.Second), "WithCleanupTimeout(-1s)"},
		{fairlock.WithRenewBatch(-1), "WithRenewBatch(-1)"},
		{fairlock.WithLongWaitAlert(-time.Second), "WithLongWaitAlert(-1s)"},
		{fairlock.WithLongHoldAlert(-time.Second), "WithLongHoldAlert(-1s)"},
	}
	for _, tc := range bad {
		// A valid option after the bad one does not hide it.
		c, err := fairlock.NewClient(rdb, tc.o, fairlock.WithLease(time.Second))
		if !errors.Is(err, fairlock.ErrInvalidValue) || c != nil {
			t.Errorf("%s: client %v, error %v; want no client and ErrInvalidValue", tc.want, c, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Count(msg, "fairlock:") != 1 {
			t.Errorf("%s: message %q does not name the option and value once", tc.want, msg)
		}
	}
	if keys := b.Mini.Keys(); len(keys) != 0 {
		t.Errorf("refused clients wrote %v", keys)
	}
	good := []fairlock.Option{
		fairlock.WithLease(3 * time.Millisecond), fairlock.WithHeadGrace(-1), fairlock.WithReplicaAck(-1),
		fairlock.WithLongWaitAlert(0), fairlock.WithLongHoldAlert(0), fairlock.WithRenewBatch(1),
		fairlock.WithCleanupTimeout(time.Millisecond), fairlock.WithWaitSlot(time.Millisecond), fairlock.WithLatchTTL(time.Millisecond),
		fairlock.WithHeadGrace(time.Millisecond),
		// 0 keeps the default
		fairlock.WithLease(0), fairlock.WithWaitSlot(0), fairlock.WithHeadGrace(0), fairlock.WithLatchTTL(0),
		fairlock.WithCleanupTimeout(0), fairlock.WithRenewBatch(0), fairlock.WithReplicaAck(0), fairlock.WithOutageBudget(0),
	}
	for i, o := range good {
		c, err := fairlock.NewClient(rdb, o)
		if err != nil {
			t.Errorf("documented value %d refused: %v", i, err)
			continue
		}
		_ = c.Close()
	}
	// WithLease(0) kept the default watchdog lease (30 s).
	c, err := fairlock.NewClient(rdb, fairlock.WithLease(0), fairlock.WithWaitSlot(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	m, _ := reentrant.New(c, "inputs:zero-lease")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if left, _ := m.RemainingLease(ctx); left < 20*time.Second || left > 30*time.Second {
		t.Errorf("WithLease(0): lease %v, want the default 30 s", left)
	}
	_ = m.Unlock(ctx)
}

// A lock option out of range makes New fail with ErrInvalidValue, naming
// the option.
func TestLockOptionValues(t *testing.T) {
	c, err := fairlock.NewClient(redistest.Mini(t).Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, id := range []int64{0, -1} {
		if _, err := reentrant.New(c, "x", fairlock.WithThreadID(id)); !errors.Is(err, fairlock.ErrInvalidValue) || !strings.Contains(err.Error(), "WithThreadID") {
			t.Errorf("reentrant WithThreadID(%d): %v", id, err)
		}
		if _, err := fair.New(c, "x", fairlock.WithThreadID(id)); !errors.Is(err, fairlock.ErrInvalidValue) {
			t.Errorf("fair WithThreadID(%d): %v", id, err)
		}
	}
	if _, err := fair.New(c, "x", fair.WithWaitSlot(0)); !errors.Is(err, fairlock.ErrInvalidValue) || !strings.Contains(err.Error(), "WithWaitSlot(0s)") {
		t.Errorf("fair.WithWaitSlot(0): %v", err)
	}
}

// Leases and waits mean one thing across the API: lease 0 is the
// watchdog's (LockWithLease as TryLockFor, as Redisson's lock(leaseTime));
// a negative lease or wait, or an explicit lease under 10 ms, is refused
// with ErrInvalidValue and takes nothing.
func TestLeaseAndWaitArguments(t *testing.T) {
	b := redistest.Mini(t)
	rdb := b.Client(t)
	c, err := fairlock.NewClient(rdb, fairlock.WithLease(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p := redistest.Prefix(t)
	r, _ := reentrant.New(c, p+"r")
	f, _ := fair.New(c, p+"f")
	fe, _ := fenced.New(c, p+"fe")
	type lockCall struct {
		what string
		call func() error
	}
	refused := []lockCall{
		{"LockWithLease(-1s)", func() error { return r.LockWithLease(ctx, -time.Second) }},
		{"LockWithLease(5ms)", func() error { return r.LockWithLease(ctx, 5*time.Millisecond) }},
		{"fair LockWithLease(-1s)", func() error { return f.LockWithLease(ctx, -time.Second) }},
		{"TryLockFor(-1s, 0)", func() error { _, err := r.TryLockFor(ctx, -time.Second, 0); return err }},
		{"TryLockFor(-1ns, 0)", func() error { _, err := r.TryLockFor(ctx, -1, 0); return err }},
		{"TryLockFor(0, -1s)", func() error { _, err := r.TryLockFor(ctx, 0, -time.Second); return err }},
		{"fair TryLockFor(1s, -1s)", func() error { _, err := f.TryLockFor(ctx, time.Second, -time.Second); return err }},
		{"LockAndGetTokenWithLease(-1s)", func() error { _, err := fe.LockAndGetTokenWithLease(ctx, -time.Second); return err }},
		{"TryLockAndGetToken(0, -1s)", func() error { _, _, err := fe.TryLockAndGetToken(ctx, 0, -time.Second); return err }},
	}
	for _, tc := range refused {
		err := tc.call()
		if !errors.Is(err, fairlock.ErrInvalidValue) {
			t.Errorf("%s: %v, want ErrInvalidValue", tc.what, err)
			continue
		}
		if msg := err.Error(); strings.Count(msg, "fairlock:") != 1 || !strings.Contains(msg, p) {
			t.Errorf("%s: message %q does not name the lock once", tc.what, msg)
		}
	}
	if keys := b.Mini.Keys(); len(keys) != 0 {
		t.Errorf("refused calls wrote %v", keys)
	}
	// Lease 0: the watchdog keeps the lock (its lease is the client's 30 s).
	watchdog := func(what string, h interface {
		RemainingLease(context.Context) (time.Duration, error)
		Unlock(context.Context) error
	}, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
			return
		}
		if left, err := h.RemainingLease(ctx); err != nil || left < 20*time.Second || left > 30*time.Second {
			t.Errorf("%s: remaining lease %v (%v), want the watchdog's 30s", what, left, err)
		}
		if err := h.Unlock(ctx); err != nil {
			t.Errorf("%s: Unlock: %v", what, err)
		}
	}
	watchdog("LockWithLease(0)", r, r.LockWithLease(ctx, 0))
	watchdog("fair LockWithLease(0)", f, f.LockWithLease(ctx, 0))
	_, err = fe.LockAndGetTokenWithLease(ctx, 0)
	watchdog("LockAndGetTokenWithLease(0)", fe, err)
	ok, err := r.TryLockFor(ctx, 0, 0)
	if !ok {
		err = errors.Join(err, errors.New("not acquired"))
	}
	watchdog("TryLockFor(0, 0)", r, err)

	// The semaphores: lease 0 is the watchdog's; a negative lease or wait,
	// or n <= 0, is refused and takes nothing.
	s, _ := semaphore.NewFair(c, p+"s")
	if err := s.SetPermits(ctx, 2); err != nil {
		t.Fatal(err)
	}
	for what, call := range map[string]func() error{
		"Acquire(0 permits)":   func() error { _, err := s.Acquire(ctx, 0, 0); return err },
		"Acquire(lease -1s)":   func() error { _, err := s.Acquire(ctx, 1, -time.Second); return err },
		"TryAcquire(wait -1s)": func() error { _, err := s.TryAcquire(ctx, 1, -time.Second, 0); return err },
		"Acquire(lease 5ms)":   func() error { _, err := s.Acquire(ctx, 1, 5*time.Millisecond); return err },
	} {
		if err := call(); !errors.Is(err, fairlock.ErrInvalidValue) {
			t.Errorf("semaphore %s: %v, want ErrInvalidValue", what, err)
		}
	}
	if st, err := s.State(ctx); err != nil || st.Available != 2 {
		t.Errorf("refused acquisitions changed the pool: %+v %v", st, err)
	}
	// MultiLock: lease 0 is Lock's.
	m1, _ := reentrant.New(c, p+"m1")
	m2, _ := reentrant.New(c, p+"m2")
	ml, err := multi.New(m1, m2)
	if err != nil {
		t.Fatal(err)
	}
	if err := ml.LockWithLease(ctx, -time.Second); !errors.Is(err, fairlock.ErrInvalidValue) {
		t.Errorf("MultiLock.LockWithLease(-1s): %v", err)
	}
	if err := ml.LockWithLease(ctx, 0); err != nil {
		t.Errorf("MultiLock.LockWithLease(0): %v", err)
	} else {
		if left, err := m1.RemainingLease(ctx); err != nil || left < 20*time.Second {
			t.Errorf("MultiLock.LockWithLease(0): member lease %v (%v), want the watchdog's", left, err)
		}
		_ = ml.Unlock(ctx)
	}
}
