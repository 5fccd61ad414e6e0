package runner

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/multi"
)

// The seats scenario (issue 22's benchmark requirement: "a fair 4-seat
// hold costs no more than 1.5x one fair lock's cycle when uncontended")
// compares, uncontended, multi.NewSeats over seatsN seats of one venue
// (Acquire+Release) with one fair lock's Lock+Unlock, each engine, and
// shows the canonical-order MultiLock over seatsN fair locks beside them.
// Its participants, by report name:
const (
	SeatsLockRedisson = "fair.Mutex, Redisson engine"
	SeatsLockScalable = "fair.Mutex, scalable engine"
	SeatsVenue4       = "multi.Seats, 4 seats of one venue"
	SeatsMulti4       = "multi.MultiLock, 4 fair locks"
)

// seatsN is how many seats (and MultiLock members) a cycle takes.
const seatsN = 4

// seatsLimit is issue 22's bound on a 4-seat hold's cycle over one fair
// lock's.
const seatsLimit = 1.5

// seatsPart is one participant of the seats scenario.
type seatsPart struct {
	name   string
	config string
	// make builds, on client c, a cycle on names made from base (base is
	// unique to the participant, round and context kind).
	make func(c *fairlock.Client, base string) (func(ctx context.Context) error, error)
}

func seatsParts() []seatsPart {
	lock := func(opts ...fair.Option) func(c *fairlock.Client, base string) (func(ctx context.Context) error, error) {
		return func(c *fairlock.Client, base string) (func(ctx context.Context) error, error) {
			m, err := fair.New(c, base, opts...)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) error {
				if err := m.Lock(ctx); err != nil {
					return err
				}
				return m.Unlock(ctx)
			}, nil
		}
	}
	return []seatsPart{
		{SeatsLockRedisson, "fair.New(client, name); defaults (Redisson engine, 30 s watchdog lease); Lock(ctx) and Unlock(ctx)", lock()},
		{SeatsLockScalable, "fair.New(client, name, fair.WithEngine(fair.Scalable)); defaults otherwise; Lock(ctx) and Unlock(ctx)", lock(fair.WithEngine(fair.Scalable))},
		{SeatsVenue4, "multi.NewSeats(client, \"{venue}:1\", … \"{venue}:4\") (Mode OneVenue), made once; Acquire(ctx, 0) (watchdog lease) and SeatHold.Release(ctx)",
			func(c *fairlock.Client, base string) (func(ctx context.Context) error, error) {
				names := make([]string, seatsN)
				for i := range names {
					names[i] = fmt.Sprintf("{%s}:%d", base, i+1)
				}
				s, err := multi.NewSeats(c, names...)
				if err != nil {
					return nil, err
				}
				if s.Mode() != multi.OneVenue {
					return nil, fmt.Errorf("seats mode %v, want one venue", s.Mode())
				}
				return func(ctx context.Context) error {
					h, err := s.Acquire(ctx, 0)
					if err != nil {
						return err
					}
					return h.Release(ctx)
				}, nil
			}},
		{SeatsMulti4, "multi.New of 4 fair.New(client, name) handles (Redisson engine, defaults) on names without a common tag, made once; Lock(ctx) and Unlock(ctx), members taken one by one in the canonical order",
			func(c *fairlock.Client, base string) (func(ctx context.Context) error, error) {
				ms := make([]multi.Member, seatsN)
				for i := range ms {
					m, err := fair.New(c, fmt.Sprintf("%s:%d", base, i+1))
					if err != nil {
						return nil, err
					}
					ms[i] = m
				}
				l, err := multi.New(ms...)
				if err != nil {
					return nil, err
				}
				return func(ctx context.Context) error {
					if err := l.Lock(ctx); err != nil {
						return err
					}
					return l.Unlock(ctx)
				}, nil
			}},
	}
}

// seatsResults are the seats scenario's figures.
type seatsResults struct {
	parts []seatsPart
	unc   map[semUncKey]*seatsRow
	load  summary // the 1-minute load average at each round's start and end
}

// seatsRow is one participant's uncontended figures in one context kind.
type seatsRow struct {
	latRow
	redisCmds summary             // Redis commands per cycle (commandstats calls, inner calls included)
	perCmd    map[string]*summary // of them, per command
}

func (r *Results) seats() *seatsResults {
	if r.Seats == nil {
		r.Seats = &seatsResults{parts: seatsParts(), unc: map[semUncKey]*seatsRow{}}
	}
	return r.Seats
}

