package faulttests

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Scripted multi-seat scenarios, each run with the real scripts (the
// checks must pass) and with a broken variant of the seats scripts (the
// check it targets must catch it, through the same recording, join hook
// and checkers as the random runs):
//
//	exclusion: seats_acquire.lua ignores a seat's holder (a set is granted
//	           over a held seat)
//	order:     seats_acquire.lua grants a request that heads only the queue
//	           of its first seat (propertytests' "grants when heading only
//	           some of its queues")
//	liveness:  seats_acquire.lua does not reclaim ended leases
//	           (propertytests' "an ended lease is not reclaimed": a seat
//	           whose holder let its lease run out stays taken)
//	dead:      seats_renew.lua renews for five leases (a holder that dies
//	           keeps its seats far past its lease)
//
// The broken scripts reach the client through core.WithSeatsScripts (as
// the fair semaphore's through core.WithSemFairScripts); the join hook
// learns the variant's acquisition script (Env.seatsSHA).

// seatsBroken are the variants: the file, and the text replaced.
var seatsBroken = map[string]struct{ file, old, new string }{
	"exclusion": {wire.FileSeatsAcquire, "if seat_holder(s) or (h and h ~= owner) then",
		"if (h and h ~= owner) then"},
	"order": {wire.FileSeatsAcquire, "if seat_holder(s) or (h and h ~= owner) then",
		"if seat_holder(s) or (h and h ~= owner and s == seats[1]) then"},
	"liveness": {wire.FileSeatsAcquire, "    for _, o in ipairs(ended) do\n        give_back(o)\n",
		"    for _, o in ipairs({}) do\n        give_back(o)\n"},
	"dead": {wire.FileSeatsRenew, "redis.call('zadd', leases, now + lease, owner)", "redis.call('zadd', leases, now + 5 * lease, owner)"},
}

// seatsScripts is the option giving a client the broken variant name of
// the seats scripts; the join hook learns its acquisition script.
func (e *Env) seatsScripts(t *testing.T, name string) fairlock.Option {
	t.Helper()
	v := seatsBroken[name]
	applied := 0
	set := wire.EditSeats(func(f, src string) string {
		if f != v.file {
			return src
		}
		if n := strings.Count(src, v.old); n != 1 {
			t.Fatalf("variant %s: %d matches in %s", name, n, f)
		}
		applied++
		return strings.Replace(src, v.old, v.new, 1)
	})
	if applied != 1 {
		t.Fatalf("variant %s does not apply", name)
	}
	e.mu.Lock()
	e.seatsSHA[set.Script(wire.FileSeatsAcquire).Hash()] = true
	e.mu.Unlock()
	return core.WithSeatsScripts(set)
}

// seatsClient is a client of e, with the variant's hook when broken.
func seatsClient(t *testing.T, e *Env, broken string) *Client {
	if broken == "" {
		return e.NewClient()
	}
	return e.NewClient(e.seatsScripts(t, broken))
}

// SeatsAcquire is a recorded seats acquisition by h of seats (numbers of
// the venue, "1".."6") with a ctx of timeout: Acquire when wait < 0.
func (s *Script) SeatsAcquire(h *Handle, wait, lease, timeout time.Duration, seats ...string) *seatsAttempt {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	names := make([]string, len(seats))
	for i, n := range seats {
		names[i] = h.Lock2Seat(n)
	}
	return s.e.seatsAcquire(ctx, h, names, wait, lease, timeout, s.final, &s.watch)
}

// Lock2Seat is the name of seat n ("1".."6") of h's venue.
func (h *Handle) Lock2Seat(n string) string { return "{" + h.Lock + "}:" + n }

// SeatsRelease releases a's seats, recorded.
func (s *Script) SeatsRelease(a *seatsAttempt, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.e.seatsRelease(ctx, a, timeout)
}

// seatsJoined waits until an acquisition of c on venue has joined.
func seatsJoined(t *testing.T, e *Env, c *Client, venue string) {
	t.Helper()
	semJoined(t, e, c, venue)
}

// seatsScenarios are the scenarios; each returns the run's violations.
var seatsScenarios = map[string]func(t *testing.T, e *Env, broken string) []Violation{
	// a holds {1,2}; b's one-shot try for {2,3} must find seat 2 held
	"exclusion": func(t *testing.T, e *Env, broken string) []Violation {
		s := e.Script()
		ha := seatsClient(t, e, broken).Handle("V", SeatsVenue)
		hb := seatsClient(t, e, broken).Handle("V", SeatsVenue)
		a := s.SeatsAcquire(ha, -1, 0, 5*time.Second, "1", "2")
		if a == nil {
			t.Fatal("a was not granted {1,2}")
		}
		b := s.SeatsAcquire(hb, 0, 0, 5*time.Second, "2", "3")
		time.Sleep(300 * time.Millisecond)
		if b != nil {
			_ = s.SeatsRelease(b, 5*time.Second)
		}
		_ = s.SeatsRelease(a, 5*time.Second)
		return s.finish()
	},
	// p holds {1}, q holds {2}; x asks for {1,3} and queues (seat 1
	// held); then w asks for {2,3} and queues behind x on seat 3. q
	// releases: w must still wait for x (queue 3). Then p releases: x is
	// granted, then w.
	"order": func(t *testing.T, e *Env, broken string) []Violation {
		s := e.Script()
		var hs []*Handle
		for range 4 {
			hs = append(hs, seatsClient(t, e, broken).Handle("V", SeatsVenue))
		}
		hp, hq, hx, hw := hs[0], hs[1], hs[2], hs[3]
		venue := hp.Lock
		p := s.SeatsAcquire(hp, -1, 0, 5*time.Second, "1")
		q := s.SeatsAcquire(hq, -1, 0, 5*time.Second, "2")
		if p == nil || q == nil {
			t.Fatal("p or q not granted")
		}
		var mu sync.Mutex
		var got []*seatsAttempt
		s.Go(func() {
			if x := s.SeatsAcquire(hx, -1, 0, 20*time.Second, "1", "3"); x != nil {
				mu.Lock()
				got = append(got, x)
				mu.Unlock()
				time.Sleep(200 * time.Millisecond)
				_ = s.SeatsRelease(x, 5*time.Second)
			}
		})
		seatsJoined(t, e, hx.Client, venue)
		s.Go(func() {
			if w := s.SeatsAcquire(hw, -1, 0, 20*time.Second, "2", "3"); w != nil {
				mu.Lock()
				got = append(got, w)
				mu.Unlock()
				time.Sleep(200 * time.Millisecond)
				_ = s.SeatsRelease(w, 5*time.Second)
			}
		})
		seatsJoined(t, e, hw.Client, venue)
		_ = s.SeatsRelease(q, 5*time.Second)
		// w polls within one grace (a head that is not ready): the broken
		// script grants it then, before x
		time.Sleep(HeadGrace + time.Second)
		_ = s.SeatsRelease(p, 5*time.Second)
		return s.finish()
	},
	// a holds {1,2} with a 2 s lease and its client dies (so that nothing
	// of a's client gives the seats back: only a script that reclaims the
	// ended lease does); w asks for {2,3} meanwhile and must be granted
	// within the bound (one faulty other client) of the lease's end
	"liveness": func(t *testing.T, e *Env, broken string) []Violation {
		s := e.Script()
		ha := seatsClient(t, e, broken).Handle("V", SeatsVenue)
		hw := seatsClient(t, e, broken).Handle("V", SeatsVenue)
		a := s.SeatsAcquire(ha, -1, 2*time.Second, 5*time.Second, "1", "2")
		if a == nil {
			t.Fatal("a was not granted {1,2}")
		}
		e.Kill(ha.Client)
		timeout := seatsLiveBound(1, nil) + 6*time.Second
		if w := s.SeatsAcquire(hw, -1, 0, timeout, "3", "2"); w != nil {
			_ = s.SeatsRelease(w, 5*time.Second)
		}
		return s.finish()
	},
	// a client holds {1,2} with the watchdog and dies: its seats must be
	// back within its lease of the death (the probe a lease later)
	"dead": func(t *testing.T, e *Env, broken string) []Violation {
		s := e.Script()
		ha := seatsClient(t, e, broken).Handle("V", SeatsVenue)
		a := s.SeatsAcquire(ha, -1, 0, 5*time.Second, "1", "2")
		if a == nil {
			t.Fatal("a was not granted {1,2}")
		}
		time.Sleep(2 * WatchdogLease / 3) // a renewal or two
		e.Kill(ha.Client)
		vs := s.finish()
		if n := len(e.H.Probes); n != 1 || e.H.Probes[0].Err != "" {
			t.Errorf("want one probe of the dead holder's lease, got %v", e.H.Probes)
		}
		return vs
	},
}

// TestSeatsScenarios runs every seats scenario with the real scripts (no
// violation) and with its broken variant (caught by its check).
func TestSeatsScenarios(t *testing.T) {
	redistest.Long(t)
	t.Parallel()
	want := map[string]string{"exclusion": "exclusion", "order": "seats-order", "liveness": "seats-liveness", "dead": "seats-dead-holder"}
	var wg sync.WaitGroup
	for name, f := range seatsScenarios {
		for _, broken := range []bool{false, true} {
			label := name + "/real"
			if broken {
				label = name + "/broken"
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				t.Run(label, func(t *testing.T) {
					e := NewSingle(t)
					variant := ""
					if broken {
						variant = name
					}
					vs := f(t, e, variant)
					found := 0
					for _, v := range vs {
						if v.Check == want[name] {
							found++
						}
					}
					switch {
					case !broken && len(vs) > 0:
						Report(t, e.H, "go test ./faulttests/ -run 'TestSeatsScenarios/"+label+"' -v")
					case broken && found == 0:
						t.Errorf("the broken variant %q was not caught by %s: %v\n%s", name, want[name], vs, e.H.Timeline("", 0, Never, 80))
					case broken:
						t.Logf("caught (%d %s violations): %s", found, want[name], vs[0])
					}
				})
			}()
		}
	}
	wg.Wait()
}
