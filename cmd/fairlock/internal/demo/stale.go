package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/fence"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// The stale-writer demonstration (cmd/fairlock demo --stale-writer): a
// booker whose goroutine stops while it holds the fair lock, past its lease,
// comes back after another booker took the lock and booked the seat, and
// makes its late write. The seat is written with a fenced write (package
// fence) carrying the lock's token, so the late write is rejected instead of
// replacing the newer booking.
//
// The paused booker holds with an explicit lease: a stopped goroutine does
// not stop the client's watchdog (a whole-process pause, GC or SIGSTOP,
// would), so a watchdog-kept hold would be renewed through the pause.

// StaleConfig is one stale-writer run.
type StaleConfig struct {
	Redis  *redis.Options
	Prefix string        // key namespace; empty: RandomPrefix()
	Lease  time.Duration // the paused booker's lease; 0: 1 s
	Keep   bool          // leave the seat and its fence in Redis
	// Write books seat for who with token; nil: FencedBooking. Tests pass
	// a write that ignores the token to show what the fence prevents.
	Write func(ctx context.Context, rdb *redis.Client, seat, who string, token int64) (fence.Result, error)
	// Mini, when the Redis is an embedded miniredis, is advanced in real
	// time during the run: miniredis expires keys only when told to.
	Mini *miniredis.Miniredis
}

// FencedBooking writes the seat's hash {holder: who, token: token} under
// the fence.
func FencedBooking(ctx context.Context, rdb *redis.Client, seat, who string, token int64) (fence.Result, error) {
	return fence.Write(ctx, rdb, seat, token, fence.HSet("holder", who, "token", strconv.FormatInt(token, 10)))
}

// StaleStep is one booker's pass.
type StaleStep struct {
	Who      string
	Token    int64
	Granted  time.Duration // since the start of the run
	Paused   time.Duration // how long its goroutine was stopped while holding
	LeaseEnd time.Duration // when its lease ran out (Done closed); 0: it did not
	Wrote    time.Duration
	Result   fence.Result
}

// StaleResult is the outcome of a stale-writer run.
type StaleResult struct {
	Seat        string // the seat's key
	Lock        string
	Lease       time.Duration
	Steps       []StaleStep // in the order the writes were made
	FinalHolder string      // the seat's holder at the end
	FinalToken  int64       // the token of the booking the seat keeps
}

// Step returns the step of who.
func (r *StaleResult) Step(who string) (StaleStep, bool) {
	for _, s := range r.Steps {
		if s.Who == who {
			return s, true
		}
	}
	return StaleStep{}, false
}

// RunStale runs the scenario: A takes the lock (token a) with a short lease
// and its goroutine stops; B queues, gets the lock once A's lease ran out
// (token b > a) and books the seat; A resumes and writes the seat with
// token a: rejected, the seat keeps B's booking.
func RunStale(ctx context.Context, c StaleConfig) (*StaleResult, error) {
	if c.Redis == nil {
		return nil, errors.New("demo: no Redis options")
	}
	if c.Prefix == "" {
		c.Prefix = RandomPrefix()
	}
	if c.Lease <= 0 {
		c.Lease = time.Second
	}
	write := c.Write
	if write == nil {
		write = FencedBooking
	}
	if c.Mini != nil {
		defer runClock(c.Mini)()
	}
	name := c.Prefix + "stale"
	res := &StaleResult{Seat: c.Prefix + "seat:12A", Lock: name, Lease: c.Lease}
	rdb := redis.NewClient(c.Redis) // the seat's own connection
	defer rdb.Close()

	flA, rA, a, err := newBooker(c.Redis, name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = flA.Close(); _ = rA.Close() }()
	flB, rB, b, err := newBooker(c.Redis, name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = flB.Close(); _ = rB.Close() }()

	start := time.Now()
	since := func() time.Duration { return time.Since(start) }
	book := func(who string, tok int64) (fence.Result, error) {
		return write(ctx, rdb, res.Seat, who, tok)
	}

	// A takes the lock with a short explicit lease.
	tokA, ok, err := a.TryLockAndGetToken(ctx, 5*time.Second, c.Lease)
	if err != nil || !ok {
		return nil, fmt.Errorf("booker A: lock: ok %v, %v", ok, err)
	}
	stepA := StaleStep{Who: "A", Token: tokA, Granted: since()}
	// A's goroutine stops (it read the seat free and is about to write
	// it); it resumes when B has booked.
	resume := make(chan struct{})
	doneA := make(chan error, 1)
	go func() {
		pausedAt := time.Now()
		<-resume
		stepA.Paused = time.Since(pausedAt)
		stepA.Wrote = since()
		r, err := book("A", tokA) // no check of Done: the write had passed its check before the pause
		stepA.Result = r
		_ = a.Unlock(context.WithoutCancel(ctx)) // ErrNotHeld: its lease ran out
		doneA <- err
	}()
	leaseEnd := make(chan time.Duration, 1)
	go func() {
		<-a.Done()
		leaseEnd <- since()
	}()

	// B queues and gets the lock once A's lease ran out in Redis.
	tokB, ok, err := b.TryLockAndGetToken(ctx, 10*c.Lease+5*time.Second, 0)
	if err != nil || !ok {
		close(resume)
		<-doneA
		return nil, fmt.Errorf("booker B: lock: ok %v, %v", ok, err)
	}
	stepB := StaleStep{Who: "B", Token: tokB, Granted: since()}
	stepB.Wrote = since()
	stepB.Result, err = book("B", tokB)
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	_ = b.Unlock(uctx)
	cancel()
	if err != nil {
		close(resume)
		<-doneA
		return nil, fmt.Errorf("booker B: write: %w", err)
	}
	res.Steps = append(res.Steps, stepB)

	// Now A resumes, past its lease, with B's booking in place.
	<-a.Done()
	close(resume)
	if err := <-doneA; err != nil {
		return nil, fmt.Errorf("booker A: write: %w", err)
	}
	stepA.LeaseEnd = <-leaseEnd
	res.Steps = append(res.Steps, stepA)

	if err := finishStale(ctx, rdb, res, c.Keep); err != nil {
		return nil, err
	}
	return res, nil
}

