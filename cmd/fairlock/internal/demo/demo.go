// Package demo is the seat-booking demonstration of cmd/fairlock: several
// clients, each with several goroutines, book numbered seats under one lock,
// and the run records in which order the bookings arrived at the lock and in
// which order the lock was granted, first with the fair lock and then with
// the reentrant (unfair) lock.
//
// How arrival is measured. A booking arrives when its first lock attempt has
// run in Redis: for the fair lock that script call is what puts the owner in
// the queue, for the reentrant lock it is the first failed (or successful)
// try. A go-redis hook on each client sees that call return. Arrivals are
// taken one at a time (a process-wide gate is held from the moment a booking
// takes its arrival number until its first attempt has returned), so the
// arrival numbers are exactly the order of those scripts in Redis, not an
// estimate from client-side clocks. For the fair lock the demo also reads the
// queue after each queued arrival (the Redisson engine's list with LRANGE, the
// scalable engine's hash walked from its head by a script of the demo's own),
// while still holding the gate, and checks that the queue lists waiters in
// arrival order with the newcomer last.
//
// Grant order is the order of the Lock calls' returns, numbered inside the
// critical section: grants are mutually exclusive, so that numbering is
// exact.
//
// The multi-seat mode (Config.Multi) books blocks of 1..Multi adjacent
// seats of a row, all or none, with the fair multi-seat hold
// (multi.NewSeats), with a MultiLock of per-seat reentrant locks
// (multi.New, canonical order) and, naively, with per-seat locks taken in
// the buyer's order; grants are numbered inside the critical section, which
// orders exactly any two grants naming a common seat (multiseat.go).
package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Lock kinds.
const (
	Fair      = "fair"
	Reentrant = "reentrant"
)

// Config is one demonstration.
type Config struct {
	Clients    int           // fairlock.Client instances, each with its own go-redis client
	Goroutines int           // goroutines per client, each with its own lock handle
	Seats      int           // seats to book
	Hold       time.Duration // mean time the lock is held per booking (uniform in [hold/2, 3hold/2])
	Kinds      []string      // lock kinds to run, in order
	// Engine is the fair lock's engine (kind Fair): fair.Redisson (the
	// default, Redisson's keys) or fair.Scalable.
	Engine fair.Engine
	Seed   uint64 // seed of the hold-time jitter
	// Redis are the options of every go-redis client the demo makes.
	Redis *redis.Options
	// Prefix namespaces every key; empty: a random "fairlock-demo:<hex>:".
	Prefix string
	// Keep leaves the bookings hash ("<prefix><kind>:bookings", seat ->
	// who) and the seat counter in Redis instead of deleting them.
	Keep bool
	// Options configure every fairlock.Client of the run.
	Options []fairlock.Option
	// Scripts are the lock scripts the clients run; nil: wire.Default().
	// Tests pass deliberately broken sets to show that the demo's checks
	// catch a lock that is not fair.
	Scripts *wire.Scripts
	// SemFairScripts are the fair semaphore's scripts (--permits); nil:
	// wire.SemFairDefault(). For tests, as Scripts.
	SemFairScripts *wire.SemFairScripts
	// Progress receives a line per kind every ProgressEvery (default
	// 250ms) and at the end; nil: none.
	Progress      io.Writer
	ProgressEvery time.Duration
	// Permits > 0 runs the semaphore mode: N booking windows, each booking
	// holds one permit of a pool of Permits (kinds FairSemaphore and
	// Semaphore). Seats are then numbered atomically (INCR): the semaphore
	// admits, it does not exclude.
	Permits int
	// Multi > 0 runs the multi-seat mode: each booking wants 1..Multi
	// adjacent seats of a row (rows of RowWidth seats) and holds them all
	// or none (kinds SeatsHold, MultiLock and Naive).
	Multi int
	// GiveUp bounds each acquisition of the multi-seat mode (0:
	// DefaultGiveUp): an acquisition still waiting then is given up,
	// counted in Result.Timeouts, and the buyer books again (a new
	// arrival). It is what ends a naive booking's deadlock.
	GiveUp time.Duration
	// allowBroken lets tests run the broken variants of the multi-seat
	// mode.
	allowBroken bool
}

