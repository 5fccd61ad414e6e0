package runner

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/semaphore"
)

// The semaphore scenario (issue 21's benchmark requirement) compares the
// fair semaphore (semaphore.Fair, a pool of 1 permit) with the fair lock,
// each engine, in one run: the uncontended cycle, the handoff to the queue's
// head, and the Redis work per grant as the queue grows. Its participants,
// by report name:
const (
	SemLockRedisson = "fair.Mutex, Redisson engine"
	SemLockScalable = "fair.Mutex, scalable engine"
	SemFairPool1    = "semaphore.Fair, pool of 1"
)

// semLibs are the semaphore scenario's participants, in report order. Their
// clients are built by env.goredis with default go-redis options (the
// scenario's env is plain).
func semLibs() []Lib {
	return []Lib{
		{Name: SemLockRedisson, Queue: true, Wakeup: "pub/sub per waiter, shared connection",
			Config: "fair.New(client, name); defaults (Redisson engine, 30 s watchdog lease)",
			open:   openFairlock(true), queued: redissonQueued},
		{Name: SemLockScalable, Queue: true, Wakeup: "pub/sub per waiter, shared connection",
			Config: "fair.New(client, name, fair.WithEngine(fair.Scalable)); defaults otherwise",
			open:   openFairlockEngine(fair.Scalable), queued: scalableQueued},
		{Name: SemFairPool1, Queue: true, Wakeup: "pub/sub per waiter, shared connection",
			Config: "semaphore.NewFair(client, name), SetPermits(1) once; Acquire(ctx, 1, 0) (watchdog lease) and Permit.Release(ctx)",
			open:   openSemFair, queued: semQueued},
	}
}

// ---- semaphore.Fair as a mutex: a pool of 1 permit

type semClient struct {
	rdb *redis.Client
	c   *fairlock.Client
	e   *env
	mu  sync.Mutex
	set map[string]bool // pools this client has set
}

func openSemFair(e *env) (client, error) {
	rdb := e.goredis()
	c, err := fairlock.NewClient(rdb)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return &semClient{rdb: rdb, c: c, e: e, set: map[string]bool{}}, nil
}

// mutex returns a handle on the semaphore called name, whose pool it sets
// to 1 the first time this client sees the name (before any measurement:
// handles are made before a scenario's clock starts).
func (c *semClient) mutex(name string) (mutex, error) {
	f, err := semaphore.NewFair(c.c, c.e.prefix+name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.set[name] {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := f.SetPermits(ctx, 1); err != nil {
			return nil, fmt.Errorf("SetPermits: %w", err)
		}
		c.set[name] = true
	}
	return &semMutex{f: f}, nil
}

func (c *semClient) close() { _ = c.c.Close(); _ = c.rdb.Close() }

// semMutex is one goroutine's use of the semaphore: Acquire(ctx, 1, 0),
// then Release of the Permit it got.
type semMutex struct {
	f *semaphore.Fair
	p *semaphore.Permit
}

func (m *semMutex) lock(ctx context.Context) error {
	p, err := m.f.Acquire(ctx, 1, 0)
	if err != nil {
		return err
	}
	m.p = p
	return nil
}

func (m *semMutex) unlock(ctx context.Context) error {
	if m.p == nil {
		return fmt.Errorf("semaphore: release without a permit")
	}
	err := m.p.Release(ctx)
	m.p = nil
	return err
}

// semQueued counts the waiters of the fair semaphore's queue, the scalable
// engine's hash (hashQueueLen).
func semQueued(ctx context.Context, admin *redis.Client, name string) (int64, error) {
	return hashQueueLen(ctx, admin, wire.SemFairKeysFor(name).Queue)
}

// ---- results

// semResults are the semaphore scenario's figures.
type semResults struct {
	libs    []Lib
	unc     map[semUncKey]*latRow
	handoff map[sizeKey]*contRow // k waiters
	work    map[sizeKey]*workRow // queue of n waiters
	load    summary              // the 1-minute load average (/proc/loadavg) at each round's start and end
}

type semUncKey struct {
	lib    string
	canEnd bool
}

// workRow is the Redis work of one drain of n waiters, per grant.
type workRow struct {
	cpuNet, cmdUsec, scriptUsec, redisCmds, rtt, perGrant, enqueue summary
	perCmd                                                         map[string]*summary
	violations, errors                                             int
	firstErr                                                       string
}

func (r *Results) sem() *semResults {
	if r.Sem == nil {
		r.Sem = &semResults{libs: semLibs(), unc: map[semUncKey]*latRow{}, handoff: map[sizeKey]*contRow{}, work: map[sizeKey]*workRow{}}
	}
	return r.Sem
}

// runSemaphore is one round of the semaphore scenario: the uncontended
// rotation, the handoffs with k waiters, and the drains of each size.
func (r *Results) runSemaphore(ctx context.Context, e *env, t *target, round int) {
	pe := *e
	pe.plain = true
	s := r.sem()
	s.load.add(loadAvg())
	r.semUncontended(ctx, &pe, t, round)
	r.semHandoff(ctx, &pe, round)
	r.semWork(ctx, &pe, t, round)
	s.load.add(loadAvg())
}

// loadAvg is the machine's 1-minute load average (NaN when unknown).
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return math.NaN()
	}
	f, err := strconv.ParseFloat(strings.Fields(string(b) + " x")[0], 64)
	if err != nil {
		return math.NaN()
	}
	return f
}

