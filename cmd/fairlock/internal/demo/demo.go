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
// queue (LRANGE) after each queued arrival, while still holding the gate, and
// checks that the queue lists waiters in arrival order with the newcomer last.
//
// Grant order is the order of the Lock calls' returns, numbered inside the
// critical section: grants are mutually exclusive, so that numbering is
// exact.
package demo

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/lua"
	"github.com/fairlock-go/fairlock/reentrant"
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
	Seed       uint64        // seed of the hold-time jitter
	// Redis are the options of every go-redis client the demo makes.
	Redis *redis.Options
	// Prefix namespaces every key; empty: a random "fairlock-demo:<hex>:".
	Prefix string
	// Keep leaves the bookings hash ("<prefix><kind>:bookings", seat ->
	// who) and the seat counter in Redis instead of deleting them.
	Keep bool
	// Options configure every fairlock.Client of the run.
	Options []fairlock.Option
	// Scripts are the lock scripts the clients run; nil: lua.Default.
	// Tests pass deliberately broken sets to show that the demo's checks
	// catch a lock that is not fair.
	Scripts *lua.Scripts
	// Progress receives a line per kind every ProgressEvery (default
	// 250ms) and at the end; nil: none.
	Progress      io.Writer
	ProgressEvery time.Duration
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
	}
	for _, k := range c.Kinds {
		if k != Fair && k != Reentrant {
			return fmt.Errorf("lock kind %q: must be fair or reentrant", k)
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
	granted := make([]bool, len(r.Bookings)+2)
	next, n := 1, 0 // next: the earliest arrival not yet granted
	for _, b := range r.Bookings {
		if b.Arrival < len(granted) {
			granted[b.Arrival] = true
		}
		if b.Arrival != next {
			n++
		}
		for next < len(granted) && granted[next] {
			next++
		}
	}
	return n
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
		r, err := runKind(ctx, c, kind)
		if r != nil {
			out = append(out, r)
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// run is the shared state of one kind's run.
type run struct {
	c        Config
	kind     string
	keys     lua.Keys
	next     string // counter: seats booked so far
	bookings string // hash: seat -> who
	observer *redis.Client

	gate     chan struct{} // one token: held by the booking that is arriving
	arrivals atomic.Int64
	grants   atomic.Int64
	waiting  atomic.Int64
	soldOut  atomic.Bool

	mu       sync.Mutex
	seqOf    map[string]int // owner -> arrival number of its current attempt
	result   *Result
	firstErr error
}

func runKind(ctx context.Context, c Config, kind string) (*Result, error) {
	name := c.Prefix + kind
	r := &run{
		c: c, kind: kind, keys: lua.KeysFor(name),
		next: c.Prefix + kind + ":next", bookings: BookingsKey(c.Prefix, kind),
		observer: redis.NewClient(c.Redis),
		gate:     make(chan struct{}, 1),
		seqOf:    map[string]int{},
		result: &Result{Kind: kind, Lock: name, Contenders: c.Clients * c.Goroutines,
			PerContender: make([]int, c.Clients*c.Goroutines)},
	}
	defer r.observer.Close()
	r.gate <- struct{}{}

	// Every client: its own go-redis client, with the arrival hook.
	type client struct {
		rdb  *redis.Client
		hook *arrivalHook
		fl   *fairlock.Client
	}
	clients := make([]client, c.Clients)
	defer func() {
		for _, cl := range clients {
			if cl.fl != nil {
				_ = cl.fl.Close()
			}
			if cl.rdb != nil {
				_ = cl.rdb.Close()
			}
		}
	}()
	for i := range clients {
		rdb := redis.NewClient(c.Redis)
		h := newArrivalHook(kind, c.Scripts)
		rdb.AddHook(h)
		fl, err := fairlock.NewClient(rdb, c.Options...)
		if err != nil {
			_ = rdb.Close()
			return nil, err
		}
		if c.Scripts != nil {
			core.Of(fl).Scripts = c.Scripts
		}
		clients[i] = client{rdb: rdb, hook: h, fl: fl}
	}

	// Every handle, and every connection, before the clock starts.
	type contender struct {
		lk   locker
		hook *arrivalHook
		who  string
		rng  *mrand.Rand
	}
	var cs []contender
	for ci, cl := range clients {
		if err := cl.rdb.Ping(ctx).Err(); err != nil {
			return nil, err
		}
		for g := 0; g < c.Goroutines; g++ {
			lk, err := newLocker(kind, cl.fl, name)
			if err != nil {
				return nil, err
			}
			cs = append(cs, contender{lk: lk, hook: cl.hook, who: fmt.Sprintf("c%dg%d", ci+1, g+1),
				rng: mrand.New(mrand.NewPCG(c.Seed, uint64(len(cs))))})
		}
	}

	start := time.Now()
	stopProgress := r.progress(start)
	var wg sync.WaitGroup
	for i, ct := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.contend(ctx, ct.lk, ct.hook, i, ct.who, ct.rng)
		}()
	}
	wg.Wait()
	r.result.Elapsed = time.Since(start)
	stopProgress()

	// A call that ended with ctx returned at once and gives back what it
	// took in the background: closing the clients waits for that.
	for _, cl := range clients {
		_ = cl.fl.Close()
	}
	// The demo's own keys go; the lock's keys must already be gone.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if !c.Keep {
		// With the fair lock's fencing token counter, which never expires.
		_ = r.observer.Del(cctx, r.next, r.bookings, r.keys.Token()).Err()
	}
	for _, k := range []string{r.keys.Name, r.keys.Queue, r.keys.Timeouts} {
		if n, err := r.observer.Exists(cctx, k).Result(); err == nil && n > 0 {
			r.result.Leftover = append(r.result.Leftover, k)
		}
	}
	sort.Slice(r.result.Bookings, func(i, j int) bool { return r.result.Bookings[i].Grant < r.result.Bookings[j].Grant })
	if err := ctx.Err(); err != nil {
		return r.result, err
	}
	return r.result, r.firstErr
}

