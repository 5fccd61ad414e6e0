package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/reentrant"
)

// A Lib is one lock library under test, configured as its README (or its
// documented example) recommends for a single Redis.
type Lib struct {
	Name  string
	Queue bool // waiters queue in Redis in arrival order
	Fair  bool // this project's fair lock (an engine of it): runs the drain and the k-waiter handoffs
	// queued reports how many waiters are queued on the lock called name
	// (Queue libraries only).
	queued func(ctx context.Context, admin *redis.Client, name string) (int64, error)
	Wakeup string // how a waiter learns that the lock is free
	Config string // the configuration used, for the report
	open   func(e *env) (client, error)
}

// client is one process-level client of a library (its own connections).
type client interface {
	mutex(name string) (mutex, error)
	close()
}

// mutex is one goroutine's handle on a lock.
type mutex interface {
	lock(ctx context.Context) error
	unlock(ctx context.Context) error
}

// env is what a library client is built against.
type env struct {
	addr   string
	prefix string   // every key this run touches starts with it (or carries it in a {tag})
	cmds   *counter // client-side command counter (round trips)
	// plain: go-redis clients with default options (no
	// ContextTimeoutEnabled), as most users build them (issue 23): every
	// scenario's clients, except the "old runner" participants of
	// scenarios 1 and 2 (oldRunner), which keep the configuration this
	// runner used before issue 23.
	plain bool
}

// SufCanEnd and SufOld name the extra participants of scenarios 1 and 2
// (issue 23). A library's own row is called as users call it: default
// go-redis options, context.Background() for an uncontended cycle, a
// cancellable context (a request's) for a wait. SufCanEnd: the uncontended
// cycle with a cancellable context (context.WithCancel). SufOld: this
// runner's configuration before issue 23, ContextTimeoutEnabled on every
// go-redis client and contexts that cannot end (or, for the waits of
// scenario 2, a deadline that such a client enforces itself): fairlock's
// calls then run inline.
const (
	SufCanEnd = " (ctx can end)"
	SufOld    = " (old runner: ContextTimeoutEnabled, ctx cannot end)"
)

// oldRunner is lib as this runner called it before issue 23: its go-redis
// clients built with ContextTimeoutEnabled. rueidislock's client is not
// go-redis: its old-runner participant is configured as its own row, a
// control of the noise between two identical participants.
func oldRunner(lib Lib) Lib {
	v := lib
	v.Name = lib.Name + SufOld
	open := lib.open
	v.open = func(e *env) (client, error) {
		old := *e
		old.plain = false
		return open(&old)
	}
	return v
}

// counter counts the commands sent by the go-redis and rueidis clients of a
// run, and remembers the slowest script call (EVAL/EVALSHA/FCALL) when asked to.
type counter struct {
	n          atomic.Int64
	timeScript atomic.Bool
	mu         sync.Mutex
	maxScript  time.Duration
	keepNames  atomic.Bool
	names      map[string]bool // command names sent while keepNames
}

func (c *counter) startNames() {
	c.mu.Lock()
	c.names = map[string]bool{}
	c.mu.Unlock()
	c.keepNames.Store(true)
}

func (c *counter) stopNames() map[string]bool {
	c.keepNames.Store(false)
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.names
	c.names = nil
	return n
}

func (c *counter) name(n string) {
	if !c.keepNames.Load() {
		return
	}
	c.mu.Lock()
	if c.names != nil {
		c.names[strings.ToLower(n)] = true
	}
	c.mu.Unlock()
}

func (c *counter) scriptTime(d time.Duration) {
	c.mu.Lock()
	c.maxScript = max(c.maxScript, d)
	c.mu.Unlock()
}

func (c *counter) resetMaxScript() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.maxScript
	c.maxScript = 0
	return d
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		c.name(cmd.Name())
		if !c.timeScript.Load() {
			return next(ctx, cmd)
		}
		switch cmd.Name() {
		case "evalsha", "eval", "fcall":
			t := time.Now()
			err := next(ctx, cmd)
			c.scriptTime(time.Since(t))
			return err
		}
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		for _, cmd := range cmds {
			c.name(cmd.Name())
		}
		return next(ctx, cmds)
	}
}