// semUncontended: one goroutine per participant, Acquire(1)+Release or
// Lock+Unlock on a name of its own, in the uncontended rotation (warm-up,
// then chunks of 50 cycles round-robin). Each participant runs twice: with
// a context that can end (a context.WithCancel, as a request's context: on
// a client with default options fairlock runs each Redis call on a
// goroutine of its own then) and with one that cannot
// (context.WithoutCancel: the call runs inline).
func (r *Results) semUncontended(ctx context.Context, e *env, t *target, round int) {
	s := r.sem()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	still := context.WithoutCancel(ctx)
	var cs []*cycler
	defer func() {
		for _, c := range cs {
			c.close()
		}
	}()
	keys := map[*cycler]semUncKey{}
	for i, lib := range s.libs {
		for _, canEnd := range []bool{true, false} {
			c, err := lib.open(e)
			if err != nil {
				r.fail(ScSemaphore, lib.Name, err)
				continue
			}
			m, err := c.mutex(fmt.Sprintf("sem:unc:%d:%d:%t", round, i, canEnd))
			if err != nil {
				c.close()
				r.fail(ScSemaphore, lib.Name, err)
				continue
			}
			cy := &cycler{name: lib.Name, canEnd: canEnd, close: c.close,
				cycle: func(ctx context.Context) error {
					if err := m.lock(ctx); err != nil {
						return err
					}
					return m.unlock(ctx)
				}}
			cs = append(cs, cy)
			keys[cy] = semUncKey{lib.Name, canEnd}
		}
	}
	ctxOf := func(c *cycler) context.Context {
		if c.canEnd {
			return cctx
		}
		return still
	}
	failed := map[*cycler]bool{}
	fail := func(c *cycler, err error) {
		failed[c] = true
		r.fail(ScSemaphore, "uncontended "+c.name, err)
	}
	rotateCyclers(ctx, e, cs, r.P.semWarmup, r.P.semCycles, ctxOf, failed, fail)
	for _, c := range cs {
		if failed[c] || len(c.lat) == 0 {
			continue
		}
		ur := row(s.unc, keys[c])
		n := float64(len(c.lat))
		ur.med.add(durPercentile(c.lat, 50))
		ur.p99.add(durPercentile(c.lat, 99))
		ur.allocs.add(float64(c.allocs) / n)
		ur.rtt.add(float64(c.cmds) / n)
		st, err := serverTime(ctx, t, e, min(r.P.semCycles, 200), func() error { return c.cycle(ctxOf(c)) })
		if err != nil {
			fail(c, err)
			continue
		}
		ur.server.add(st)
	}
}

