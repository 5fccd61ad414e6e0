package faulttests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/semaphore"
)

// Scripted semaphore scenarios, each run with the real scripts (the
// checks must pass) and with a broken variant of the fair semaphore's
// scripts (the check it targets must catch it, through the same recording,
// hook and checkers as the random runs):
//
//	(a) capacity: res_free lets one permit more than the pool be taken
//	(b) order:    sem_fair_acquire.lua lets a request that fits pass a
//	              queued head that does not (the queue ignored)
//	(c) liveness: res_free grants only when nobody holds (a waiter whose
//	              ask fits waits for every holder to leave)
//	(d) dead:     sem_fair_renew.lua renews for five leases (a holder that
//	              dies keeps its permits far past its lease)

// semBroken are the broken variants: file ("" for every script whose
// source has it), and the text replaced.
var semBroken = map[string]struct{ file, old, new string }{
	"capacity": {"", "return POOL ~= nil and n ~= nil and n <= POOL - USED", "return POOL ~= nil and n ~= nil and n <= POOL - USED + 1"},
	"order":    {wire.FileSemFairAcquire, "        if head and head ~= owner then\n            return false, false", "        if head and head ~= owner and res_free(head) then\n            return false, false"},
	"liveness": {"", "return POOL ~= nil and n ~= nil and n <= POOL - USED", "return POOL ~= nil and n ~= nil and USED == 0 and n <= POOL"},
	"dead":     {wire.FileSemFairRenew, "redis.call('zadd', leases, now + lease, owner)", "redis.call('zadd', leases, now + 5 * lease, owner)"},
}

// semScripts is the option that gives a client the broken variant name of
// the fair semaphore's scripts; the join hook learns its acquisition
// script.
func (e *Env) semScripts(t *testing.T, name string) fairlock.Option {
	t.Helper()
	v := semBroken[name]
	applied := 0
	set := wire.EditSemFair(func(f, src string) string {
		if v.file != "" && f != v.file {
			return src
		}
		if n := strings.Count(src, v.old); n > 1 {
			t.Fatalf("variant %s: %d matches in %s", name, n, f)
		} else if n == 1 {
			applied++
		}
		return strings.Replace(src, v.old, v.new, 1)
	})
	if applied == 0 {
		t.Fatalf("variant %s does not apply", name)
	}
	e.mu.Lock()
	e.semSHA[set.Script(wire.FileSemFairAcquire).Hash()] = true
	e.mu.Unlock()
	return core.WithSemFairScripts(set)
}

// SemAcquire is a recorded acquisition of n permits of h with a ctx of
// timeout: Acquire when wait < 0, else TryAcquire with wait. A grant's
// window is tracked until SemRelease.
func (s *Script) SemAcquire(h *Handle, n int, wait, lease, timeout time.Duration) *semAttempt {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	op, queues := "Acquire", true
	f := func(ctx context.Context) (*semaphore.Permit, error) { return h.Sem.Acquire(ctx, n, lease) }
	if wait >= 0 {
		op, queues = "TryAcquire[wait "+wait.String()+"]", wait > 0
		f = func(ctx context.Context) (*semaphore.Permit, error) { return h.Sem.TryAcquire(ctx, n, wait, lease) }
	}
	a := s.e.semAcquire(ctx, h, op, queues, n, lease, timeout, f)
	if a != nil {
		v := a.held()
		a.tr = s.e.trackHeld(h, v, a.call, lease, Window{Permits: n, Token: v.p.Token()}, s.final, &s.watch)
	}
	return a
}

// SemRelease releases a's permits, recorded (its window ends now).
func (s *Script) SemRelease(a *semAttempt, timeout time.Duration) error {
	a.tr.unlocking()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	v := a.held()
	c := s.e.H.BeginCall(Call{Client: a.h.Client.ID, Owner: v.owner, Lock: a.h.Lock, Op: "Release", Start: s.e.H.Now(), CtxEnd: timeout})
	err := v.release(ctx)
	str, closed := errText(err)
	s.e.H.EndCall(c, false, str, closed)
	a.h.Client.forget(a)
	return err
}

// finish is Script.Check without the report: the violations.
func (s *Script) finish() []Violation {
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
	return Check(s.e.H)
}