// locker is what the demo needs of either lock.
type locker interface {
	Lock(context.Context) error
	Unlock(context.Context) error
	Owner() string
}

func newLocker(kind string, c *fairlock.Client, name string) (locker, error) {
	if kind == Fair {
		return fair.New(c, name)
	}
	return reentrant.New(c, name)
}

func (r *run) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.firstErr == nil {
		r.firstErr = err
	}
}

// contend books seats until none is left or ctx ends.
func (r *run) contend(ctx context.Context, lk locker, hook *arrivalHook, idx int, who string, rng *mrand.Rand) {
	owner := lk.Owner()
	for !r.soldOut.Load() && ctx.Err() == nil {
		// Arrive: take the gate, then the arrival number; the hook
		// gives the gate back once the first attempt has run in Redis.
		select {
		case <-r.gate:
		case <-ctx.Done():
			return
		}
		if r.soldOut.Load() {
			r.gate <- struct{}{}
			return
		}
		seq := int(r.arrivals.Add(1))
		r.mu.Lock()
		r.seqOf[owner] = seq
		r.mu.Unlock()
		var once sync.Once
		release := func() { once.Do(func() { r.gate <- struct{}{} }) }
		hook.expect(owner, func(acquired bool) {
			if r.kind == Fair && !acquired {
				r.checkQueue(ctx, owner)
			}
			release()
		})
		r.waiting.Add(1)
		t0 := time.Now()
		err := lk.Lock(ctx)
		wait := time.Since(t0)
		r.waiting.Add(-1)
		hook.forget(owner)
		release() // when Lock failed before its first attempt ran
		if err != nil {
			if ctx.Err() == nil {
				r.fail(fmt.Errorf("%s lock %s: %w", r.kind, who, err))
			}
			return
		}
		grant := int(r.grants.Add(1))
		seat, err := r.book(ctx, who, rng)
		// Unlock on a context that Ctrl-C does not end: the library runs
		// an Unlock whose ctx has already ended on a fresh context, but
		// one whose ctx ends during the call (waiting for a pooled
		// connection, say) fails and leaves the lock held, renewed by the
		// watchdog. An interrupted demo must leave no lock behind.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if uerr := lk.Unlock(uctx); uerr != nil && err == nil {
			err = fmt.Errorf("%s unlock %s: %w", r.kind, who, uerr)
		}
		cancel()
		r.mu.Lock()
		r.result.Bookings = append(r.result.Bookings,
			Booking{Grant: grant, Arrival: seq, Who: who, Owner: owner, Seat: seat, Wait: wait})
		if seat > 0 {
			r.result.Booked++
			r.result.PerContender[idx]++
		}
		r.mu.Unlock()
		if err != nil {
			if ctx.Err() == nil {
				r.fail(err)
			}
			return
		}
	}
}