// semHandoff: k+1 goroutines (over up to 4 clients) cycle on one lock or
// one pool of 1, each queueing again at the tail after its release, so k
// waiters are queued at every release; the participants take turns of
// semHandoffN/semChunks grants (fresh clients each turn, the first k+1
// grants of a turn left out), the first rotating. Waits get a context with
// a deadline, as in scenario 2.
func (r *Results) semHandoff(ctx context.Context, e *env, round int) {
	s := r.sem()
	per := max(r.P.semHandoffN/r.P.semChunks, 1)
	for _, k := range r.P.semK {
		merged := map[string]*contendResult{}
		failed := map[string]bool{}
		for pass := range r.P.semChunks {
			for i := range s.libs {
				li := (i + pass + round) % len(s.libs)
				lib := s.libs[li]
				if failed[lib.Name] || ctx.Err() != nil {
					continue
				}
				res, err := contend(ctx, e, lib, contendSpec{
					lock:       fmt.Sprintf("sem:handoff:%d:%d:%d:%d", round, k, li, pass),
					goroutines: k + 1, clients: min(4, k+1),
					grants: per + k + 1, warmGrants: k + 1, limit: 60 * time.Second}, nil)
				if err == nil && res.firstErr != nil {
					err = res.firstErr
				}
				if err != nil {
					r.fail(ScSemaphore, fmt.Sprintf("handoff %s k=%d", lib.Name, k), err)
					failed[lib.Name] = true
					continue
				}
				if m := merged[lib.Name]; m != nil {
					m.merge(res)
				} else {
					merged[lib.Name] = &res
				}
			}
		}
		for _, lib := range s.libs {
			if m := merged[lib.Name]; m != nil && !failed[lib.Name] {
				row(s.handoff, sizeKey{lib.Name, k}).add(*m)
			}
		}
	}
}

// semWork: for every queue size n and participant (the first rotating), n
// real waiters (a goroutine each, over 4 clients) queue behind a holder and
// settle; then the holder releases and each waiter is granted once and
// releases at once. From the holder's release to the last release, Redis's
// CPU (INFO cpu), its commands (INFO commandstats calls, the commands run
// inside scripts included) and its command time (commandstats usec of the
// command types the clients sent; a script's inner calls are inside its
// time) are counted, net of the idle rate measured just before, and
// divided by n grants.
func (r *Results) semWork(ctx context.Context, e *env, t *target, round int) {
	s := r.sem()
	for si, n := range r.P.semSizes {
		for i := range s.libs {
			lib := s.libs[(i+si+round)%len(s.libs)]
			wr := row(s.work, sizeKey{lib.Name, n})
			if err := r.workOne(ctx, e, t, lib, n, round, wr); err != nil {
				wr.errors++
				if wr.firstErr == "" {
					wr.firstErr = err.Error()
				}
				r.fail(ScSemaphore, fmt.Sprintf("work %s n=%d", lib.Name, n), err)
			}
		}
	}
}

