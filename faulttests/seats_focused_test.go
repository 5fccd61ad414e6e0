package faulttests

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
// How the broken scripts reach the client: package multi has no option to
// inject seats scripts yet (core.WithSeatsScripts is on branch h22-seats2,
// not merged), and this worker may not edit multi or core. So the variant
// is swapped in on the wire: a go-redis hook (seatsSwap), added to the
// broken client after the join hook, rewrites every EVALSHA of a real
// seats script to the variant's SHA, and every EVAL of its source (go-redis
// falls back to EVAL on NOSCRIPT) to the variant's source. The library runs
// unchanged; Redis runs the variant; the join hook, which runs first, sees
// the real script's SHA and arguments. When the option is merged, the hook
// can give way to it.

// seatsBroken are the variants: the file, and the text replaced.
var seatsBroken = map[string]struct{ file, old, new string }{
	"exclusion": {wire.FileSeatsAcquire, "if redis.call('hexists', S_SEAT, s) == 1 or (h and h ~= owner) then",
		"if (h and h ~= owner) then"},
	"order": {wire.FileSeatsAcquire, "if redis.call('hexists', S_SEAT, s) == 1 or (h and h ~= owner) then",
		"if redis.call('hexists', S_SEAT, s) == 1 or (h and h ~= owner and s == seats[1]) then"},
	"liveness": {wire.FileSeatsAcquire, "ipairs(redis.call('zrangebyscore', S_LEASES, '-inf', S_NOW))", "ipairs({})"},
	"dead": {wire.FileSeatsRenew, "redis.call('zadd', leases, now + lease, owner)", "redis.call('zadd', leases, now + 5 * lease, owner)"},
}

// seatsSwap is the hook that makes Redis run a variant of the seats
// scripts for one client: by SHA (EVALSHA) and by source (EVAL).
type seatsSwap struct {
	bySHA map[string]string // real SHA -> variant SHA
	bySrc map[string]string // real source -> variant source
}

func (seatsSwap) DialHook(next redis.DialHook) redis.DialHook { return next }
func (seatsSwap) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (sw seatsSwap) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) > 1 {
			switch cmd.Name() {
			case "evalsha", "evalsha_ro":
				if v, ok := sw.bySHA[fmt.Sprint(args[1])]; ok {
					args[1] = v
				}
			case "eval", "eval_ro":
				if v, ok := sw.bySrc[fmt.Sprint(args[1])]; ok {
					args[1] = v
				}
			}
		}
		return next(ctx, cmd)
	}
}

// seatsVariant is the hook giving a client the broken variant name.
func seatsVariant(t *testing.T, name string) seatsSwap {
	t.Helper()
	v := seatsBroken[name]
	sw := seatsSwap{bySHA: map[string]string{}, bySrc: map[string]string{}}
	src := wire.SeatsSource(v.file)
	if n := strings.Count(src, v.old); n != 1 {
		t.Fatalf("variant %s: %d matches in %s", name, n, v.file)
	}
	broken := strings.Replace(src, v.old, v.new, 1)
	sum := sha1.Sum([]byte(broken))
	real := wire.SeatsDefault().Script(v.file)
	if real.Hash() != hex.EncodeToString(func() []byte { s := sha1.Sum([]byte(src)); return s[:] }()) {
		t.Fatalf("SeatsSource(%s) is not the script the client sends", v.file)
	}
	sw.bySHA[real.Hash()] = hex.EncodeToString(sum[:])
	sw.bySrc[src] = broken
	return sw
}

// seatsClient is a client of e, with the variant's hook when broken.
func seatsClient(t *testing.T, e *Env, broken string) *Client {
	c := e.NewClient()
	if broken != "" {
		c.RDB.AddHook(seatsVariant(t, broken))
	}
	return c
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