// Validate reports sizes or kinds the demo cannot run with.
func (c *Config) Validate() error {
	switch {
	case c.Clients < 1 || c.Clients > 1000:
		return fmt.Errorf("--clients %d: must be 1..1000", c.Clients)
	case c.Goroutines < 1 || c.Goroutines > 1000:
		return fmt.Errorf("--goroutines %d: must be 1..1000", c.Goroutines)
	case c.Seats < 1 || c.Seats > 1_000_000:
		return fmt.Errorf("--seats %d: must be 1..1000000", c.Seats)
	case c.Hold < 0 || c.Hold > time.Minute:
		return fmt.Errorf("--hold %v: must be 0..1m", c.Hold)
	case len(c.Kinds) == 0:
		return errors.New("no lock kind")
	case c.Permits < 0 || c.Permits > 1000:
		return fmt.Errorf("--permits %d: must be 0..1000", c.Permits)
	case c.Multi < 0 || c.Multi > RowWidth:
		return fmt.Errorf("--multi %d: must be 0..%d (a row has %d seats)", c.Multi, RowWidth, RowWidth)
	case c.Multi > 0 && c.Permits > 0:
		return errors.New("--multi and --permits: choose one")
	case c.GiveUp < 0:
		return fmt.Errorf("--give-up %v: must be positive", c.GiveUp)
	case c.Engine != fair.Redisson && c.Engine != fair.Scalable:
		return fmt.Errorf("engine %d: must be fair.Redisson or fair.Scalable", c.Engine)
	case c.Engine != fair.Redisson && !slices.Contains(c.Kinds, Fair):
		return errors.New("--engine: the fair lock's engine, without the fair lock (--lock fair or both, no --permits or --multi)")
	}
	for _, k := range c.Kinds {
		switch {
		case c.Multi > 0 && (k == brokenOneLock || k == brokenPolling) && !c.allowBroken:
			return fmt.Errorf("kind %q: for tests only", k)
		case c.Multi > 0 && !isMulti(k):
			return fmt.Errorf("kind %q with --multi: must be %s, %s or %s", k, SeatsHold, MultiLock, Naive)
		case c.Multi > 0:
			// a kind of the multi-seat mode
		case c.Permits == 0 && k != Fair && k != Reentrant:
			return fmt.Errorf("lock kind %q: must be fair or reentrant", k)
		case c.Permits > 0 && !isSemaphore(k):
			return fmt.Errorf("kind %q with --permits: must be %s or %s", k, FairSemaphore, Semaphore)
		}
	}
	return nil
}

// Booking is one pass through the lock: one grant.
type Booking struct {
	Grant   int           // 1-based grant order
	Arrival int           // 1-based arrival order
	Who     string        // "c<client>g<goroutine>", both 1-based
	Owner   string        // the lock owner id
	Seat    int           // the seat booked, 0 when none was left
	Wait    time.Duration // from just before Lock to its return
	Token   int64         // semaphore mode: the permit's fencing token (grant order)
	Seats   []int         // multi-seat mode: the seats named, sorted
	Lost    bool          // multi-seat mode: a seat was sold since the buyer chose it; nothing booked
}

// Result is one run of one lock kind.
type Result struct {
	Kind     string
	Lock     string    // the lock's name
	Bookings []Booking // in grant order
	Booked   int       // seats booked
	// DoubleBookings counts seats that the bookings hash already had when
	// a holder wrote them (HSETNX failed): 0 when the lock excludes.
	DoubleBookings int
	// QueueChecks counts queued arrivals whose queue was read (fair lock
	// only); QueueMismatches those whose queue was not in arrival order
	// with the newcomer last.
	QueueChecks, QueueMismatches int
	Elapsed                      time.Duration
	// Leftover are the lock's keys still present after the run (they
	// should all be gone once every booking released the lock).
	Leftover []string
	// Contenders is Clients*Goroutines; PerContender the seats each booked.
	Contenders   int
	PerContender []int
	// Permits is the pool of a semaphore run (0: a lock run), MaxHeld the
	// most permits its holders held at once (counted in this process:
	// after a grant returned, before its release was sent).
	Permits, MaxHeld int
	// Multi is the most seats per booking of a multi-seat run (0: not
	// one); Done its bookings made, Timeouts its acquisitions given up
	// (GiveUp).
	Multi, Done, Timeouts int
	// Unseen counts multi-seat acquisitions whose first lock script the
	// arrival hook did not see (an acquisition that failed before it
	// reached Redis); their arrival was numbered when the gate was taken.
	Unseen int
}