func (r *Results) workOne(ctx context.Context, e *env, t *target, lib Lib, n, round int, wr *workRow) error {
	const nClients = 4
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	clients := make([]client, 0, nClients)
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()
	for range nClients {
		c, err := lib.open(e)
		if err != nil {
			return err
		}
		clients = append(clients, c)
	}
	name := "sem:work:" + strconv.Itoa(n) + ":" + strconv.Itoa(round)
	for _, c := range clients { // connections, scripts
		m, err := c.mutex(name + ":warm")
		if err != nil {
			return err
		}
		if err := m.lock(ctx); err != nil {
			return err
		}
		if err := m.unlock(ctx); err != nil {
			return err
		}
	}
	idle0, err := serverUsage(ctx, t.admin)
	if err != nil {
		return err
	}
	time.Sleep(r.P.semIdle)
	idle1, err := serverUsage(ctx, t.admin)
	if err != nil {
		return err
	}
	idleDur := idle1.at.Sub(idle0.at).Seconds()
	idleRate := (idle1.cpu - idle0.cpu) / idleDur
	idleCmds := statsDelta(idle0.cmds, idle1.cmds)

	holder, err := clients[0].mutex(name)
	if err != nil {
		return err
	}
	if err := holder.lock(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	var holders, viol, lastEnd atomic.Int64
	errs := make(chan error, n)
	base := time.Now()
	mus := make([]mutex, n)
	for i := range mus {
		if mus[i], err = clients[i%nClients].mutex(name); err != nil {
			return err
		}
	}
	t0 := time.Now()
	for _, m := range mus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.lock(ctx); err != nil {
				errs <- err
				return
			}
			if holders.Add(1) != 1 {
				viol.Add(1)
			}
			holders.Add(-1)
			err := m.unlock(context.WithoutCancel(ctx))
			lastEnd.Store(int64(time.Since(base)))
			if err != nil {
				errs <- err
			}
		}()
	}
	for {
		q, err := lib.queued(ctx, t.admin, e.prefix+name)
		if err != nil {
			return err
		}
		if q >= int64(n) {
			break
		}
		select {
		case err := <-errs:
			return err
		case <-time.After(2 * time.Millisecond):
		}
	}
	enqueue := time.Since(t0)
	time.Sleep(r.P.semSettle)
	u0, err := serverUsage(ctx, t.admin)
	if err != nil {
		return err
	}
	e.cmds.startNames()
	c0 := e.cmds.n.Load()
	start := int64(time.Since(base))
	if err := holder.unlock(ctx); err != nil {
		_ = e.cmds.stopNames()
		return err
	}
	wg.Wait()
	u1, err := serverUsage(ctx, t.admin)
	sent := e.cmds.stopNames()
	if err != nil {
		return err
	}
	cmds := e.cmds.n.Load() - c0
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	window := u1.at.Sub(u0.at).Seconds()
	fn := float64(n)
	var calls, usec, script float64
	per := map[string]float64{}
	for cmd, d := range statsDelta(u0.cmds, u1.cmds) {
		c := d.calls - idleCmds[cmd].calls/idleDur*window
		per[cmd] = c / fn
		calls += c
		if sent[cmd] {
			u := d.usec - idleCmds[cmd].usec/idleDur*window
			usec += u
			if cmd == "evalsha" || cmd == "eval" {
				script += u
			}
		}
	}
	if wr.perCmd == nil {
		wr.perCmd = map[string]*summary{}
	}
	for cmd := range per {
		if _, ok := wr.perCmd[cmd]; !ok {
			wr.perCmd[cmd] = &summary{vals: make([]float64, len(wr.redisCmds.vals))}
		}
	}
	for cmd, sm := range wr.perCmd {
		sm.add(per[cmd])
	}
	wr.cpuNet.add((u1.cpu - u0.cpu - idleRate*window) * 1e6 / fn)
	wr.cmdUsec.add(usec / fn)
	wr.scriptUsec.add(script / fn)
	wr.redisCmds.add(calls / fn)
	wr.rtt.add(float64(cmds) / fn)
	wr.perGrant.add(float64(lastEnd.Load()-start) / fn / float64(time.Microsecond))
	wr.enqueue.add(enqueue.Seconds())
	wr.violations += int(viol.Load())
	return nil
}

// ---- targets and report

// workGrowthLimit is how much the fair semaphore's Redis work per grant may
// differ between the largest and the smallest queue and still count as
// "does not grow with the queue": the spread of the same figure over
// rounds on this shared 2-core machine.
const workGrowthLimit = 1.25

