package faulttests

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/semaphore"
)

// The semaphores in the fault suite (issue 21, "How it is checked"): a
// semaphore name of a workload (LockSpec of kind SemFair or SemExpirable)
// gets a pool (Env.SemPool, set again after a restart without persistence,
// as an operator would), and its workers acquire 1..3 permits with the
// watchdog or an explicit lease (Acquire, TryAcquire with and without a
// wait), hold them a while (or let an explicit lease run out), and release
// them. Each acquisition is its own owner (semaphore.Fair and Expirable
// make a fresh owner id per acquisition): the join hook learns it from the
// acquisition script's arguments, through a ctx value (semAttempt), and
// records the fair semaphore's queue joins as it does the fair lock's. When
// a client dies, each of its holds (and each fair acquisition in flight) is
// read on the server a lease later (SemProbe): check (d).

// SemAPI is what the workload calls on a semaphore: the acquisitions that
// semaphore.Fair and semaphore.Expirable share.
type SemAPI interface {
	Acquire(ctx context.Context, n int, lease time.Duration) (*semaphore.Permit, error)
	TryAcquire(ctx context.Context, n int, wait, lease time.Duration) (*semaphore.Permit, error)
}

// semAttemptKey carries a *semAttempt in an acquisition's ctx, to the hook.
type semAttemptKey struct{}

// semAttempt is one semaphore acquisition of a client: its call, the owner
// id its script calls carried (fair) or its permit ids (expirable), and
// its Permit once granted.
type semAttempt struct {
	h     *Handle
	call  *Call
	lease time.Duration // as asked (0: the watchdog's)
	mu    sync.Mutex
	owner string
	p     *semaphore.Permit
	tr    *tracker // a scripted test's hold (Script.SemAcquire)
}

func (a *semAttempt) setOwner(o string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.owner == "" {
		a.owner = o
	}
}

// Owner is the acquisition's owner id ("" while unknown).
func (a *semAttempt) Owner() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.owner
}

// held is the granted Permit as a tracker sees it, nil before the grant.
func (a *semAttempt) held() *permitView {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.p == nil {
		return nil
	}
	return &permitView{a.p, a.owner}
}

// permitView is a Permit as a held hold (Owner from the attempt).
type permitView struct {
	p     *semaphore.Permit
	owner string
}

func (v *permitView) Done() <-chan struct{}             { return v.p.Done() }
func (v *permitView) Err() error                        { return v.p.Err() }
func (v *permitView) Owner() string                     { return v.owner }
func (v *permitView) ValidUntil() time.Time             { return v.p.ValidUntil() }
func (v *permitView) release(ctx context.Context) error { return v.p.Release(ctx) }

// adminRDB and adminClient: an unproxied client of the deployment (no
// fault hits it) that sets pools and reads dead holders' leases.
func (e *Env) adminClient() (*fairlock.Client, redis.UniversalClient) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.admin == nil {
		rdb := e.newRDB(nil)
		fc, err := fairlock.NewClient(rdb, fairlock.WithHeadGrace(HeadGrace), fairlock.WithLease(WatchdogLease))
		if err != nil {
			e.T.Fatal(err)
		}
		e.T.Cleanup(func() { _ = fc.Close(); _ = rdb.Close() })
		e.admin, e.adminRDB = fc, rdb
	}
	return e.admin, e.adminRDB
}

// semKind is the kind of name if it is one of the test's semaphores.
func (e *Env) semKind(name string) LockKind {
	e.H.mu.Lock()
	defer e.H.mu.Unlock()
	if k := e.H.Locks[name]; k.Semaphore() {
		return k
	}
	return ""
}