// book runs inside the lock: read the next free seat, write the booking,
// hold the lock a while. The read-then-write is deliberately not atomic in
// Redis: only the lock keeps two holders from taking the same seat, and
// HSETNX counts any seat written twice.
func (r *run) book(ctx context.Context, who string, rng *mrand.Rand) (int, error) {
	n, err := r.observer.Get(ctx, r.next).Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	if n >= r.c.Seats {
		r.soldOut.Store(true)
		return 0, nil
	}
	seat := n + 1
	fresh, err := r.observer.HSetNX(ctx, r.bookings, fmt.Sprint(seat), who).Result()
	if err != nil {
		return 0, err
	}
	if !fresh {
		r.mu.Lock()
		r.result.DoubleBookings++
		r.mu.Unlock()
	}
	if err := r.observer.Set(ctx, r.next, seat, 0).Err(); err != nil {
		return 0, err
	}
	if r.c.Hold > 0 {
		d := r.c.Hold/2 + time.Duration(rng.Int64N(int64(r.c.Hold)+1))
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	return seat, nil
}

// checkQueue reads the fair queue right after owner (arrival seq) joined it,
// while the gate keeps anyone else from joining: the queue must list waiters
// in arrival order, owner last. (Waiters only leave it meanwhile.)
func (r *run) checkQueue(ctx context.Context, owner string) {
	q, err := r.observer.LRange(ctx, r.keys.Queue, 0, -1).Result()
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.result.QueueChecks++
	ok := len(q) > 0 && q[len(q)-1] == owner
	last := 0
	for _, o := range q {
		s := r.seqOf[o]
		if s <= last {
			ok = false
		}
		last = s
	}
	if !ok {
		r.result.QueueMismatches++
	}
}

// progress prints a line every ProgressEvery until the returned stop is
// called, which prints the last one.
func (r *run) progress(start time.Time) (stop func()) {
	if r.c.Progress == nil {
		return func() {}
	}
	line := func(end bool) {
		r.mu.Lock()
		booked := r.result.Booked
		r.mu.Unlock()
		state := fmt.Sprintf("%3d waiting", r.waiting.Load())
		if end {
			state = "done"
		}
		fmt.Fprintf(r.c.Progress, "%-10s %s %*d/%d seats  %6.2fs  %s\n", r.kind, bar(booked, r.c.Seats, 20),
			len(fmt.Sprint(r.c.Seats)), booked, r.c.Seats, time.Since(start).Seconds(), state)
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(r.c.ProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				line(false)
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		line(true)
	}
}

func bar(n, of, width int) string {
	full := 0
	if of > 0 {
		full = n * width / of
	}
	return "[" + strings.Repeat("#", full) + strings.Repeat(".", width-full) + "]"
}

// arrivalHook watches one go-redis client for the first lock attempt of
// owners that are arriving: the EVALSHA (or EVAL) of the kind's acquire
// script with the owner among its arguments.
type arrivalHook struct {
	sha     string
	mu      sync.Mutex
	pending map[string]func(acquired bool)
}

func newArrivalHook(kind string, scripts *lua.Scripts) *arrivalHook {
	file := lua.FileAcquire
	if kind == Fair {
		file = lua.FileFairTryLockWait
	}
	if scripts == nil {
		scripts = lua.Default
	}
	return &arrivalHook{sha: scripts.Script(file).Hash(), pending: map[string]func(bool){}}
}

func (h *arrivalHook) expect(owner string, f func(acquired bool)) {
	h.mu.Lock()
	h.pending[owner] = f
	h.mu.Unlock()
}

func (h *arrivalHook) forget(owner string) {
	h.mu.Lock()
	delete(h.pending, owner)
	h.mu.Unlock()
}

func (h *arrivalHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *arrivalHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *arrivalHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if len(args) < 3 {
			return err
		}
		switch fmt.Sprint(args[0]) {
		case "evalsha":
			if args[1] != h.sha {
				return err
			}
		case "eval":
			src, _ := args[1].(string)
			if sum := sha1.Sum([]byte(src)); hex.EncodeToString(sum[:]) != h.sha {
				return err
			}
		default:
			return err
		}
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			return err // not run: go-redis sends EVAL next
		}
		h.mu.Lock()
		var f func(bool)
		for _, a := range args[2:] {
			if s, ok := a.(string); ok {
				if f = h.pending[s]; f != nil {
					delete(h.pending, s)
					break
				}
			}
		}
		h.mu.Unlock()
		if f != nil {
			acquired := false
			if c, ok := cmd.(*redis.Cmd); ok {
				v, rerr := c.Result()
				tok, _ := v.([]any) // a fair grant with its fencing token: {-1, token}
				acquired = v == "OK" || errors.Is(rerr, redis.Nil) || len(tok) == 2 && tok[1] != int64(-1)
			}
			f(acquired)
		}
		return err
	}
}
