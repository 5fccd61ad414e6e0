package demo

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/reentrant"
)

// run is the shared state of one kind's run.
type run struct {
	c        Config
	kind     string
	keys     wire.Keys
	next     string // counter: seats booked so far
	bookings string // hash: seat -> who
	observer *redis.Client

	gate     chan struct{} // one token: held by the booking that is arriving
	arrivals atomic.Int64
	grants   atomic.Int64
	waiting  atomic.Int64
	soldOut  atomic.Bool
	holding  atomic.Int64 // semaphore mode: permits held right now

	mu       sync.Mutex
	seqOf    map[string]int // owner -> arrival number of its current attempt
	result   *Result
	firstErr error
}

// demoClient is one client of a run: its own go-redis client, with the
// arrival hook.
type demoClient struct {
	rdb  *redis.Client
	hook *arrivalHook
	fl   *fairlock.Client
}

// contender is one goroutine's lock handle.
type contender struct {
	lk   locker
	hook *arrivalHook
	who  string
	rng  *mrand.Rand
}

func runKind(ctx context.Context, c Config, kind string) (*Result, error) {
	name := c.Prefix + kind
	r := &run{
		c: c, kind: kind, keys: wire.KeysFor(name),
		next: c.Prefix + kind + ":next", bookings: BookingsKey(c.Prefix, kind),
		observer: redis.NewClient(c.Redis),
		gate:     make(chan struct{}, 1),
		seqOf:    map[string]int{},
		result: &Result{Kind: kind, Lock: name, Contenders: c.Clients * c.Goroutines,
			PerContender: make([]int, c.Clients*c.Goroutines), Permits: c.Permits},
	}
	defer r.observer.Close()
	r.gate <- struct{}{}

	clients := make([]demoClient, c.Clients)
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
	if err := newClients(c, kind, clients); err != nil {
		return nil, err
	}
	if isSemaphore(kind) {
		if err := setPermits(ctx, kind, clients[0].fl, name, c.Permits); err != nil {
			return nil, err
		}
	}
	cs, err := newContenders(ctx, c, kind, name, clients)
	if err != nil {
		return nil, err
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
	return r.finish(ctx, clients)
}

// newClients fills clients; the caller closes what it holds.
func newClients(c Config, kind string, clients []demoClient) error {
	for i := range clients {
		rdb := redis.NewClient(c.Redis)
		h := newArrivalHook(kind, c.Engine, c.Scripts, c.SemFairScripts)
		rdb.AddHook(h)
		opts := c.Options
		if c.Scripts != nil {
			opts = append(opts[:len(opts):len(opts)], core.WithScripts(c.Scripts))
		}
		if c.SemFairScripts != nil {
			opts = append(opts[:len(opts):len(opts)], core.WithSemFairScripts(c.SemFairScripts))
		}
		fl, err := fairlock.NewClient(rdb, opts...)
		if err != nil {
			_ = rdb.Close()
			return err
		}
		clients[i] = demoClient{rdb: rdb, hook: h, fl: fl}
	}
	return nil
}

// newContenders makes every handle, and every connection, before the clock
// starts.
func newContenders(ctx context.Context, c Config, kind, name string, clients []demoClient) ([]contender, error) {
	var cs []contender
	for ci, cl := range clients {
		if err := cl.rdb.Ping(ctx).Err(); err != nil {
			return nil, err
		}
		for g := 0; g < c.Goroutines; g++ {
			who := fmt.Sprintf("c%dg%d", ci+1, g+1)
			lk, err := newLocker(kind, c.Engine, cl.fl, name, who)
			if err != nil {
				return nil, err
			}
			cs = append(cs, contender{lk: lk, hook: cl.hook, who: who,
				rng: mrand.New(mrand.NewPCG(c.Seed, uint64(len(cs))))})
		}
	}
	return cs, nil
}

// finish closes the clients, deletes the demo's keys, records the lock's
// keys left behind and sorts the bookings by grant.
func (r *run) finish(ctx context.Context, clients []demoClient) (*Result, error) {
	// A call that ended with ctx returned at once and gives back what it
	// took in the background: closing the clients waits for that.
	for _, cl := range clients {
		_ = cl.fl.Close()
	}
	// The demo's own keys go; the lock's keys must already be gone.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// With the fair lock's fencing token counter, which never expires (a
	// semaphore's pool and counter likewise).
	mustGo, owned := []string{r.keys.Name, r.keys.Queue, r.keys.Timeouts, r.keys.ScalableQueue()}, []string{r.keys.Token()}
	if isSemaphore(r.kind) {
		mustGo, owned = semaphoreKeys(r.kind, r.result.Lock)
	}
	if !r.c.Keep {
		_ = r.observer.Del(cctx, append([]string{r.next, r.bookings}, owned...)...).Err()
	}
	for _, k := range mustGo {
		if n, err := r.observer.Exists(cctx, k).Result(); err == nil && n > 0 {
			r.result.Leftover = append(r.result.Leftover, k)
		}
	}
	if isSemaphore(r.kind) {
		// Grants are not exclusive: the tokens, drawn by the server in
		// grant order, number them.
		bs := r.result.Bookings
		sort.Slice(bs, func(i, j int) bool { return bs[i].Token < bs[j].Token })
		for i := range bs {
			bs[i].Grant = i + 1
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

func newLocker(kind string, engine fair.Engine, c *fairlock.Client, name, who string) (locker, error) {
	if isSemaphore(kind) {
		return newPermitLocker(kind, c, name, who)
	}
	if kind == Fair {
		return fair.New(c, name, fair.WithEngine(engine))
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
		// A semaphore's owner id is made per acquisition: the hook knows
		// the arrival by its context.
		err := lk.Lock(context.WithValue(ctx, arrivalKey{}, owner))
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
		var token int64
		if pl, ok := lk.(*permitLocker); ok {
			token = pl.Token()
			r.held(1)
		}
		seat, err := r.book(ctx, who, rng)
		if token > 0 {
			r.held(-1)
		}
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
			Booking{Grant: grant, Arrival: seq, Who: who, Owner: owner, Seat: seat, Wait: wait, Token: token})
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
// HSETNX counts any seat written twice. At a semaphore's booking windows
// (several book at once) the seat number is drawn atomically instead.
func (r *run) book(ctx context.Context, who string, rng *mrand.Rand) (int, error) {
	var seat int
	if isSemaphore(r.kind) {
		n, err := r.observer.Incr(ctx, r.next).Result()
		if err != nil {
			return 0, err
		}
		seat = int(n)
	} else {
		n, err := r.observer.Get(ctx, r.next).Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, err
		}
		seat = n + 1
	}
	if seat > r.c.Seats {
		r.soldOut.Store(true)
		return 0, nil
	}
	fresh, err := r.observer.HSetNX(ctx, r.bookings, fmt.Sprint(seat), who).Result()
	if err != nil {
		return 0, err
	}
	if !fresh {
		r.mu.Lock()
		r.result.DoubleBookings++
		r.mu.Unlock()
	}
	if !isSemaphore(r.kind) {
		if err := r.observer.Set(ctx, r.next, seat, 0).Err(); err != nil {
			return 0, err
		}
	}
	r.hold(ctx, rng)
	return seat, nil
}

// readQueue reads, atomically, the fair queue's waiters from the head (the
// engine's own keys, not through the library's scripts) and whether owner
// holds the lock.
func (r *run) readQueue(ctx context.Context, owner string) ([]string, bool, error) {
	var holds *redis.BoolCmd
	if r.c.Engine == fair.Scalable {
		// The scalable engine keeps its queue as links in a hash (field h
		// the head, n:<o> the owner after o, "" after the tail): one HMGET
		// of the head and the links of every owner that ever arrived (a
		// waiter must have) gives the whole list, walked here: one command
		// where a walk in a script ran one HGET a waiter, and an HGETALL
		// read four fields a waiter, on Redis in the same milliseconds as
		// the new holder's booking.
		r.mu.Lock()
		owners := make([]string, 0, len(r.seqOf))
		for o := range r.seqOf {
			owners = append(owners, o)
		}
		r.mu.Unlock()
		fields := make([]string, 1, len(owners)+1)
		fields[0] = "h"
		for _, o := range owners {
			fields = append(fields, "n:"+o)
		}
		var links *redis.SliceCmd
		if _, err := r.observer.TxPipelined(ctx, func(p redis.Pipeliner) error {
			links = p.HMGet(ctx, r.keys.ScalableQueue(), fields...)
			holds = p.HExists(ctx, r.keys.Name, owner)
			return nil
		}); err != nil {
			return nil, false, err
		}
		return walkLinks(owners, links.Val()), holds.Val(), nil
	}
	var lrange *redis.StringSliceCmd
	if _, err := r.observer.TxPipelined(ctx, func(p redis.Pipeliner) error {
		lrange = p.LRange(ctx, r.keys.Queue, 0, -1)
		holds = p.HExists(ctx, r.keys.Name, owner)
		return nil
	}); err != nil {
		return nil, false, err
	}
	return lrange.Val(), holds.Val(), nil
}

// walkLinks lists the scalable queue from its head, given the HMGET reply
// of h and of n:<o> for each of owners. A link that loops, leads to an
// owner whose own link was not read, or to nothing, ends the list there
// (that owner included); the order check then fails on the waiters it
// misses, or on the stranger (no arrival number).
func walkLinks(owners []string, v []any) []string {
	next := make(map[string]string, len(owners))
	for i, o := range owners {
		if s, ok := v[i+1].(string); ok {
			next[o] = s
		}
	}
	var q []string
	seen := map[string]bool{}
	o, _ := v[0].(string)
	for o != "" && !seen[o] {
		seen[o] = true
		q = append(q, o)
		o = next[o]
	}
	return q
}

// held counts permits taken (d = 1) or about to be given back (d = -1),
// and keeps the most held at once.
func (r *run) held(d int64) {
	n := r.holding.Add(d)
	r.mu.Lock()
	r.result.MaxHeld = max(r.result.MaxHeld, int(n))
	r.mu.Unlock()
}

// hold keeps the lock (or permit) a while, Hold on average.
func (r *run) hold(ctx context.Context, rng *mrand.Rand) {
	if r.c.Hold > 0 {
		d := r.c.Hold/2 + time.Duration(rng.Int64N(int64(r.c.Hold)+1))
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// checkQueue reads the fair queue right after owner (arrival seq) joined it,
// while the gate keeps anyone else from joining: the queue must list waiters
// in arrival order, owner last. (Waiters only leave it meanwhile, owner too
// when a release granted it the lock directly: it then holds the lock, since
// its Lock call, which runs this check, has not returned yet.)
func (r *run) checkQueue(ctx context.Context, owner string) {
	q, holds, err := r.readQueue(ctx, owner)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.result.QueueChecks++
	ok := len(q) > 0 && q[len(q)-1] == owner || !slices.Contains(q, owner) && holds
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