// SemPool makes id a semaphore of kind k with a pool of pool permits, set
// now and again after every restart (Env.restorePools).
func (e *Env) SemPool(id string, k LockKind, pool int) {
	name := e.LockName(id)
	admin, _ := e.adminClient()
	var set func(ctx context.Context) error
	switch k {
	case SemFair:
		f, err := semaphore.NewFair(admin, name)
		if err != nil {
			e.T.Fatal(err)
		}
		set = func(ctx context.Context) error { return f.SetPermits(ctx, pool) }
	case SemExpirable:
		x, err := semaphore.NewExpirable(admin, name)
		if err != nil {
			e.T.Fatal(err)
		}
		// only where it is gone: never add to a pool that is there
		set = func(ctx context.Context) error { _, err := x.TrySetPermits(ctx, pool); return err }
	default:
		e.T.Fatalf("SemPool: %s is not a semaphore kind", k)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := set(ctx); err != nil {
		e.T.Fatalf("setting the pool of %s: %v", name, err)
	}
	e.H.Update(func() { e.H.Locks[name], e.H.Pools[name] = k, pool })
	e.mu.Lock()
	e.pools[name] = set
	e.mu.Unlock()
}

// restorePools sets every pool again after a restart emptied the server
// (retrying while the server comes back).
func (e *Env) restorePools() {
	e.mu.Lock()
	sets := make(map[string]func(context.Context) error, len(e.pools))
	for n, f := range e.pools {
		sets[n] = f
	}
	e.mu.Unlock()
	for name, set := range sets {
		deadline := time.Now().Add(20 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			err := set(ctx)
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				e.T.Errorf("setting the pool of %s again after the restart: %v", name, err)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// semHandle makes c's handle on the semaphore name (its pool set first).
func (c *Client) semHandle(name string, k LockKind) *Handle {
	e := c.env
	e.H.mu.Lock()
	pool := e.H.Pools[name]
	e.H.mu.Unlock()
	if pool <= 0 {
		e.T.Fatalf("semaphore %s has no pool: call Env.SemPool first", name)
	}
	var s SemAPI
	var err error
	switch k {
	case SemFair:
		s, err = semaphore.NewFair(c.C, name)
	case SemExpirable:
		s, err = semaphore.NewExpirable(c.C, name)
	}
	if err != nil {
		e.T.Fatal(err)
	}
	return &Handle{Client: c, Lock: name, Kind: k, Sem: s, Pool: pool}
}

// semProcess is the join hook for a script call made by a semaphore
// acquisition (a in its ctx): a call of sem_fair_acquire.lua names the
// acquisition's owner (ARGV[2]); one that queued (ARGV[8] = 1) and replied
// {0, sleep} is a queue join.
func (hk joinHook) semProcess(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook, a *semAttempt) error {
	args := cmd.Args()
	if len(args) < 3 {
		return next(ctx, cmd)
	}
	sha, _ := wire.ScriptCall(cmd)
	hk.e.mu.Lock()
	ours := hk.e.semSHA[sha]
	hk.e.mu.Unlock()
	nk, _ := strconv.Atoi(fmt.Sprint(args[2]))
	if !ours || 3+nk+8 > len(args) {
		return next(ctx, cmd)
	}
	argv := args[3+nk:]
	a.setOwner(fmt.Sprint(argv[1]))
	start := hk.e.H.Now()
	err := next(ctx, cmd)
	end := hk.e.H.Now()
	if err != nil || fmt.Sprint(argv[7]) != "1" {
		return err
	}
	if c, ok := cmd.(*redis.Cmd); ok {
		if v, ok := c.Val().([]any); ok && len(v) == 2 && v[0] == int64(0) {
			hk.e.H.AddJoin(Join{Owner: a.Owner(), Lock: a.h.Lock, Start: start, End: end})
		}
	}
	return err
}

// semAsk is a random ask: 1 most often, the whole pool (at most 3) at times.
func semAsk(rng *rand.Rand, pool int) int {
	k := min(pool, 3)
	switch p := rng.Float64(); {
	case p < 0.5 || k == 1:
		return 1
	case p < 0.8 || k == 2:
		return 2
	default:
		return k
	}
}

// semOp is one semaphore operation of a worker: an acquisition and, when
// granted, a hold.
func (r *run) semOp(h *Handle, rng *rand.Rand) {
	n := semAsk(rng, h.Pool)
	lease := time.Duration(0)
	if rng.IntN(3) == 0 {
		lease = between(rng, ExplicitLeaseMin, ExplicitLeaseMax)
	}
	var a *semAttempt
	fs, isFair := h.Sem.(*semaphore.Fair)
	switch p := rng.Float64(); {
	case p < 0.4 && isFair && rng.IntN(2) == 0:
		// the fair semaphore's Acquire, asking for its queue position
		// (CheckPositions)
		a = r.semCall(h, "Acquire[position]", true, n, lease, rng, func(ctx context.Context) (*semaphore.Permit, error) {
			sa := ctx.Value(semAttemptKey{}).(*semAttempt)
			return fs.AcquireWith(ctx, n, semaphore.AcquireOptions{Wait: semaphore.Forever, Lease: lease, Position: r.positions(sa.call)})
		})
	case p < 0.4:
		a = r.semCall(h, "Acquire", true, n, lease, rng, func(ctx context.Context) (*semaphore.Permit, error) { return h.Sem.Acquire(ctx, n, lease) })
	case p < 0.55:
		a = r.semCall(h, "TryAcquire[wait 0]", false, n, lease, rng, func(ctx context.Context) (*semaphore.Permit, error) { return h.Sem.TryAcquire(ctx, n, 0, lease) })
	default:
		wait := between(rng, 300*time.Millisecond, 4*time.Second)
		a = r.semCall(h, "TryAcquire[wait "+wait.Round(time.Millisecond).String()+"]", true, n, lease, rng, func(ctx context.Context) (*semaphore.Permit, error) {
			return h.Sem.TryAcquire(ctx, n, wait, lease)
		})
	}
	if a != nil {
		r.semHold(h, a, rng)
	}
}

// semCall runs one acquisition as a recorded call; it returns the attempt
// when it was granted.
func (r *run) semCall(h *Handle, op string, wait bool, n int, lease time.Duration, rng *rand.Rand, f func(ctx context.Context) (*semaphore.Permit, error)) *semAttempt {
	ctx, cancel, ctxEnd := r.callCtx(rng)
	defer cancel()
	return r.e.semAcquire(ctx, h, op, wait, n, lease, ctxEnd, f)
}

// semAcquire records acquisition f of h (ctx ends ctxEnd after now).
func (e *Env) semAcquire(ctx context.Context, h *Handle, op string, wait bool, n int, lease, ctxEnd time.Duration, f func(ctx context.Context) (*semaphore.Permit, error)) *semAttempt {
	if lease > 0 {
		op += "[lease " + lease.Round(time.Millisecond).String() + "]"
	}
	c := e.H.BeginCall(Call{Client: h.Client.ID, Lock: h.Lock, Op: op, Wait: wait, Lease: lease, Permits: n, Start: e.H.Now(), CtxEnd: ctxEnd})
	a := &semAttempt{h: h, call: c, lease: lease}
	cl := h.Client
	cl.hmu.Lock()
	if cl.sems == nil {
		cl.sems = map[*semAttempt]bool{}
	}
	cl.sems[a] = true
	cl.hmu.Unlock()
	p, err := f(context.WithValue(ctx, semAttemptKey{}, a))
	if p != nil && h.Kind == SemExpirable {
		a.setOwner(strings.Join(p.IDs(), ","))
	}
	a.setOwner(fmt.Sprintf("sem-call-%d", c.ID)) // not seen: unique anyway
	a.mu.Lock()
	a.p = p
	a.mu.Unlock()
	e.H.Update(func() { c.Owner = a.owner })
	s, closed := errText(err)
	e.H.EndCall(c, p != nil && err == nil, s, closed)
	if p == nil || err != nil {
		cl.forget(a)
		return nil
	}
	return a
}

func (c *Client) forget(a *semAttempt) {
	c.hmu.Lock()
	delete(c.sems, a)
	c.hmu.Unlock()
}

// semHold holds a's permits: records the window, waits a random time (or
// lets an explicit lease run out), and releases them; a client that dies
// meanwhile abandons them.
func (r *run) semHold(h *Handle, a *semAttempt, rng *rand.Rand) {
	e := r.e
	v := a.held()
	tr := e.trackHeld(h, v, a.call, a.lease, Window{Permits: a.call.Permits, Token: v.p.Token()}, r.final, &r.watch)
	abandon := a.lease > 0 && rng.Float64() < 0.15
	until := time.Now().Add(between(rng, 0, r.w.MaxHold))
	if abandon {
		until = time.Now().Add(a.lease + 2*time.Second)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(until) {
		if h.Client.dead.Load() {
			return // died holding: no release
		}
		select {
		case <-v.Done():
			until = time.Now()
		case <-r.stop:
			until = time.Now()
		case <-tick.C:
		}
	}
	if abandon && tr.lost() {
		h.Client.forget(a)
		return // the watcher sees Done close
	}
	tr.unlocking()
	ctx, cancel, ctxEnd := r.callCtx(rng)
	defer cancel()
	c := e.H.BeginCall(Call{Client: h.Client.ID, Owner: v.owner, Lock: h.Lock, Op: "Release", Start: e.H.Now(), CtxEnd: ctxEnd})
	err := v.release(ctx)
	s, closed := errText(err)
	e.H.EndCall(c, false, s, closed)
	h.Client.forget(a)
}

// SemProbe is one read, on the server, of the lease of a hold whose client
// died while it held (or while its fair acquisition was in flight): check
// (d). LeaseEnd is the latest lease end of its permits on the server's
// clock (-1: none left: given back or reclaimed).
type SemProbe struct {
	Lock, Owner string
	Client      int
	Lease       time.Duration // the hold's lease (the watchdog's when renewed)
	Died        time.Duration // when its client died
	At          time.Duration // when the read's reply came
	ServerNow   int64         // the server's clock at the read, Unix ms
	LeaseEnd    int64         // Unix ms, -1: none
	// Again is a second read, made DeadSlack after LeaseEnd when that is
	// past the death + lease (a release's direct grant to the dead
	// client's queued request, made after the death): the lease end then
	// (-1: none), and the server's clock at it. AgainNow 0: not read.
	Again, AgainNow int64
	Err             string // the read failed (no evidence)
}

func (p SemProbe) String() string {
	again := ""
	if p.AgainNow != 0 {
		again = fmt.Sprintf(", read again: lease end %d, server now %d", p.Again, p.AgainNow)
	}
	return fmt.Sprintf("PROBE c%d %s on %s (died %s, lease %v) read at %s: lease end %d, server now %d%s %s",
		p.Client, short(p.Owner), p.Lock, ts(p.Died), p.Lease, ts(p.At), p.LeaseEnd, p.ServerNow, again, p.Err)
}

// probeScript reads the server's clock and the latest score of ARGV's
// members in KEYS[1] (the fair semaphore's leases, or the expirable's
// timeouts set).
var probeScript = redis.NewScript(`
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local best = -1
for _, m in ipairs(ARGV) do
    local s = redis.call('zscore', KEYS[1], m)
    if s then
        s = tonumber(s)
        if s > best then best = s end
    end
end
return {now, best}`)

// semDied schedules a probe of every hold (and fair acquisition in flight)
// of c, which died at died: a lease plus DeadSlack later, the hold's lease
// end is read on the server.
func (e *Env) semDied(c *Client, died time.Duration) {
	c.hmu.Lock()
	var as []*semAttempt
	for a := range c.sems {
		as = append(as, a)
	}
	c.hmu.Unlock()
	for _, a := range as {
		owner := a.Owner()
		v := a.held()
		var key string
		var members []any
		switch a.h.Kind {
		case SemFair:
			if owner == "" {
				continue // never sent: nothing to read
			}
			key, members = wire.SemFairKeysFor(a.h.Lock).Leases, []any{owner}
		case SemExpirable:
			if v == nil {
				continue // ids unknown before the grant returns
			}
			key = wire.SemKeysFor(a.h.Lock).Timeouts
			for _, id := range v.p.IDs() {
				raw, err := hex.DecodeString(id)
				if err != nil {
					e.T.Errorf("permit id %q: %v", id, err)
					continue
				}
				members = append(members, string(raw))
			}
		}
		lease := a.lease
		if lease == 0 {
			lease = WatchdogLease
		}
		e.probe(SemProbe{Lock: a.h.Lock, Owner: owner, Client: c.ID, Lease: lease, Died: died, LeaseEnd: -1}, key, members)
	}
}

// probe reads, pr.Lease + DeadSlack after pr.Died, the server's clock and
// the latest score of members in the zset key (a dead holder's lease end),
// and records it in pr.
func (e *Env) probe(pr SemProbe, key string, members []any) {
	_, rdb := e.adminClient()
	e.probes.Add(1)
	go func() {
		defer e.probes.Done()
		time.Sleep(pr.Died + pr.Lease + DeadSlack - e.H.Now())
		read := func() (now, end int64, err error) {
			deadline := time.Now().Add(30 * time.Second)
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				v, err := probeScript.Run(ctx, rdb, []string{key}, members...).Int64Slice()
				cancel()
				if err == nil && len(v) == 2 {
					return v[0], v[1], nil
				}
				if time.Now().After(deadline) {
					return 0, 0, fmt.Errorf("read failed: %v %v", err, v)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		now, end, err := read()
		pr.At = e.H.Now()
		if err != nil {
			pr.Err = err.Error()
		} else {
			pr.ServerNow, pr.LeaseEnd = now, end
			if died := now - (pr.At - pr.Died).Milliseconds(); end > died+(pr.Lease+DeadSlack).Milliseconds() {
				time.Sleep(time.Duration(end-now)*time.Millisecond + DeadSlack)
				if now, end, err := read(); err == nil {
					pr.AgainNow, pr.Again = now, end
				}
			}
		}
		e.H.Update(func() { e.H.Probes = append(e.H.Probes, pr) })
	}()
}

// expirableLeftover: after every client closed, no permit of an
// expirable semaphore may expire later than a lease from now.
func expirableLeftover(ctx context.Context, p *redis.Client, k string) string {
	now, err := p.Time(ctx).Result()
	if err != nil {
		return fmt.Sprintf("TIME: %v", err)
	}
	zs, err := p.ZRangeWithScores(ctx, k, 0, -1).Result()
	if err != nil {
		return fmt.Sprintf("%s: %v", k, err)
	}
	lim := now.Add(maxLease()).UnixMilli()
	for _, z := range zs {
		if int64(z.Score) > lim {
			return fmt.Sprintf("permit %x of %s expires at %d, more than a lease (%v) after every client closed", z.Member, k, int64(z.Score), maxLease())
		}
	}
	return ""
}

// semVacuity fails t when the workload's semaphores saw too little for
// the checks to mean anything: few holds, no two holds sharing the pool,
// no fair queue join (the hook blind to sem_fair_acquire.lua), and logs
// what the semaphore checks had to work on.
func semVacuity(t testing.TB, h *History, w Workload) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range w.Locks {
		if !l.Kind.Semaphore() {
			continue
		}
		name := ""
		for n := range h.Locks {
			if strings.HasSuffix(n, ":{"+l.ID+"}") {
				name = n
			}
		}
		var ws []*Window
		for _, x := range h.Windows {
			if x.Lock == name {
				ws = append(ws, x)
			}
		}
		shared, full := 0, 0
		for i, a := range ws {
			ae, _ := a.End()
			if a.Permits == h.Pools[name] {
				full++
			}
			for _, b := range ws[i+1:] {
				if be, _ := b.End(); a.Start < be && b.Start < ae {
					shared++
				}
			}
		}
		joins, waits, probes := 0, 0, 0
		for _, j := range h.Joins {
			if j.Lock == name {
				joins++
			}
		}
		for _, c := range h.Calls {
			if c.Lock == name && c.Wait {
				waits++
			}
		}
		for _, p := range h.Probes {
			if p.Lock == name {
				probes++
				if p.Err != "" {
					t.Logf("%s: a dead holder's lease could not be read (no evidence for check (d)): %s", name, p)
				}
			}
		}
		t.Logf("semaphore %s (%s, pool %d): %d holds (%d of the whole pool), %d pairs sharing it, %d waits, %d queue joins, %d dead holds probed",
			l.ID, l.Kind, h.Pools[name], len(ws), full, shared, waits, joins, probes)
		// a short run under failovers may see few holds; many holds of
		// part of the pool and none sharing it would mean the workload
		// lost its point (whole-pool holds never share: a loaded replay of
		// TestReplicaFailover had 24 holds, 10 of them of the whole pool,
		// and no pair sharing it)
		if len(ws) < 5 || len(ws)-full >= 20 && shared == 0 {
			t.Errorf("semaphore %s: %d holds, %d pairs sharing the pool: the capacity check proves nothing", l.ID, len(ws), shared)
		}
		if l.Kind == SemFair && waits > 20 && joins == 0 {
			t.Errorf("semaphore %s: %d waits but the join hook saw no queue join: the order check is blind", l.ID, waits)
		}
	}
}