func (e *env) goredis() *redis.Client {
	// ContextTimeoutEnabled: go-redis enforces a context's deadline on the
	// socket itself (off by default), for every library alike. fairlock's
	// locks then run a call whose context has a deadline on the caller's
	// goroutine instead of a goroutine of its own (README, "Every call
	// returns as soon as its ctx ends"). Not when e.plain.
	rdb := redis.NewClient(&redis.Options{Addr: e.addr, ContextTimeoutEnabled: !e.plain})
	rdb.AddHook(e.cmds)
	return rdb
}

// Libs is every library the runner knows, in report order.
func Libs() []Lib {
	return []Lib{
		{Name: "fairlock/reentrant", Wakeup: "pub/sub, shared connection",
			Config: "fairlock.NewClient(go-redis v9 client), reentrant.New; defaults (30 s watchdog lease)",
			open:   openFairlock(false)},
		{Name: "fairlock/fair", Queue: true, Fair: true, Wakeup: "pub/sub per waiter, shared connection",
			Config: "fairlock.NewClient(go-redis v9 client), fair.New; defaults (Redisson engine, 30 s watchdog lease, 5 min wait slot)",
			open:   openFairlock(true), queued: redissonQueued},
		{Name: "fairlock/fair-scalable", Queue: true, Fair: true, Wakeup: "pub/sub per waiter, shared connection",
			Config: "as fairlock/fair with fair.WithEngine(fair.Scalable): O(1) scripts per step, not Redisson-compatible",
			open:   openFairlockEngine(fair.Scalable), queued: scalableQueued},
		{Name: "redsync", Wakeup: "polling (random 50–250 ms)",
			Config: "redsync.New(goredis.NewPool(go-redis v9 client)), NewMutex; defaults (8 s expiry, 32 tries, 50–250 ms retry delay); Lock retried on ErrFailed",
			open:   openRedsync},
		{Name: "bsm/redislock", Wakeup: "polling (linear 100 ms)",
			Config: "redislock.New(go-redis v9 client); Obtain(ctx, key, 8 s, RetryStrategy: LinearBackoff(100 ms)) as its retry example, bounded by ctx",
			open:   openRedislock},
		{Name: "rueidislock", Wakeup: "client-side caching invalidation",
			Config: "rueidislock.NewLocker(KeyMajority: 1, NoLoopTracking: true) as its README for one Redis; defaults otherwise (5 s validity); " +
				"each Lock wrapped in the runner's 2 s wait guard (a cancellable context and a timer: about 9 of its allocations per cycle, 42 against 33 without the guard on the same machine; a note below says if it fired)",
			open: openRueidislock},
	}
}

// ---- fairlock (this project)

// redissonQueued is the length of Redisson's fair-lock queue list.
func redissonQueued(ctx context.Context, admin *redis.Client, name string) (int64, error) {
	return admin.LLen(ctx, wire.KeysFor(name).Queue).Result()
}

type flClient struct {
	rdb  *redis.Client
	c    *fairlock.Client
	fair bool
	opts []fair.Option
	e    *env
}

func openFairlock(isFair bool) func(e *env) (client, error) {
	return func(e *env) (client, error) {
		rdb := e.goredis()
		c, err := fairlock.NewClient(rdb)
		if err != nil {
			_ = rdb.Close()
			return nil, err
		}
		return &flClient{rdb: rdb, c: c, fair: isFair, e: e}, nil
	}
}

func openFairlockEngine(engine fair.Engine) func(e *env) (client, error) {
	return func(e *env) (client, error) {
		c, err := openFairlock(true)(e)
		if err != nil {
			return nil, err
		}
		c.(*flClient).opts = []fair.Option{fair.WithEngine(engine)}
		return c, nil
	}
}

