package faulttests

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Script drives a deterministic test: each call is recorded like the
// random workload's, holds are tracked the same way, and Check runs the
// same checkers on the history.
type Script struct {
	e     *Env
	final chan struct{}
	watch sync.WaitGroup
	bg    sync.WaitGroup
	mu    sync.Mutex
	held  map[*Handle]*scriptHold
}

type scriptHold struct {
	tr    *tracker
	count int
}

// Script starts a scripted test on e.
func (e *Env) Script() *Script {
	return &Script{e: e, final: make(chan struct{}), held: map[*Handle]*scriptHold{}}
}

// Go runs f in the background; Check waits for it.
func (s *Script) Go(f func()) {
	s.bg.Add(1)
	go func() { defer s.bg.Done(); f() }()
}

// acquire records an acquisition call with a ctx of timeout.
func (s *Script) acquire(h *Handle, op string, wait bool, lease, timeout time.Duration, f func(ctx context.Context) (bool, error)) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s.mu.Lock()
	sh := s.held[h]
	s.mu.Unlock()
	c := s.e.H.BeginCall(Call{Client: h.Client.ID, Owner: h.L.Owner(), Lock: h.Lock, Op: op, Wait: wait, Reentry: sh != nil, Lease: lease, Start: s.e.H.Now(), CtxEnd: timeout})
	ok, err := f(ctx)
	str, closed := errText(err)
	got := ok && err == nil
	s.e.H.EndCall(c, got, str, closed)
	if got {
		s.mu.Lock()
		if sh == nil {
			sh = &scriptHold{tr: s.e.track(h, c, lease, s.final, &s.watch)}
			s.held[h] = sh
		}
		sh.count++
		s.mu.Unlock()
	}
	return got, err
}

// Lock is h.L.Lock with a ctx of timeout, recorded.
func (s *Script) Lock(h *Handle, timeout time.Duration) error {
	_, err := s.acquire(h, "Lock", true, 0, timeout, func(ctx context.Context) (bool, error) { return true, h.L.Lock(ctx) })
	return err
}

// LockWithLease is h.L.LockWithLease, recorded.
func (s *Script) LockWithLease(h *Handle, lease, timeout time.Duration) error {
	_, err := s.acquire(h, "LockWithLease", true, lease, timeout, func(ctx context.Context) (bool, error) { return true, h.L.LockWithLease(ctx, lease) })
	return err
}

// TryLockFor is h.L.TryLockFor, recorded.
func (s *Script) TryLockFor(h *Handle, wait, lease, timeout time.Duration) (bool, error) {
	return s.acquire(h, "TryLockFor", true, lease, timeout, func(ctx context.Context) (bool, error) { return h.L.TryLockFor(ctx, wait, lease) })
}

// Unlock is h.L.Unlock with a ctx of timeout, recorded; the last one ends
// the hold's window.
func (s *Script) Unlock(h *Handle, timeout time.Duration) error {
	s.mu.Lock()
	sh := s.held[h]
	if sh != nil {
		sh.count--
		if sh.count == 0 {
			sh.tr.unlocking()
			delete(s.held, h)
		}
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c := s.e.H.BeginCall(Call{Client: h.Client.ID, Owner: h.L.Owner(), Lock: h.Lock, Op: "Unlock", Start: s.e.H.Now(), CtxEnd: timeout})
	err := h.L.Unlock(ctx)
	str, closed := errText(err)
	s.e.H.EndCall(c, false, str, closed)
	return err
}

// Forget drops the script's count of h's holds (its client died or was
// closed: the hold is not unlocked; its window ends when Done closes).
func (s *Script) Forget(h *Handle) {
	s.mu.Lock()
	delete(s.held, h)
	s.mu.Unlock()
}

// WaitDone waits up to d for h's Done to close and reports whether it did.
func (s *Script) WaitDone(h *Handle, d time.Duration) bool {
	select {
	case <-h.L.Done():
		return true
	case <-time.After(d):
		return false
	}
}

// Check waits for the background steps, closes every client (checking
// Close), checks for leftovers, and runs the checkers; it fails t on a
// violation and returns them.
func (s *Script) Check(t *testing.T) []Violation {
	t.Helper()
	s.bg.Wait()
	for _, c := range s.e.Clients() {
		if !c.closed.Load() {
			c.Close()
		}
	}
	time.Sleep(DoneTolerance)
	close(s.final)
	s.watch.Wait()
	s.e.probes.Wait()
	for _, v := range s.e.CheckLeftovers() {
		s.e.H.Problem(v)
	}
	return Report(t, s.e.H, "deterministic: go test ./faulttests/ -run '^"+t.Name()+"$' -v")
}