// SemTargets judges issue 21's benchmark targets on this run: every figure
// is a median over this run's rounds, every ratio one of two such medians.
// Targets whose figures the run lacks are left out.
func (r *Results) SemTargets() []Target {
	s := r.Sem
	if s == nil {
		return nil
	}
	var ts []Target
	locks := []string{SemLockRedisson, SemLockScalable}
	for _, canEnd := range []bool{true, false} {
		how := "ctx can end (as a request's context)"
		if !canEnd {
			how = "ctx cannot end"
		}
		sr, ok := s.unc[semUncKey{SemFairPool1, canEnd}]
		if !ok {
			continue
		}
		for _, l := range locks {
			lr, ok := s.unc[semUncKey{l, canEnd}]
			if !ok {
				continue
			}
			a, b := sr.med.Median(), lr.med.Median()
			q := a / b
			ts = append(ts, Target{What: fmt.Sprintf("uncontended median, %s: Acquire(1)+Release / Lock+Unlock (%s)", how, engineOf(l)),
				Measured: fmt.Sprintf("%s / %s", fmtUs(a), fmtUs(b)), Ratio: q, Value: q, Limit: "<= 1.10", Met: q <= 1.10})
		}
	}
	for _, k := range r.P.semK {
		sr, ok := s.handoff[sizeKey{SemFairPool1, k}]
		if !ok {
			continue
		}
		for _, l := range locks {
			lr, ok := s.handoff[sizeKey{l, k}]
			if !ok {
				continue
			}
			a, b := sr.medOther.Median(), lr.medOther.Median()
			q := a / b
			ts = append(ts, Target{What: fmt.Sprintf("handoff to the head, median, %d waiting: permit / lock (%s)", k, engineOf(l)),
				Measured: fmt.Sprintf("%s / %s", fmtUs(a), fmtUs(b)), Ratio: q, Value: q, Limit: "<= 1.00", Met: q <= 1.00})
		}
	}
	if len(r.P.semSizes) >= 2 {
		lo, hi := r.P.semSizes[0], r.P.semSizes[len(r.P.semSizes)-1]
		wlo, ok1 := s.work[sizeKey{SemFairPool1, lo}]
		whi, ok2 := s.work[sizeKey{SemFairPool1, hi}]
		if ok1 && ok2 && wlo.errors == 0 && whi.errors == 0 {
			for _, f := range []struct {
				what   string
				lo, hi *summary
			}{
				{"Redis command time per grant (commandstats usec)", &wlo.cmdUsec, &whi.cmdUsec},
				{"Redis CPU per grant (INFO cpu, net of idle)", &wlo.cpuNet, &whi.cpuNet},
				{"Redis commands per grant (commandstats calls)", &wlo.redisCmds, &whi.redisCmds},
			} {
				a, b := f.hi.Median(), f.lo.Median()
				q := a / b
				m := fmt.Sprintf("%s / %s", fmtUs(a), fmtUs(b))
				if f.lo == &wlo.redisCmds {
					m = fmt.Sprintf("%s / %s", fmt1(a), fmt1(b))
				}
				ts = append(ts, Target{What: fmt.Sprintf("semaphore %s, queue of %d / queue of %d", f.what, hi, lo),
					Measured: m, Ratio: q, Value: q, Limit: fmt.Sprintf("<= %.2f (does not grow)", workGrowthLimit), Met: q <= workGrowthLimit})
			}
		}
	}
	return ts
}

func engineOf(lib string) string {
	switch lib {
	case SemLockRedisson:
		return "Redisson engine"
	case SemLockScalable:
		return "scalable engine"
	}
	return lib
}