// scalableQueued counts the waiters of the scalable engine's queue hash.
func scalableQueued(ctx context.Context, admin *redis.Client, name string) (int64, error) {
	return hashQueueLen(ctx, admin, wire.KeysFor(name).ScalableQueue())
}

// hashQueueLen counts the waiters of a scalable queue hash (the fair lock's
// scalable engine, the fair semaphore) by its field count, as the scripts'
// q_length does: six end fields (h, t, hd, td, hs, ts) plus four per waiter
// (n:, p:, d:, s:); a queue written without join sequences (no ts), four
// plus three.
func hashQueueLen(ctx context.Context, admin *redis.Client, key string) (int64, error) {
	n, err := admin.HLen(ctx, key).Result()
	if err != nil || n == 0 {
		return 0, err
	}
	seqs, err := admin.HExists(ctx, key, "ts").Result()
	if err != nil {
		return 0, err
	}
	if seqs {
		return (n - 6) / 4, nil
	}
	return (n - 4) / 3, nil
}

func (c *flClient) mutex(name string) (mutex, error) {
	if c.fair {
		m, err := fair.New(c.c, c.e.prefix+name, c.opts...)
		if err != nil {
			return nil, err
		}
		return flFair{m}, nil
	}
	m, err := reentrant.New(c.c, c.e.prefix+name)
	if err != nil {
		return nil, err
	}
	return flReentrant{m}, nil
}

func (c *flClient) close() { _ = c.c.Close(); _ = c.rdb.Close() }

type flReentrant struct{ m *reentrant.Mutex }

func (m flReentrant) lock(ctx context.Context) error   { return m.m.Lock(ctx) }
func (m flReentrant) unlock(ctx context.Context) error { return m.m.Unlock(ctx) }

type flFair struct{ m *fair.Mutex }

func (m flFair) lock(ctx context.Context) error   { return m.m.Lock(ctx) }
func (m flFair) unlock(ctx context.Context) error { return m.m.Unlock(ctx) }

// ---- redsync

type rsClient struct {
	rdb *redis.Client
	rs  *redsync.Redsync
	e   *env
}

func openRedsync(e *env) (client, error) {
	rdb := e.goredis()
	return &rsClient{rdb: rdb, rs: redsync.New(rsgoredis.NewPool(rdb)), e: e}, nil
}

func (c *rsClient) mutex(name string) (mutex, error) {
	return rsMutex{c.rs.NewMutex(c.e.prefix + name)}, nil
}

func (c *rsClient) close() { _ = c.rdb.Close() }

type rsMutex struct{ m *redsync.Mutex }

// lock calls LockContext again when it gives up after its 32 tries (the
// README says to retry): the benchmark wants the lock, however long it takes.
func (m rsMutex) lock(ctx context.Context) error {
	for {
		err := m.m.LockContext(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var re redsync.RedisError
		if errors.As(err, &re) {
			return err
		}
	}
}

func (m rsMutex) unlock(ctx context.Context) error {
	ok, err := m.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock reported not held")
	}
	return err
}

// ---- bsm/redislock

type rlClient struct {
	rdb *redis.Client
	l   *redislock.Client
	e   *env
}

func openRedislock(e *env) (client, error) {
	rdb := e.goredis()
	return &rlClient{rdb: rdb, l: redislock.New(rdb), e: e}, nil
}

func (c *rlClient) mutex(name string) (mutex, error) {
	return &rlMutex{c: c, key: c.e.prefix + name}, nil
}

func (c *rlClient) close() { _ = c.rdb.Close() }

type rlMutex struct {
	c    *rlClient
	key  string
	held *redislock.Lock
}

