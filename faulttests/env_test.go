package faulttests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/faultproxy"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/reentrant"
)

// Locker is what the workload calls on a lock handle: the public API that
// reentrant.Mutex and fair.Mutex share.
type Locker interface {
	Lock(ctx context.Context) error
	LockWithLease(ctx context.Context, lease time.Duration) error
	TryLock(ctx context.Context) (bool, error)
	TryLockFor(ctx context.Context, wait, lease time.Duration) (bool, error)
	Unlock(ctx context.Context) error
	ForceUnlock(ctx context.Context) (bool, error)
	Done() <-chan struct{}
	Err() error
	Owner() string
	HoldCount(ctx context.Context) (int, error)
}

// validUntiler is the coming ValidUntil method, used when the lock types
// have it.
type validUntiler interface{ ValidUntil() time.Time }

// Dialer is a go-redis dialer.
type Dialer = func(ctx context.Context, network, addr string) (net.Conn, error)

// Env is a Redis deployment for one test, the clients of the test (each
// behind its own proxies), and the history they write.
type Env struct {
	T   testing.TB
	H   *History
	Tag string // in every key and channel of the test's locks

	// Server is the single server, when the deployment is one.
	Server    *redistest.Server
	Cluster   *redistest.Cluster
	Sentinels *redistest.Sentinels

	// newRDB makes a client's go-redis client over dial.
	newRDB func(dial Dialer) redis.UniversalClient
	// primaries lists direct (unproxied) clients to every primary.
	primaries func() []*redis.Client

	mu       sync.Mutex
	clients  []*Client
	owners   map[string]*Handle
	joinSHA  map[string]bool
	leaveSHA map[string]bool // the fair give-up scripts' SHAs
	// sentinelEvents are what the Sentinels published (NewReplicated):
	// failovers the run did not fire are faults too (sentinel_test.go)
	sentinelEvents []sentinelEvent
	semSHA         map[string]bool // sem_fair_acquire.lua's (and broken variants') SHAs
	seatsSHA       map[string]bool // seats_acquire.lua's (and broken variants') SHAs
	admin          *fairlock.Client
	adminRDB       redis.UniversalClient
	pools          map[string]func(context.Context) error // sets each semaphore's pool again
	probes         sync.WaitGroup                         // dead holders' lease reads in flight

	resMu    sync.Mutex
	resource map[string]int // the protected counter of each lock
}

// Client is one fairlock.Client of a test, with its network.
type Client struct {
	ID     int
	Net    *faultproxy.Group
	RDB    redis.UniversalClient
	C      *fairlock.Client
	dead   atomic.Bool
	closed atomic.Bool
	env    *Env
	clock  *core.SkewedClock // the client's wall clock (Skew)

	hmu     sync.Mutex
	handles []*Handle
	sems    map[*semAttempt]bool   // semaphore acquisitions in a call or held (sem_test.go)
	seats   map[*seatsAttempt]bool // seats acquisitions in a call or held (seats_test.go)
}

// Live reports that the client neither died nor was closed.
func (c *Client) Live() bool { return !c.dead.Load() && !c.closed.Load() }

// Handle is one lock handle (one owner) of a client, or a semaphore
// handle (Sem set, L nil: each acquisition is its own owner).
type Handle struct {
	Client *Client
	Lock   string
	Kind   LockKind
	L      Locker
	Sem    SemAPI // a semaphore's handle (sem_test.go)
	Pool   int    // the semaphore's pool
	// SeatNames are a venue's seats (Kind SeatsVenue, seats_test.go)
	SeatNames []string
}

func newEnv(t testing.TB) *Env {
	var b [4]byte
	_, _ = rand.Read(b[:])
	e := &Env{T: t, H: NewHistory(), Tag: "flt" + hex.EncodeToString(b[:]), owners: map[string]*Handle{}, resource: map[string]int{}}
	e.semSHA = map[string]bool{wire.SemFairDefault().Script(wire.FileSemFairAcquire).Hash(): true}
	e.seatsSHA = map[string]bool{wire.SeatsDefault().Script(wire.FileSeatsAcquire).Hash(): true}
	e.pools = map[string]func(context.Context) error{}
	e.joinSHA = map[string]bool{
		wire.Default().Script(wire.FileFairTryLockWait).Hash():             true,
		wire.ScalableDefault().Script(wire.FileScalableTryLockWait).Hash(): true,
	}
	e.leaveSHA = map[string]bool{
		wire.Default().Script(wire.FileFairAcquireFailed).Hash():             true,
		wire.ScalableDefault().Script(wire.FileScalableAcquireFailed).Hash(): true,
	}
	return e
}