// Inversions counts pairs of grants made in the opposite order of their
// arrivals, out of all pairs.
func (r *Result) Inversions() (inverted, pairs int64) {
	a := make([]int, len(r.Bookings))
	for i, b := range r.Bookings {
		a[i] = b.Arrival
	}
	n := int64(len(a))
	return countInversions(a), n * (n - 1) / 2
}

// OutOfTurn counts grants made while an earlier arrival was still waiting.
func (r *Result) OutOfTurn() int {
	a := make([]int, len(r.Bookings))
	for i, b := range r.Bookings {
		a[i] = b.Arrival
	}
	n := 0
	for _, late := range outOfTurn(a) {
		if late {
			n++
		}
	}
	return n
}

// outOfTurn tells, for each grant (arrivals in grant order, numbered from
// 1), whether it was made while an earlier arrival was still waiting.
func outOfTurn(arrivals []int) []bool {
	out := make([]bool, len(arrivals))
	granted := make([]bool, len(arrivals)+2)
	next := 1 // the earliest arrival not yet granted
	for i, a := range arrivals {
		if a < len(granted) {
			granted[a] = true
		}
		out[i] = a != next
		for next < len(granted) && granted[next] {
			next++
		}
	}
	return out
}

// WaitPercentile is the p-th percentile (0 < p <= 100) of the waits.
func (r *Result) WaitPercentile(p float64) time.Duration {
	if len(r.Bookings) == 0 {
		return 0
	}
	w := make([]time.Duration, len(r.Bookings))
	for i, b := range r.Bookings {
		w[i] = b.Wait
	}
	sort.Slice(w, func(i, j int) bool { return w[i] < w[j] })
	i := int(float64(len(w))*p/100+0.999999) - 1
	return w[min(max(i, 0), len(w)-1)]
}

// countInversions counts pairs i < j with a[i] > a[j], by merge sort.
func countInversions(a []int) int64 {
	if len(a) < 2 {
		return 0
	}
	mid := len(a) / 2
	l := append([]int(nil), a[:mid]...)
	r := append([]int(nil), a[mid:]...)
	n := countInversions(l) + countInversions(r)
	i, j, k := 0, 0, 0
	for i < len(l) && j < len(r) {
		if l[i] <= r[j] {
			a[k] = l[i]
			i++
		} else {
			a[k] = r[j]
			n += int64(len(l) - i)
			j++
		}
		k++
	}
	k += copy(a[k:], l[i:])
	copy(a[k:], r[j:])
	return n
}

// BookingsKey is the hash of one run's bookings, seat number -> who.
func BookingsKey(prefix, kind string) string { return prefix + kind + ":bookings" }

// RandomPrefix returns a fresh "fairlock-demo:<hex>:" namespace.
func RandomPrefix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "fairlock-demo:" + hex.EncodeToString(b[:]) + ":"
}

// Run runs each kind of c.Kinds in turn. When ctx ends it stops: waits are
// cancelled, held locks released, the clients closed; it returns the results
// so far and an error matching ctx.Err().
func Run(ctx context.Context, c Config) ([]*Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Redis == nil {
		return nil, errors.New("demo: no Redis options")
	}
	if c.Prefix == "" {
		c.Prefix = RandomPrefix()
	}
	if c.ProgressEvery <= 0 {
		c.ProgressEvery = 250 * time.Millisecond
	}
	var out []*Result
	for _, kind := range c.Kinds {
		run := runKind
		if c.Multi > 0 {
			run = runMulti
		}
		r, err := run(ctx, c, kind)
		if r != nil {
			out = append(out, r)
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}