func (m *rlMutex) lock(ctx context.Context) error {
	l, err := m.c.l.Obtain(ctx, m.key, 8*time.Second, &redislock.Options{
		RetryStrategy: redislock.LinearBackoff(100 * time.Millisecond),
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	m.held = l
	return nil
}

func (m *rlMutex) unlock(ctx context.Context) error {
	if m.held == nil {
		return redislock.ErrLockNotHeld
	}
	err := m.held.Release(ctx)
	m.held = nil
	return err
}

// ---- rueidislock

type rdlClient struct {
	l rueidislock.Locker
}

// countingRueidis counts the commands rueidislock sends, as the go-redis
// hook does for the others.
type countingRueidis struct {
	rueidis.Client
	c *counter
}

func (c countingRueidis) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.c.n.Add(1)
	if parts := cmd.Commands(); len(parts) > 0 {
		c.c.name(parts[0])
	}
	return c.Client.Do(ctx, cmd)
}

func (c countingRueidis) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.c.n.Add(1)
	for _, cmd := range cmds {
		if parts := cmd.Commands(); len(parts) > 0 {
			c.c.name(parts[0])
		}
	}
	return c.Client.DoMulti(ctx, cmds...)
}

func openRueidislock(e *env) (client, error) {
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: []string{e.addr}},
		KeyPrefix:      e.prefix + "rueidislock",
		KeyMajority:    1,
		NoLoopTracking: true,
		ClientBuilder: func(o rueidis.ClientOption) (rueidis.Client, error) {
			c, err := rueidis.NewClient(o)
			if err != nil {
				return nil, err
			}
			return countingRueidis{Client: c, c: e.cmds}, nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("rueidislock: %w", err)
	}
	return &rdlClient{l: l}, nil
}

func (c *rdlClient) mutex(name string) (mutex, error) {
	return &rdlMutex{l: c.l, name: name}, nil
}

func (c *rdlClient) close() { c.l.Close() }

type rdlMutex struct {
	l       rueidislock.Locker
	name    string
	release context.CancelFunc // rueidislock's: releases the key before it returns
	cancel  context.CancelFunc // the runner's wait guard's context
}

// rueidisWait bounds one rueidislock wait. rueidislock (v1.0.79) gives
// each acquire script TryNextAfter (20 ms by default) and, when it times
// out client-side, deletes the key itself and waits for a client-side
// caching invalidation; with NoLoopTracking (its README's setting for one
// Redis) its own delete sends it none, and without a timeout it waits for
// ever on a free lock. Seen on a loaded 2-core machine: the uncontended
// scenario hung for 12 minutes in WithContext. The runner cancels such a
// wait after rueidisWait, calls WithContext again and counts it
// (RueidisRetries); no scenario here waits that long for a live holder.
const rueidisWait = 2 * time.Second

// rueidisRetries counts the waits cancelled after rueidisWait in this run.
var rueidisRetries atomic.Int64

// lock holds the lock as a context; unlock cancels it, which releases the
// key before it returns. The context has no deadline (a deadline would
// shorten rueidislock's lease); a timer cancels it if the acquisition has
// not returned within rueidisWait.
func (m *rdlMutex) lock(ctx context.Context) error {
	for {
		g := &rdlGuard{}
		var actx context.Context
		actx, g.cancel = context.WithCancel(ctx)
		timer := time.AfterFunc(rueidisWait, g.fire)
		_, release, err := m.l.WithContext(actx, m.name)
		stalled := g.done()
		timer.Stop()
		switch {
		case err == nil && !stalled:
			m.release, m.cancel = release, g.cancel
			return nil
		case err == nil: // acquired just as the timer cancelled it: give it back
			release()
		}
		g.cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !stalled {
			return err
		}
		rueidisRetries.Add(1)
	}
}

// rdlGuard cancels a rueidislock wait that has not returned in time.
type rdlGuard struct {
	mu       sync.Mutex
	returned bool
	stalled  bool
	cancel   context.CancelFunc
}

func (g *rdlGuard) fire() {
	g.mu.Lock()
	if !g.returned {
		g.stalled = true
		g.cancel()
	}
	g.mu.Unlock()
}

// done marks the wait returned and reports whether the guard fired first.
func (g *rdlGuard) done() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.returned = true
	return g.stalled
}

func (m *rdlMutex) unlock(context.Context) error {
	if m.release == nil {
		return errors.New("rueidislock: not held")
	}
	m.release()
	m.cancel()
	m.release, m.cancel = nil, nil
	return nil
}