// runClock moves mini's clock with the real one until the returned stop is
// called.
func runClock(mini *miniredis.Miniredis) (stop func()) {
	done := make(chan struct{})
	go func() {
		const tick = 10 * time.Millisecond
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				mini.FastForward(tick)
			case <-done:
				return
			}
		}
	}()
	return func() { close(done) }
}

// newBooker is one booker: its own connection, client and fair lock handle.
func newBooker(o *redis.Options, name string) (*fairlock.Client, *redis.Client, *fair.Mutex, error) {
	r := redis.NewClient(o)
	fl, err := fairlock.NewClient(r)
	if err != nil {
		_ = r.Close()
		return nil, nil, nil, err
	}
	m, err := fair.New(fl, name)
	if err != nil {
		_ = fl.Close()
		_ = r.Close()
		return nil, nil, nil, err
	}
	return fl, r, m, nil
}

// finishStale reads who the seat ended with and, unless keep, deletes the
// demo's keys.
func finishStale(ctx context.Context, rdb *redis.Client, res *StaleResult, keep bool) error {
	m, err := rdb.HGetAll(ctx, res.Seat).Result()
	if err != nil {
		return err
	}
	res.FinalHolder = m["holder"]
	res.FinalToken, _ = strconv.ParseInt(m["token"], 10, 64)
	if !keep {
		fk, _ := fence.Key(res.Seat)
		// The lock's token counter too: the demo's namespace is its own.
		_ = rdb.Del(context.WithoutCancel(ctx), res.Seat, fk, wire.KeysFor(res.Lock).Token()).Err()
	}
	return nil
}

// ReportStale writes the stale-writer table.
func ReportStale(w io.Writer, r *StaleResult) {
	var b strings.Builder
	fmt.Fprintf(&b, "Stale writer: booker A holds the fair lock %q with a %v lease and its goroutine stops\n", r.Lock, r.Lease)
	fmt.Fprintf(&b, "before it writes seat %s; booker B takes the lock once A's lease ran out and books\n", r.Seat)
	b.WriteString("the seat; then A resumes and writes. Every write is fenced with the lock's token.\n\n")
	fmt.Fprintf(&b, "%-7s %6s %9s %9s %11s %9s   %s\n", "booker", "token", "granted", "paused", "lease ended", "wrote", "fenced write")
	for _, s := range r.Steps {
		lease := "-"
		if s.LeaseEnd > 0 {
			lease = dur(s.LeaseEnd)
		}
		paused := "-"
		if s.Paused > 0 {
			paused = dur(s.Paused)
		}
		outcome := fmt.Sprintf("accepted (fence now %d)", s.Result.Last)
		if !s.Result.Accepted {
			outcome = fmt.Sprintf("REJECTED: token %d < %d already seen", s.Token, s.Result.Last)
		}
		fmt.Fprintf(&b, "%-7s %6d %9s %9s %11s %9s   %s\n", s.Who, s.Token, dur(s.Granted), paused, lease, dur(s.Wrote), outcome)
	}
	b.WriteString("(granted, lease ended, wrote: time since the run started; paused: how long the\n")
	b.WriteString("booker's goroutine was stopped while it held the lock; -: did not happen)\n")
	fmt.Fprintf(&b, "\nseat %s is booked by %s (token %d)\n", r.Seat, r.FinalHolder, r.FinalToken)
	if a, ok := r.Step("A"); ok && !a.Result.Accepted {
		b.WriteString("A's late write was refused by the fence; without it, A would have replaced B's booking.\n")
	}
	io.WriteString(w, b.String())
}