// runSeats is one round of the seats scenario: the uncontended rotation of
// every participant, each with a context that can end (a
// context.WithCancel, as a request's: on a client with default go-redis
// options each Redis call then runs on a goroutine of its own) and with
// one that cannot (context.WithoutCancel: calls run inline), on clients
// with default go-redis options (issue 23). Each participant has its own
// client and names.
func (r *Results) runSeats(ctx context.Context, e *env, t *target, round int) {
	pe := *e
	pe.plain = true
	s := r.seats()
	s.load.add(loadAvg())
	defer func() { s.load.add(loadAvg()) }()
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
	for i, part := range s.parts {
		for _, canEnd := range []bool{true, false} {
			rdb := pe.goredis()
			c, err := fairlock.NewClient(rdb)
			if err != nil {
				_ = rdb.Close()
				r.fail(ScSeats, part.name, err)
				continue
			}
			closeAll := func() { _ = c.Close(); _ = rdb.Close() }
			cycle, err := part.make(c, fmt.Sprintf("%sseats:%d:%d:%t", pe.prefix, round, i, canEnd))
			if err != nil {
				closeAll()
				r.fail(ScSeats, part.name, err)
				continue
			}
			cy := &cycler{name: part.name, canEnd: canEnd, close: closeAll, cycle: cycle}
			cs = append(cs, cy)
			keys[cy] = semUncKey{part.name, canEnd}
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
		r.fail(ScSeats, c.name, err)
	}
	rotateCyclers(ctx, &pe, cs, r.P.seatsWarmup, r.P.seatsCycles, ctxOf, failed, fail)
	for _, c := range cs {
		if failed[c] || len(c.lat) == 0 {
			continue
		}
		sr := row(s.unc, keys[c])
		n := float64(len(c.lat))
		sr.med.add(durPercentile(c.lat, 50))
		sr.p99.add(durPercentile(c.lat, 99))
		sr.allocs.add(float64(c.allocs) / n)
		sr.rtt.add(float64(c.cmds) / n)
		usec, calls, per, err := serverWork(ctx, t, &pe, min(r.P.seatsCycles, 200), func() error { return c.cycle(ctxOf(c)) })
		if err != nil {
			fail(c, err)
			continue
		}
		sr.server.add(usec)
		sr.redisCmds.add(calls)
		if sr.perCmd == nil {
			sr.perCmd = map[string]*summary{}
		}
		for cmd := range per {
			if _, ok := sr.perCmd[cmd]; !ok {
				sr.perCmd[cmd] = &summary{vals: make([]float64, len(sr.redisCmds.vals)-1)}
			}
		}
		for cmd, sm := range sr.perCmd {
			sm.add(per[cmd])
		}
	}
}

// serverWork runs cycle k times and returns, per cycle, Redis's command
// time (commandstats usec of the command types the clients sent: a
// script's inner calls are inside its time), the Redis commands run
// (commandstats calls of every command, a script's inner calls included;
// the runner's own INFO left out) and those calls per command. NaN, 0 and
// nil on a server the runner did not start (others' commands would count).
func serverWork(ctx context.Context, t *target, e *env, k int, cycle func() error) (usec, calls float64, per map[string]float64, err error) {
	if !t.own {
		return math.NaN(), math.NaN(), nil, nil
	}
	e.cmds.startNames()
	before, err := commandStats(ctx, t.admin)
	if err != nil {
		_ = e.cmds.stopNames()
		return 0, 0, nil, err
	}
	for range k {
		if err := cycle(); err != nil {
			_ = e.cmds.stopNames()
			return 0, 0, nil, err
		}
	}
	after, err := commandStats(ctx, t.admin)
	sent := e.cmds.stopNames()
	if err != nil {
		return 0, 0, nil, err
	}
	per = map[string]float64{}
	fk := float64(k)
	for name, a := range after {
		if name == "info" {
			continue
		}
		d := a.calls - before[name].calls
		if d <= 0 {
			continue
		}
		per[name] = d / fk
		calls += d / fk
		if sent[name] {
			usec += (a.usec - before[name].usec) / fk
		}
	}
	return usec, calls, per, nil
}

// SeatsTargets judges issue 22's benchmark target on this run: for each
// context kind and engine, the 4-seat hold's median cycle over the fair
// lock's (each a median over this run's rounds).
func (r *Results) SeatsTargets() []Target {
	s := r.Seats
	if s == nil {
		return nil
	}
	var ts []Target
	for _, canEnd := range []bool{true, false} {
		sr, ok := s.unc[semUncKey{SeatsVenue4, canEnd}]
		if !ok {
			continue
		}
		for _, l := range []string{SeatsLockRedisson, SeatsLockScalable} {
			lr, ok := s.unc[semUncKey{l, canEnd}]
			if !ok {
				continue
			}
			a, b := sr.med.Median(), lr.med.Median()
			q := a / b
			ts = append(ts, Target{What: fmt.Sprintf("uncontended median, %s: 4-seat Acquire+Release / fair Lock+Unlock (%s)", ctxHow(canEnd), seatsEngineOf(l)),
				Measured: fmt.Sprintf("%s / %s", fmtUs(a), fmtUs(b)), Ratio: q, Value: q, Limit: fmt.Sprintf("<= %.2f", seatsLimit), Met: q <= seatsLimit})
		}
	}
	return ts
}

func ctxHow(canEnd bool) string {
	if canEnd {
		return "ctx can end (as a request's context)"
	}
	return "ctx cannot end"
}

func seatsEngineOf(lib string) string {
	switch lib {
	case SeatsLockRedisson:
		return "Redisson engine"
	case SeatsLockScalable:
		return "scalable engine"
	}
	return lib
}

// seatsMarkdown writes the seats scenario's tables and target.
func (r *Results) seatsMarkdown(w io.Writer) {
	s := r.Seats
	if s == nil {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("### Issue 22: a fair 4-seat hold against one fair lock, uncontended\n\n")
	p("Every client here is a go-redis client with default options (no ContextTimeoutEnabled), as users build them; " +
		"each participant has its own client and its own names. The seats are 4 names sharing one hash tag (one venue), so `multi.NewSeats` " +
		"takes them in one script (Mode OneVenue).")
	if _, lo, hi, ok := s.load.stats(); ok {
		p(" Load average (1 minute, /proc/loadavg) at the rounds' starts and ends: %.2f–%.2f on %d CPUs.", lo, hi, runtime.NumCPU())
	}
	p("\n\n")
	p("%d cycles per participant per round, after %d unmeasured; the participants take turns of %d cycles, round-robin, the first of each pass "+
		"rotating. Each runs twice: with a context that can end (a `context.WithCancel`, as a request's context; with default client options each "+
		"Redis call then runs on a goroutine of its own so that it returns when the context ends) and with one that cannot (`context.WithoutCancel`; "+
		"calls run inline). Median and p99 per round over its cycles, then the median over rounds. Allocations: runtime.MemStats.Mallocs around each "+
		"chunk (process-wide). Round trips: commands sent per cycle, counted in the client. Over a separate %d cycles: server time (commandstats usec "+
		"of the command types sent: a script's inner calls are inside its time) and Redis commands (commandstats calls, the commands run inside "+
		"scripts included, the runner's INFO left out), per cycle.\n\n",
		r.P.seatsCycles, r.P.seatsWarmup, min(uncontendedChunk, r.P.seatsCycles), min(r.P.seatsCycles, 200))
	p("| participant | context | median | p99 | allocs/cycle | round trips/cycle | Redis commands/cycle | server time/cycle |\n|---|---|---|---|---|---|---|---|\n")
	for _, part := range s.parts {
		for _, canEnd := range []bool{true, false} {
			sr, ok := s.unc[semUncKey{part.name, canEnd}]
			if !ok {
				continue
			}
			how := "can end"
			if !canEnd {
				how = "cannot end"
			}
			p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", part.name, how, sr.med.cell(fmtUs), sr.p99.cell(fmtUs), sr.allocs.cell(fmt1),
				sr.rtt.cell(fmt2), sr.redisCmds.cell(fmt1), sr.server.cell(fmtUs))
		}
	}
	p("\nRedis commands per cycle by command (commandstats calls, median over rounds, context that cannot end; under 0.05 left out):\n\n")
	p("| participant | commands per cycle |\n|---|---|\n")
	for _, part := range s.parts {
		if sr, ok := s.unc[semUncKey{part.name, false}]; ok && sr.perCmd != nil {
			p("| %s | %s |\n", part.name, cmdBreakdown(sr.perCmd))
		}
	}
	p("\n")
	if ts := r.SeatsTargets(); len(ts) > 0 {
		p("**Issue 22's benchmark target, judged on this run** (medians over this run's rounds; a ratio is of two such medians):\n\n")
		p("| target | measured | ratio | limit | verdict |\n|---|---|---|---|---|\n")
		for _, t := range ts {
			p("| %s | %s | %s | %s | %s |\n", t.What, t.Measured, fmt2(t.Ratio), t.Limit, verdict(t.Met))
		}
		p("\n")
	}
	var cmp []string
	for _, canEnd := range []bool{true, false} {
		ml, ok1 := s.unc[semUncKey{SeatsMulti4, canEnd}]
		sv, ok2 := s.unc[semUncKey{SeatsVenue4, canEnd}]
		lk, ok3 := s.unc[semUncKey{SeatsLockRedisson, canEnd}]
		if ok1 && ok3 {
			cmp = append(cmp, fmt.Sprintf("%s: MultiLock of 4 fair locks / one fair lock (Redisson engine) %s", ctxHow(canEnd), fmt2(ml.med.Median()/lk.med.Median())))
		}
		if ok1 && ok2 {
			cmp = append(cmp, fmt.Sprintf("%s: 4-seat hold / MultiLock of 4 fair locks %s", ctxHow(canEnd), fmt2(sv.med.Median()/ml.med.Median())))
		}
	}
	if len(cmp) > 0 {
		p("For comparison (not a target; ratios of medians): %s.\n\n", strings.Join(cmp, "; "))
	}
	p("Participants:\n\n")
	for _, part := range s.parts {
		p("- %s: %s.\n", part.name, part.config)
	}
	p("\n")
}
