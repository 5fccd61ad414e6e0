// Package runner is the benchmark runner behind cmd/lockbench: it measures
// this project's locks side by side with redsync, bsm/redislock and
// rueidislock, and the physical floor of a single Redis, in one process.
// Machine drift should hit every library alike: the uncontended cycles run
// in chunks of 50 per library, round-robin within each round, after a
// warm-up; the contention scenario runs in turns of every library, with the
// handoff chain floor measured between the turns; the other scenarios run
// every library once per round. Every go-redis client has default options
// and every call the context a user would pass (issue 23:
// context.Background() for an uncontended cycle, a cancellable context for
// a wait); scenarios 1 and 2 also run each library as the runner did before
// (ContextTimeoutEnabled, contexts that cannot end), and scenario 1 with a
// cancellable context, as extra rows. The semaphore scenario (issue 21) compares
// the fair semaphore with the fair lock's engines on clients with default
// go-redis options (semaphore.go); the seats scenario (issue 22) compares
// a fair 4-seat hold with one fair lock's cycle the same way (seats.go).
package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/redistest"
)

// Scenario names, for Config.Only.
const (
	ScFloor       = "floor"       // the physical floor: EVALSHA round trips, PUBLISH delivery
	ScUncontended = "uncontended" // scenario 1
	ScContention  = "contention"  // scenario 2
	ScFairness    = "fairness"    // scenario 3
	ScDrain       = "drain"       // scenario 4: fair-queue drain
	ScFairHandoff = "fairhandoff" // scenario 4: fair handoff latency with k waiters (issue 3)
	ScCPU         = "cpu"         // scenario 5: Redis CPU per handoff
	ScSemaphore   = "semaphore"   // issue 21: the fair semaphore against the fair lock
	ScSeats       = "seats"       // issue 22: a fair 4-seat hold against one fair lock, uncontended
)

// Scenarios lists every scenario in run order.
var Scenarios = []string{ScFloor, ScUncontended, ScContention, ScFairness, ScDrain, ScFairHandoff, ScCPU, ScSemaphore, ScSeats}

// Config is one run of the runner.
type Config struct {
	Redis  string // host:port of an existing Redis; empty: start a redis-server
	Rounds int    // repetitions of every scenario (interleaved across libraries)
	// DrainRounds caps the rounds of the drain scenario (its 10,000-waiter
	// drain takes minutes); 0: Rounds.
	DrainRounds int
	Sizes       []int    // drain sizes
	SemSizes    []int    // queue sizes of the semaphore scenario's Redis work per grant
	Quick       bool     // tiny sizes: a smoke run of a few seconds
	Only        []string // scenarios to run; empty: all
	Libs        []string // libraries to run (by name); empty: all
	Log         io.Writer
}

// params are the sizes a run uses.
type params struct {
	cycles       int           // uncontended cycles per round
	warmup       int           // uncontended warm-up cycles per library per round (connections, script cache, pools)
	floorN       int           // floor samples per round
	duration     time.Duration // contention and cpu run length
	fairN        int           // fairness contenders
	arrivalGap   time.Duration // gap between arrivals for libraries without a queue
	handoffK     []int         // fair handoff waiter counts
	handoffN     int           // grants per fair handoff run
	cpuWaiters   int           // waiters in the cpu scenario
	cpuHold      time.Duration // hold time in the cpu scenario
	contClients  int
	contPerCl    int
	contChunks   int // passes of the contention scenario per round
	chainChunk   int // chain floor samples before each library's contention turn
	drainTimeout time.Duration

	// the semaphore scenario
	semCycles   int           // uncontended cycles per participant per round
	semWarmup   int           // unmeasured cycles before them
	semK        []int         // waiters at each handoff
	semHandoffN int           // measured handoffs per participant per round and k
	semChunks   int           // turns per round they are split into
	semSizes    []int         // queue sizes for the Redis work per grant
	semIdle     time.Duration // idle measurement before each drain
	semSettle   time.Duration // settling of the queue before each drain

	// the seats scenario
	seatsCycles int // uncontended cycles per participant per round
	seatsWarmup int // unmeasured cycles before them
}

func (c Config) params() params {
	if c.Quick {
		return params{cycles: 30, warmup: 20, floorN: 30, duration: 150 * time.Millisecond, fairN: 6, arrivalGap: 5 * time.Millisecond,
			handoffK: []int{1, 3}, handoffN: 20, cpuWaiters: 8, cpuHold: time.Millisecond,
			contClients: 2, contPerCl: 2, contChunks: 2, chainChunk: 10, drainTimeout: 60 * time.Second,
			semCycles: 30, semWarmup: 10, semK: []int{1}, semHandoffN: 20, semChunks: 2, semSizes: pick(c.SemSizes, 4, 8),
			semIdle: 100 * time.Millisecond, semSettle: 50 * time.Millisecond,
			seatsCycles: 30, seatsWarmup: 10}
	}
	return params{cycles: 2000, warmup: 100, floorN: 2000, duration: 3 * time.Second, fairN: 32, arrivalGap: 5 * time.Millisecond,
		handoffK: []int{1, 10, 100}, handoffN: 500, cpuWaiters: 100, cpuHold: time.Millisecond,
		contClients: 4, contPerCl: 8, contChunks: 6, chainChunk: 50, drainTimeout: 20 * time.Minute,
		semCycles: 1000, semWarmup: 100, semK: []int{1, 10}, semHandoffN: 600, semChunks: 3, semSizes: pick(c.SemSizes, 10, 100, 1000),
		semIdle: 300 * time.Millisecond, semSettle: 200 * time.Millisecond,
		seatsCycles: 1000, seatsWarmup: 100}
}