// semJoined waits until an acquisition of c on lock has joined the queue.
func semJoined(t *testing.T, e *Env, c *Client, lock string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		found := false
		e.H.Update(func() {
			for _, j := range e.H.Joins {
				if j.Lock == lock && strings.HasPrefix(j.Owner, c.C.ID()+":") {
					found = true
				}
			}
		})
		if found {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("c%d never joined the queue of %s", c.ID, lock)
}

// semScenarios are the scenarios; each returns the run's violations.
var semScenarios = map[string]func(t *testing.T, e *Env, opt []fairlock.Option) []Violation{
	// pool 2: a holds 2; b's one-shot try for 1 must find nothing free
	"capacity": func(t *testing.T, e *Env, opt []fairlock.Option) []Violation {
		e.SemPool("S", SemFair, 2)
		s := e.Script()
		ha, hb := e.NewClient(opt...).Handle("S", SemFair), e.NewClient(opt...).Handle("S", SemFair)
		a := s.SemAcquire(ha, 2, -1, 0, 5*time.Second)
		if a == nil {
			t.Fatal("a was not granted the pool")
		}
		b := s.SemAcquire(hb, 1, 0, 0, 5*time.Second)
		time.Sleep(200 * time.Millisecond)
		if b != nil {
			_ = s.SemRelease(b, 5*time.Second)
		}
		_ = s.SemRelease(a, 5*time.Second)
		return s.finish()
	},
	// pool 2: a1 and a2 hold 1 each; b (2 permits) queues, then c (1);
	// a1 leaves: b, the head, does not fit and blocks c; a2 leaves: b,
	// then c. (Since issue 33, c is not woken to make an attempt when a1
	// leaves but sent its reply: it next tries within a head grace, so a2
	// stays longer than that, and a broken acquisition lets c pass b.)
	"order": func(t *testing.T, e *Env, opt []fairlock.Option) []Violation {
		e.SemPool("S", SemFair, 2)
		s := e.Script()
		var hs []*Handle
		for range 4 {
			hs = append(hs, e.NewClient(opt...).Handle("S", SemFair))
		}
		a1, a2 := s.SemAcquire(hs[0], 1, -1, 0, 5*time.Second), s.SemAcquire(hs[1], 1, -1, 0, 5*time.Second)
		if a1 == nil || a2 == nil {
			t.Fatal("a1 and a2 were not granted")
		}
		for i, n := range []int{2, 1} {
			h := hs[2+i]
			s.Go(func() {
				if x := s.SemAcquire(h, n, -1, 0, 20*time.Second); x != nil {
					time.Sleep(300 * time.Millisecond)
					_ = s.SemRelease(x, 5*time.Second)
				}
			})
			semJoined(t, e, h.Client, h.Lock)
		}
		time.Sleep(200 * time.Millisecond)
		_ = s.SemRelease(a1, 5*time.Second)
		time.Sleep(HeadGrace + time.Second)
		_ = s.SemRelease(a2, 5*time.Second)
		return s.finish()
	},
	// pool 2: a holds 1 for longer than the liveness bound; b asks for 1,
	// which fits at once
	"liveness": func(t *testing.T, e *Env, opt []fairlock.Option) []Violation {
		e.SemPool("S", SemFair, 2)
		s := e.Script()
		ha, hb := e.NewClient(opt...).Handle("S", SemFair), e.NewClient(opt...).Handle("S", SemFair)
		a := s.SemAcquire(ha, 1, -1, 0, 5*time.Second)
		if a == nil {
			t.Fatal("a was not granted")
		}
		hold := semLiveBound(0, nil) + 3*time.Second
		s.Go(func() {
			if b := s.SemAcquire(hb, 1, -1, 0, hold+10*time.Second); b != nil {
				_ = s.SemRelease(b, 5*time.Second)
			}
		})
		time.Sleep(hold)
		_ = s.SemRelease(a, 5*time.Second)
		return s.finish()
	},
	// a holds 2 of a fair pool of 2 (watchdog) and 1 of an expirable pool
	// of 1 (explicit lease); it dies; b waits for both: a's permits come
	// back within their leases on the server's clock (the probes), and b
	// is granted
	"dead": func(t *testing.T, e *Env, opt []fairlock.Option) []Violation {
		e.SemPool("S", SemFair, 2)
		e.SemPool("X", SemExpirable, 1)
		s := e.Script()
		ca, cb := e.NewClient(opt...), e.NewClient(opt...)
		fa, xa := s.SemAcquire(ca.Handle("S", SemFair), 2, -1, 0, 5*time.Second), s.SemAcquire(ca.Handle("X", SemExpirable), 1, -1, ExplicitLeaseMin, 5*time.Second)
		if fa == nil || xa == nil {
			t.Fatal("a was not granted")
		}
		for _, h := range []*Handle{cb.Handle("S", SemFair), cb.Handle("X", SemExpirable)} {
			s.Go(func() {
				if b := s.SemAcquire(h, h.Pool, -1, 0, 30*time.Second); b != nil {
					_ = s.SemRelease(b, 5*time.Second)
				}
			})
		}
		time.Sleep(1500 * time.Millisecond) // a few renewals
		e.Kill(ca)
		vs := s.finish()
		if n := len(e.H.Probes); n != 2 {
			t.Errorf("%d dead holds probed, want 2: %v", n, e.H.Probes)
		}
		for _, p := range e.H.Probes {
			if p.Err != "" {
				t.Errorf("a probe failed: %s", p)
			}
		}
		return vs
	},
}

func TestSemScenarios(t *testing.T) {
	redistest.Long(t)
	t.Parallel()
	check := map[string]string{"capacity": "sem-capacity", "order": "sem-order", "liveness": "sem-liveness", "dead": "sem-dead-holder"}
	for name, run := range semScenarios {
		for _, broken := range []bool{false, true} {
			sub := name + "/good"
			if broken {
				sub = name + "/broken"
			}
			t.Run(sub, func(t *testing.T) {
				t.Parallel()
				e := NewSingle(t)
				var opt []fairlock.Option
				if broken {
					opt = append(opt, e.semScripts(t, name))
				}
				vs := run(t, e, opt)
				if !broken {
					if len(vs) > 0 {
						Report(t, e.H, "go test ./faulttests/ -run '^TestSemScenarios$/^"+sub+"$' -v")
					}
					return
				}
				got := 0
				for _, v := range vs {
					if v.Check == check[name] {
						got++
						t.Logf("caught: %s", v)
					}
				}
				if got == 0 {
					t.Errorf("the broken variant %q was not caught by %s; violations: %v\n%s", name, check[name], vs, e.H.Timeline("", 0, Never, 80))
				}
			})
		}
	}
}