func clientOptions(o *redis.Options, dial Dialer) {
	o.Dialer = dial
	o.ReadTimeout = ReadTimeout
	o.WriteTimeout = ReadTimeout
}

// NewSingle starts a private redis-server for t.
func NewSingle(t testing.TB) *Env {
	e := newEnv(t)
	e.Server = redistest.StartWithT(t)
	admin := redis.NewClient(&redis.Options{Addr: e.Server.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	e.primaries = func() []*redis.Client { return []*redis.Client{admin} }
	e.newRDB = func(dial Dialer) redis.UniversalClient {
		o := &redis.Options{Addr: e.Server.Addr}
		clientOptions(o, dial)
		return redis.NewClient(o)
	}
	return e
}

// NewCluster starts a private Redis Cluster (3 primaries, 3 replicas).
func NewCluster(t testing.TB) *Env {
	e := newEnv(t)
	e.Cluster = redistest.ClusterT(t)
	e.primaries = func() []*redis.Client {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		addrs, _ := e.Cluster.Primaries(ctx)
		var out []*redis.Client
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			t.Cleanup(func() { _ = c.Close() })
			out = append(out, c)
		}
		return out
	}
	e.newRDB = func(dial Dialer) redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: e.Cluster.Addrs(), Dialer: dial, ReadTimeout: ReadTimeout, WriteTimeout: ReadTimeout})
	}
	return e
}

// NewReplicated starts a primary with one replica (and Sentinels, which
// promote the replica when the primary dies).
func NewReplicated(t testing.TB) *Env {
	e := newEnv(t)
	e.Sentinels = redistest.SentinelsT(t)
	e.watchSentinels()
	e.primaries = func() []*redis.Client {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a, err := e.Sentinels.MasterAddr(ctx)
		if err != nil {
			return nil
		}
		c := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { _ = c.Close() })
		return []*redis.Client{c}
	}
	e.newRDB = func(dial Dialer) redis.UniversalClient {
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.MasterName, SentinelAddrs: e.Sentinels.SentinelAddrs(),
			Dialer: dial, ReadTimeout: ReadTimeout, WriteTimeout: ReadTimeout})
	}
	return e
}

// LockName is the name of the test's lock id.
func (e *Env) LockName(id string) string { return e.Tag + ":{" + id + "}" }

// NewClient makes a client behind its own proxies.
func (e *Env) NewClient(opts ...fairlock.Option) *Client {
	e.mu.Lock()
	id := len(e.clients)
	e.mu.Unlock()
	g := faultproxy.StartGroup(e.T)
	rdb := e.newRDB(g.Dialer)
	rdb.AddHook(joinHook{e})
	clock := new(core.SkewedClock) // Skew shifts it
	base := []fairlock.Option{
		core.WithWallClock(clock.UnixMilli),
		fairlock.WithLease(WatchdogLease), fairlock.WithHeadGrace(HeadGrace), fairlock.WithWaitSlot(WaitSlot),
		fairlock.WithCleanupTimeout(CleanupTime), fairlock.WithLatchTTL(LatchTTL),
	}
	fc, err := fairlock.NewClient(rdb, append(base, opts...)...)
	if err != nil {
		e.T.Fatal(err)
	}
	c := &Client{ID: id, Net: g, RDB: rdb, C: fc, env: e, clock: clock}
	e.T.Cleanup(func() { _ = fc.Close(); _ = rdb.Close() })
	e.mu.Lock()
	e.clients = append(e.clients, c)
	e.mu.Unlock()
	return c
}

// Clients lists the clients made so far.
func (e *Env) Clients() []*Client {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*Client(nil), e.clients...)
}