// pick is sizes, or def when sizes is empty.
func pick(sizes []int, def ...int) []int {
	if len(sizes) > 0 {
		return sizes
	}
	return def
}

// Results holds every figure of a run, per scenario and library.
type Results struct {
	Cfg     Config
	P       params
	Machine string
	Started time.Time
	Elapsed time.Duration

	Floor       map[string]*latRow // "1×EVALSHA", "2×EVALSHA", "PUBLISH→delivery"
	Uncontended map[string]*latRow
	Contention  map[string]*contRow
	Fairness    map[string]*fairRow
	Drain       map[sizeKey]*drainRow
	FairHandoff map[sizeKey]*contRow
	CPU         map[string]*cpuRow
	Sem         *semResults   // the semaphore scenario (nil when it did not run)
	Seats       *seatsResults // the seats scenario (nil when it did not run)
	Errors      []string
	// RueidisRetries counts rueidislock waits cancelled and retried after
	// rueidisWait without a wake-up (see rdlMutex.lock).
	RueidisRetries int
	libs           []Lib
}

type latRow struct{ med, p99, allocs, rtt, server summary }

type contRow struct {
	rate, med, p99, selfPct summary
	medOther, p99Other      summary
	nOther                  summary // handoffs to another goroutine per round
	violations, errors      int
	firstErr                string
}

type fairRow struct {
	inv        summary
	arrival    string
	violations int
	errors     int
	firstErr   string
}

type drainRow struct {
	enqueue, drain, perHandoff, slowServer, slowClient, cmds, cpu summary
	errors                                                        int
	firstErr                                                      string
}

type cpuRow struct {
	cpuPer, cpuNet, perHandoff, cmdsPer summary
	redisCmds, cmdUsec                  summary             // commandstats calls and top-level usec per handoff, net of idle
	perCmd                              map[string]*summary // commandstats calls per handoff, per command, net of idle
	violations, errors                  int
	firstErr                            string
}

func (c Config) wants(sc string) bool { return len(c.Only) == 0 || slices.Contains(c.Only, sc) }

// Validate checks a configuration and changes nothing.
func (c Config) Validate() error {
	if c.Rounds < 1 {
		return fmt.Errorf("rounds must be at least 1, got %d", c.Rounds)
	}
	if c.DrainRounds < 0 {
		return fmt.Errorf("drain rounds must be at least 0, got %d", c.DrainRounds)
	}
	for _, s := range c.Sizes {
		if s < 1 {
			return fmt.Errorf("drain size must be at least 1, got %d", s)
		}
	}
	for _, s := range c.SemSizes {
		if s < 1 {
			return fmt.Errorf("semaphore queue size must be at least 1, got %d", s)
		}
	}
	for _, o := range c.Only {
		if !slices.Contains(Scenarios, o) {
			return fmt.Errorf("unknown scenario %q (have %s)", o, strings.Join(Scenarios, ", "))
		}
	}
	var names []string
	for _, l := range Libs() {
		names = append(names, l.Name)
	}
	for _, l := range c.Libs {
		if !slices.Contains(names, l) {
			return fmt.Errorf("unknown library %q (have %s)", l, strings.Join(names, ", "))
		}
	}
	return nil
}

func (r *Results) logf(format string, a ...any) {
	if r.Cfg.Log != nil {
		fmt.Fprintf(r.Cfg.Log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
	}
}

func (r *Results) fail(scenario, lib string, err error) {
	msg := fmt.Sprintf("%s/%s: %v", scenario, lib, err)
	r.Errors = append(r.Errors, msg)
	r.logf("ERROR %s", msg)
}

// target is the Redis the run talks to.
type target struct {
	addr  string
	own   bool // started by this run: CONFIG SET is allowed
	srv   *redistest.Server
	admin *redis.Client
}

func openTarget(ctx context.Context, addr string) (*target, error) {
	t := &target{addr: addr}
	if addr == "" {
		srv, err := redistest.Start()
		if err != nil {
			return nil, fmt.Errorf("start redis-server: %w", err)
		}
		t.srv, t.addr, t.own = srv, srv.Addr, true
	}
	t.admin = redis.NewClient(&redis.Options{Addr: t.addr})
	if err := t.admin.Ping(ctx).Err(); err != nil {
		t.close()
		return nil, fmt.Errorf("redis at %s: %w", t.addr, err)
	}
	return t, nil
}

func (t *target) close() {
	_ = t.admin.Close()
	if t.srv != nil {
		t.srv.Stop()
	}
}

// cleanup deletes this run's keys (and only them) from a server the run did
// not start.
func (t *target) cleanup(ctx context.Context, prefix string) {
	if t.own {
		return
	}
	iter := t.admin.Scan(ctx, 0, "*"+prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		_ = t.admin.Del(ctx, iter.Val()).Err()
	}
}

func randomPrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "lockbench:" + hex.EncodeToString(b[:]) + ":"
}