// semMarkdown writes the semaphore scenario's tables and targets.
func (r *Results) semMarkdown(w io.Writer) {
	s := r.Sem
	if s == nil {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("### Issue 21: the fair semaphore (pool of 1) against the fair lock\n\n")
	p("Every client here is a go-redis client with default options (no ContextTimeoutEnabled), as users build them; " +
		"each participant runs on its own key; a semaphore's pool is set to 1 before anything is measured. " +
		"The semaphore is called as users call it: `Acquire(ctx, 1, 0)` (watchdog lease) and `Permit.Release(ctx)`; the lock as `Lock(ctx)` and `Unlock(ctx)`.")
	if _, lo, hi, ok := s.load.stats(); ok {
		p(" Load average (1 minute, /proc/loadavg) at the rounds' starts and ends: %.2f–%.2f on %d CPUs.", lo, hi, runtime.NumCPU())
	}
	p("\n\n")
	if len(s.unc) > 0 {
		p("**Uncontended cycle.** %d cycles per participant per round, after %d unmeasured; the participants take turns of %d cycles, "+
			"round-robin, the first of each pass rotating. Each runs twice: with a context that can end (a `context.WithCancel`, as a request's context; "+
			"with default client options each Redis call then runs on a goroutine of its own so that it returns when the context ends) and with one that "+
			"cannot (`context.WithoutCancel`; calls run inline). Median and p99 per round over its cycles, then the median over rounds; allocations, "+
			"round trips and server time (commandstats usec of the command types sent, over a separate %d cycles) as in scenario 1.\n\n",
			r.P.semCycles, r.P.semWarmup, min(uncontendedChunk, r.P.semCycles), min(r.P.semCycles, 200))
		p("| participant | context | median | p99 | allocs/cycle | round trips/cycle | server time/cycle |\n|---|---|---|---|---|---|---|\n")
		for _, l := range s.libs {
			for _, canEnd := range []bool{true, false} {
				ur, ok := s.unc[semUncKey{l.Name, canEnd}]
				if !ok {
					continue
				}
				how := "can end"
				if !canEnd {
					how = "cannot end"
				}
				p("| %s | %s | %s | %s | %s | %s | %s |\n", l.Name, how, ur.med.cell(fmtUs), ur.p99.cell(fmtUs), ur.allocs.cell(fmt1), ur.rtt.cell(fmt2), ur.server.cell(fmtUs))
			}
		}
		p("\n")
	}
	if len(s.handoff) > 0 {
		p("**Handoff to the head.** k+1 goroutines (over up to 4 clients) cycle on one lock, or one pool of 1 permit, each queueing again at the "+
			"tail after its release, so k wait at every release; %d grants per participant per round in %d turns (fresh clients each turn, its first k+1 "+
			"grants left out), the first rotating. Waits get a context with a deadline. Handoff: from just before the holder's Unlock/Release to just after the next holder's "+
			"Lock/Acquire returns; to another goroutine is the handoff to the head (FIFO: the releaser queues behind the k waiters).\n\n", r.P.semHandoffN, r.P.semChunks)
		p("| participant | waiters k | handoff median, to another goroutine | p99, to another goroutine | handoff median, any | grants/s | self %% | exclusion violations | errors |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, k := range r.P.semK {
			for _, l := range s.libs {
				hr, ok := s.handoff[sizeKey{l.Name, k}]
				if !ok {
					continue
				}
				p("| %s | %d | %s | %s | %s | %s | %s | %d | %s |\n", l.Name, k, hr.medOther.cell(fmtUs), hr.p99Other.cell(fmtUs), hr.med.cell(fmtUs),
					hr.rate.cell(fmtInt), hr.selfPct.cell(fmtInt), hr.violations, errCell(hr.errors, hr.firstErr))
			}
		}
		p("\n")
	}
	if len(s.work) > 0 {
		p("**Redis work per grant as the queue grows.** n waiters (a goroutine each, over 4 clients) queue behind a holder (enqueue: until the "+
			"Redis queue holds n) and settle %v; then the holder releases and each waiter is granted once and releases at once. From the holder's "+
			"release to the last release: Redis CPU (INFO cpu, user+sys), command time (commandstats usec of the command types the clients sent, a script's "+
			"inner calls inside its own time; of it, EVALSHA alone), Redis commands (commandstats calls, inner calls included), each net of the idle rate "+
			"measured for %v just before, and the round trips the clients sent; all divided by the n grants. Time per grant: the drain's duration / n.\n\n",
			r.P.semSettle, r.P.semIdle)
		p("| participant | queue n | Redis command time per grant | of it EVALSHA | Redis CPU per grant (net of idle) | Redis commands per grant | round trips per grant | time per grant | enqueue | exclusion violations | errors |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, l := range s.libs {
			for _, n := range r.P.semSizes {
				wr, ok := s.work[sizeKey{l.Name, n}]
				if !ok {
					continue
				}
				p("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %d | %s |\n", l.Name, n, wr.cmdUsec.cell(fmtUs), wr.scriptUsec.cell(fmtUs), wr.cpuNet.cell(fmtUs),
					wr.redisCmds.cell(fmt1), wr.rtt.cell(fmt1), wr.perGrant.cell(fmtUs), wr.enqueue.cell(fmtSec), wr.violations, errCell(wr.errors, wr.firstErr))
			}
		}
		p("\nRedis commands per grant by command (commandstats calls, net of idle, median over rounds; under 0.05 left out):\n\n")
		p("| participant | queue n | commands per grant |\n|---|---|---|\n")
		for _, l := range s.libs {
			for _, n := range r.P.semSizes {
				if wr, ok := s.work[sizeKey{l.Name, n}]; ok {
					p("| %s | %d | %s |\n", l.Name, n, cmdBreakdown(wr.perCmd))
				}
			}
		}
		p("\n")
	}
	if ts := r.SemTargets(); len(ts) > 0 {
		p("**Issue 21's benchmark targets, judged on this run** (medians over this run's rounds; a ratio is of two such medians):\n\n")
		p("| target | measured | ratio | limit | verdict |\n|---|---|---|---|---|\n")
		for _, t := range ts {
			v := "**missed**"
			if t.Met {
				v = "**met**"
			}
			ratio := "—"
			if !math.IsNaN(t.Ratio) {
				ratio = fmt2(t.Ratio)
			}
			p("| %s | %s | %s | %s | %s |\n", t.What, t.Measured, ratio, t.Limit, v)
		}
		p("\n")
	}
	p("Participants:\n\n")
	for _, l := range s.libs {
		p("- %s: %s.\n", l.Name, l.Config)
	}
	p("\n")
}