// Handle makes a handle of c on the lock id of kind k.
func (c *Client) Handle(id string, k LockKind) *Handle {
	e := c.env
	name := e.LockName(id)
	if k.Semaphore() {
		return c.semHandle(name, k)
	}
	if k == SeatsVenue {
		return c.seatsHandle(id)
	}
	var l Locker
	var err error
	switch k {
	case Reentrant:
		l, err = reentrant.New(c.C, name)
	case FairRedisson:
		l, err = fair.New(c.C, name, fair.WithEngine(fair.Redisson))
	case FairScalable:
		l, err = fair.New(c.C, name, fair.WithEngine(fair.Scalable))
	}
	if err != nil {
		e.T.Fatal(err)
	}
	h := &Handle{Client: c, Lock: name, Kind: k, L: l}
	c.hmu.Lock()
	c.handles = append(c.handles, h)
	c.hmu.Unlock()
	e.H.Update(func() { e.H.Locks[name] = k })
	e.mu.Lock()
	e.owners[l.Owner()] = h
	e.mu.Unlock()
	return h
}

// joinHook records, for every fair try-lock-wait script call that replied
// "queued" (a number, not OK), which owner it was for and when it was sent
// and answered. It is how the suite learns the join order: the scripts are
// atomic, so a call answered before another was sent ran first in Redis.
type joinHook struct{ e *Env }