// Run runs the configured scenarios and returns their figures.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(cfg.Sizes) == 0 {
		cfg.Sizes = []int{100, 1000, 10000}
		if cfg.Quick {
			cfg.Sizes = []int{5, 20}
		}
	}
	r := &Results{Cfg: cfg, P: cfg.params(), Started: time.Now(),
		Floor: map[string]*latRow{}, Uncontended: map[string]*latRow{}, Contention: map[string]*contRow{},
		Fairness: map[string]*fairRow{}, Drain: map[sizeKey]*drainRow{}, FairHandoff: map[sizeKey]*contRow{}, CPU: map[string]*cpuRow{}}
	for _, l := range Libs() {
		if len(cfg.Libs) == 0 || slices.Contains(cfg.Libs, l.Name) {
			r.libs = append(r.libs, l)
		}
	}
	rueidisRetries.Store(0)
	defer func() { r.RueidisRetries = int(rueidisRetries.Load()) }()
	t, err := openTarget(ctx, cfg.Redis)
	if err != nil {
		return nil, err
	}
	defer t.close()
	// Clients with default go-redis options, as users build them (issue
	// 23); scenarios 1 and 2 also run each library as the runner did
	// before (oldRunner).
	e := &env{addr: t.addr, prefix: randomPrefix(), cmds: &counter{}, plain: true}
	defer t.cleanup(context.WithoutCancel(ctx), e.prefix)
	r.Machine = machine(ctx, t)

	type step struct {
		name string
		run  func(round int)
	}
	steps := []step{
		{ScFloor, func(int) {
			r.runFloor(ctx, e, t)
			if !cfg.wants(ScUncontended) {
				r.runUncontended(ctx, e, t, true, false)
			}
		}},
		{ScUncontended, func(int) { r.runUncontended(ctx, e, t, cfg.wants(ScFloor), true) }},
		{ScContention, func(int) { r.runContention(ctx, e, t) }},
		{ScFairness, func(round int) { r.runFairness(ctx, e, t, round) }},
		{ScDrain, func(round int) { r.runDrain(ctx, e, t, round) }},
		{ScFairHandoff, func(int) { r.runFairHandoff(ctx, e) }},
		{ScCPU, func(round int) { r.runCPU(ctx, e, t, round) }},
		{ScSemaphore, func(round int) { r.runSemaphore(ctx, e, t, round) }},
		{ScSeats, func(round int) { r.runSeats(ctx, e, t, round) }},
	}
	for _, s := range steps {
		if !cfg.wants(s.name) {
			continue
		}
		rounds := cfg.Rounds
		if s.name == ScDrain && cfg.DrainRounds > 0 {
			rounds = min(rounds, cfg.DrainRounds)
		}
		for round := 1; round <= rounds; round++ {
			if ctx.Err() != nil {
				return r, ctx.Err()
			}
			r.logf("%s round %d/%d", s.name, round, rounds)
			s.run(round)
		}
	}
	r.Elapsed = time.Since(r.Started)
	return r, nil
}

func (r *Results) lib(name string) (Lib, bool) {
	for _, l := range r.libs {
		if l.Name == name {
			return l, true
		}
	}
	return Lib{}, false
}

var errTimeout = errors.New("timed out")

// Violations is the number of grants, over every scenario, made while
// another goroutine held the lock (always 0 for a correct lock).
func (r *Results) Violations() int {
	n := 0
	for _, c := range r.Contention {
		n += c.violations
	}
	for _, c := range r.FairHandoff {
		n += c.violations
	}
	for _, f := range r.Fairness {
		n += f.violations
	}
	for _, c := range r.CPU {
		n += c.violations
	}
	if r.Sem != nil {
		for _, c := range r.Sem.handoff {
			n += c.violations
		}
		for _, w := range r.Sem.work {
			n += w.violations
		}
	}
	return n
}

// Inversions is the worst round's inversion count of lib in scenario 3.
func (r *Results) Inversions(lib string) (int, bool) {
	f, ok := r.Fairness[lib]
	if !ok {
		return 0, false
	}
	_, _, hi, ok := f.inv.stats()
	return int(hi), ok && f.errors == 0
}