func (joinHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (joinHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (hk joinHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		sha, isScript := wire.ScriptCall(cmd)
		if !isScript {
			return next(ctx, cmd)
		}
		if a, ok := ctx.Value(semAttemptKey{}).(*semAttempt); ok {
			return hk.semProcess(ctx, cmd, next, a)
		}
		if a, ok := ctx.Value(seatsAttemptKey{}).(*seatsAttempt); ok {
			return hk.seatsProcess(ctx, cmd, next, a)
		}
		args := cmd.Args()
		if len(args) < 3 {
			return next(ctx, cmd)
		}
		join, leave := hk.e.joinSHA[sha], hk.e.leaveSHA[sha]
		if !join && !leave {
			return next(ctx, cmd)
		}
		nk, _ := strconv.Atoi(fmt.Sprint(args[2]))
		if 3+nk > len(args) {
			return next(ctx, cmd)
		}
		hk.e.mu.Lock()
		var owner *Handle
		for _, a := range args[3+nk:] {
			if h, ok := hk.e.owners[fmt.Sprint(a)]; ok {
				owner = h
				break
			}
		}
		hk.e.mu.Unlock()
		start := hk.e.H.Now()
		err := next(ctx, cmd)
		end := hk.e.H.Now()
		if owner == nil || wire.NotRun(err) {
			return err
		}
		if leave || err != nil {
			n := ScriptNote{Owner: owner.L.Owner(), Lock: owner.Lock, What: "try", Start: start, End: end}
			if leave {
				n.What = "give-up"
			}
			if err != nil && err != redis.Nil {
				n.Err = err.Error()
			}
			hk.e.H.AddScript(n)
			return err
		}
		c, ok := cmd.(*redis.Cmd)
		if !ok {
			return err
		}
		if _, isNum := c.Val().(int64); !isNum {
			return err
		}
		hk.e.H.AddJoin(Join{Owner: owner.L.Owner(), Lock: owner.Lock, Start: start, End: end})
		return err
	}
}

// Close closes client c, recording the call and, right after it returned,
// every handle's Done and Err (so the Close check does not depend on how
// soon a watcher goroutine runs).
func (c *Client) Close() {
	h := c.env.H
	c.closed.Store(true)
	start := h.Now()
	_ = c.C.Close()
	end := h.Now()
	c.hmu.Lock()
	states := make(map[string]HandleState, len(c.handles))
	for _, hd := range c.handles {
		st := HandleState{}
		select {
		case <-hd.L.Done():
			st.DoneClosed = true
		default:
		}
		st.Err, st.ErrClosed = errText(hd.L.Err())
		states[hd.L.Owner()] = st
	}
	for a := range c.seats {
		if v := a.held(); v != nil {
			st := HandleState{}
			select {
			case <-v.Done():
				st.DoneClosed = true
			default:
			}
			st.Err, st.ErrClosed = errText(v.Err())
			states[v.Owner()] = st
		}
	}
	for a := range c.sems {
		if v := a.held(); v != nil {
			st := HandleState{}
			select {
			case <-v.Done():
				st.DoneClosed = true
			default:
			}
			st.Err, st.ErrClosed = errText(v.Err())
			states[v.Owner()] = st
		}
	}
	c.hmu.Unlock()
	h.AddClose(CloseEvent{Client: c.ID, Start: start, End: end, Handles: states})
}

// CheckLeftovers looks, after every client was closed, for keys and
// subscriptions of the test's locks left behind: a lock hash must expire
// within the longest lease, a latch within its TTL, a queue may keep only
// waiters of clients that died, and no channel may stay subscribed.
func (e *Env) CheckLeftovers() []Violation {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	at := e.H.Now()
	// A queue entry may stay behind only for a client that could not
	// clean up: it died, or a fault (its own or the server's) hid the
	// outcome of one of its calls (a join held back and delivered after
	// its give-up). Such an entry lives until it is pruned at its
	// deadline, as docs/design.md says of a crashed waiter.
	deadOwner := func(owner string) bool {
		for _, c := range e.Clients() {
			if !strings.HasPrefix(owner, c.C.ID()+":") {
				continue
			}
			if c.dead.Load() {
				return true
			}
			e.H.mu.Lock()
			defer e.H.mu.Unlock()
			for _, f := range e.H.Faults {
				if f.Client == c.ID || f.Kind.global() {
					return true
				}
			}
			return false
		}
		return false
	}
	var vs []Violation
	bad := func(format string, a ...any) {
		vs = append(vs, Violation{"leftover", "", at, fmt.Sprintf(format, a...)})
	}
	prims := e.primaries()
	for _, p := range prims {
		var keys []string
		iter := p.Scan(ctx, 0, "*"+e.Tag+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			bad("SCAN on %s: %v", p.Options().Addr, err)
			continue
		}
		sort.Strings(keys)
		for _, k := range keys {
			pttl, _ := p.PTTL(ctx, k).Result()
			if pttl == -2 { // expired between SCAN and PTTL: gone
				continue
			}
			// pttl 0: in its last millisecond (a latch written just
			// LatchTTL ago), not a key without expiry (-1)
			var owners []string
			switch {
			case strings.HasPrefix(k, "fairlock_grace:"):
				// the head grace: the head's owner id, PTTL = grace left
				// plus a 60 s margin (lua/fair_common.lua)
				if pttl < 0 || pttl > HeadGrace+60*time.Second {
					bad("grace key %s has TTL %v (want at most %v)", k, pttl, HeadGrace+60*time.Second)
				}
				continue
			case strings.HasPrefix(k, "redisson_unlock_latch:") || strings.HasPrefix(k, "fairlock_acquire_latch:"):
				if pttl < 0 || pttl > LatchTTL {
					bad("latch %s has TTL %v (want at most %v)", k, pttl, LatchTTL)
				}
				continue
			case strings.HasPrefix(k, "redisson_lock_token:"):
				// the fencing token counter (fenced and fair locks): kept
				// for ever by design (docs/design.md, "Fencing tokens")
				if _, err := p.Get(ctx, k).Int64(); err != nil || pttl != -1 {
					bad("token key %s: TTL %v, %v (want an integer without expiry)", k, pttl, err)
				}
				continue
			case strings.HasPrefix(k, "fairlock_sem_acquire_latch:") || strings.HasPrefix(k, "fairlock_sem_release_latch:"):
				if pttl < 0 || pttl > LatchTTL {
					bad("latch %s has TTL %v (want at most %v)", k, pttl, LatchTTL)
				}
				continue
			case strings.HasPrefix(k, "fairlock_sem_grace:"):
				if pttl < 0 || pttl > HeadGrace+60*time.Second {
					bad("grace key %s has TTL %v (want at most %v)", k, pttl, HeadGrace+60*time.Second)
				}
				continue
			case strings.HasPrefix(k, "fairlock_sem_permits:") || strings.HasPrefix(k, "fairlock_sem_token:") || e.semKind(k) == SemExpirable:
				// a semaphore's pool and token counter: kept for ever by
				// design (docs/design.md, the semaphores)
				if _, err := p.Get(ctx, k).Int64(); err != nil || pttl != -1 {
					bad("semaphore key %s: TTL %v, %v (want an integer without expiry)", k, pttl, err)
				}
				continue
			case strings.HasPrefix(k, "fairlock_sem:") || strings.HasPrefix(k, "fairlock_sem_wants:"):
				// holders (owner -> permits) and asks (queued owner -> permits)
				owners, _ = p.HKeys(ctx, k).Result()
			case strings.HasPrefix(k, "fairlock_sem_lease:"):
				owners, _ = p.ZRange(ctx, k, 0, -1).Result()
			case strings.HasPrefix(k, "fairlock_sem_queue:"):
				fs, _ := p.HKeys(ctx, k).Result()
				for _, f := range fs {
					if o, ok := strings.CutPrefix(f, "n:"); ok {
						owners = append(owners, o)
					}
				}
			case strings.HasSuffix(k, ":timeout") && e.semKind(strings.TrimSuffix(k, ":timeout")) == SemExpirable:
				// an expirable semaphore's permits (raw ids -> expiry, the
				// server's Unix ms): none may outlive a lease from now
				if msg := expirableLeftover(ctx, p, k); msg != "" {
					bad("%s", msg)
				}
				continue
			case strings.HasPrefix(k, "fairlock_seats_acquire_latch:") || strings.HasPrefix(k, "fairlock_seats_release_latch:"):
				if pttl < 0 || pttl > LatchTTL {
					bad("latch %s has TTL %v (want at most %v)", k, pttl, LatchTTL)
				}
				continue
			case strings.HasPrefix(k, "fairlock_seats_token:"):
				// a venue's token counter: kept for ever by design
				if _, err := p.Get(ctx, k).Int64(); err != nil || pttl != -1 {
					bad("token key %s: TTL %v, %v (want an integer without expiry)", k, pttl, err)
				}
				continue
			case strings.HasPrefix(k, "fairlock_seats"):
				// a venue's holds, leases, seats, requests, queues, graces
				// (no TTL): only owners of clients that could not clean up
				var ok bool
				if owners, ok = seatsLeftover(ctx, p, k); !ok {
					bad("unknown seats key %s", k)
					continue
				}
			case strings.HasPrefix(k, "fairlock_notes:"):
				// the Redisson engine's handoff notes (owner -> note): an
				// entry leaves with its waiter, and the hash expires 60 s
				// past its latest waiter's deadline (lua/queue_redisson.lua)
				if pttl < 0 {
					bad("notes key %s has no TTL", k)
				}
				owners, _ = p.HKeys(ctx, k).Result()
			case strings.HasPrefix(k, "redisson_lock_queue:"):
				owners, _ = p.LRange(ctx, k, 0, -1).Result()
			case strings.HasPrefix(k, "redisson_lock_timeout:"):
				owners, _ = p.ZRange(ctx, k, 0, -1).Result()
			case strings.HasPrefix(k, "fairlock_squeue:"):
				fs, _ := p.HKeys(ctx, k).Result()
				for _, f := range fs {
					if o, ok := strings.CutPrefix(f, "n:"); ok {
						owners = append(owners, o)
					}
				}
			default:
				if pttl < 0 || pttl > maxLease() {
					bad("key %s has TTL %v (a lock must expire within %v)", k, pttl, maxLease())
				}
				continue
			}
			for _, o := range owners {
				if !deadOwner(o) {
					bad("queue %s still holds %s, a waiter of a client that neither died nor had a fault", k, short(o))
				}
			}
		}
	}
	// subscriptions
	deadline := time.Now().Add(LeftoverWait)
	for {
		var chans []string
		for _, p := range prims {
			a, _ := p.PubSubChannels(ctx, "*"+e.Tag+"*").Result()
			b, _ := p.PubSubShardChannels(ctx, "*"+e.Tag+"*").Result()
			chans = append(chans, a...)
			chans = append(chans, b...)
		}
		if len(chans) == 0 {
			break
		}
		if time.Now().After(deadline) {
			bad("channels still subscribed %v after every client closed: %v", LeftoverWait, chans)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return vs
}

// read and write the protected resource
func (e *Env) readResource(lock string) int {
	e.resMu.Lock()
	defer e.resMu.Unlock()
	return e.resource[lock]
}

func (e *Env) writeResource(lock string, v int) {
	e.resMu.Lock()
	defer e.resMu.Unlock()
	e.resource[lock] = v
}
