package runner

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Markdown writes every table of the run, and the targets of issues 2, 3
// and 6 judged against this run's figures.
func (r *Results) Markdown(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("Machine: %s.\n", r.Machine)
	p("Rounds: %d", r.Cfg.Rounds)
	if r.Cfg.DrainRounds > 0 && r.Cfg.DrainRounds < r.Cfg.Rounds && len(r.Drain) > 0 {
		p(" (the drain: %d)", r.Cfg.DrainRounds)
	}
	p("; each cell is the median over the rounds, with (min–max) across rounds when they differ; the run took %v.\n\n", r.Elapsed.Round(1e9))

	if len(r.Floor)+len(r.Uncontended) > 0 {
		p("### Floor and scenario 1: uncontended Lock+Unlock, one goroutine, one key\n\n")
		p("%d cycles per library per round. Within a round each library (and each EVALSHA floor) first runs %d cycles unmeasured (warm-up), "+
			"then they take turns, %d cycles each, round-robin (the first of each pass rotating) until each has run its %d: a slow spell of the "+
			"machine hits every library alike. Median and p99 are per round over all of that round's cycles (Lock+Unlock), then the median over rounds. "+
			"Allocs are runtime.MemStats.Mallocs deltas read around each chunk (process-wide, so they include what the library's background goroutines allocate meanwhile), "+
			"summed and divided by the cycles; "+
			"round trips are commands sent per cycle, counted in the client (go-redis hook; a wrapper of the rueidis client); "+
			"server time is Redis's own execution time per cycle (INFO commandstats usec of the command types the client sent: EVALSHA, and SET for redsync), "+
			"over a separate 200 cycles (only on a server the runner started). "+
			"The handoff chain floor is measured interleaved with scenario 2 (see there).\n\n", r.P.cycles, r.P.warmup, min(uncontendedChunk, r.P.cycles), r.P.cycles)
		p("| | median | p99 | allocs/cycle | round trips/cycle | server time/cycle |\n|---|---|---|---|---|---|\n")
		for _, name := range []string{Floor1, Floor2, FloorPub, FloorChain} {
			if fr, ok := r.Floor[name]; ok {
				p("| %s | %s | %s | %s | %s | %s |\n", name, fr.med.cell(fmtUs), fr.p99.cell(fmtUs), fr.allocs.cell(fmt1), fr.rtt.cell(fmt2), fr.server.cell(fmtUs))
			}
		}
		for _, l := range r.libs {
			for _, name := range []string{l.Name, l.Name + SufCanEnd, l.Name + SufOld} {
				if ur, ok := r.Uncontended[name]; ok {
					p("| %s | %s | %s | %s | %s | %s |\n", name, ur.med.cell(fmtUs), ur.p99.cell(fmtUs), ur.allocs.cell(fmt1), ur.rtt.cell(fmt2), ur.server.cell(fmtUs))
				}
			}
		}
		p("%s", "\nEvery library runs three times in the rotation (issue 23). Its own row is called as users call it: a go-redis client with default options "+
			"(no ContextTimeoutEnabled) and context.Background(). \""+strings.TrimSpace(SufCanEnd)+"\": the same with a cancellable context (a context.WithCancel, as a request's); "+
			"fairlock's locks then run each Redis call on a goroutine of its own so that it returns as soon as the context ends (none of the peers watches a context during a call). "+
			"\""+strings.TrimSpace(SufOld)+"\": as this runner called it before issue 23, a client with ContextTimeoutEnabled and a context that cannot end "+
			"(context.WithoutCancel); rueidislock's client is not go-redis, so that row is configured as its own and shows the noise between two identical participants.\n\n")
	}
	if len(r.Contention) > 0 {
		p("### Scenario 2: contention, %d clients × %d goroutines on one lock\n\n", r.P.contClients, r.P.contPerCl)
		p("%v per library per round, in %d turns of %v: each pass gives every library (the first rotating) one turn, with fresh clients, and "+
			"before each turn (and once at the end) the handoff chain floor takes %d samples, so that the floor row above is measured interleaved with these handoffs. "+
			"The first %d grants of each turn (one per goroutine: the start-up burst) are a warm-up, left out of every figure. ", r.P.duration, r.P.contChunks,
			r.P.duration/time.Duration(r.P.contChunks), r.P.chainChunk, r.P.contClients*r.P.contPerCl)
		p("%s", "The holder only bumps a counter. Handoff latency: from just before the holder calls Unlock to just after "+
			"the next holder's Lock returns (one in-process monotonic clock). Self: share of grants to the goroutine that released last "+
			"(it calls Lock again at once; a lock without a queue often lets it barge ahead of the waiters). "+
			"Handoffs to another goroutine: how many there were per round; for a polling lock they are the few polls that landed while the lock was free, "+
			"a selected sample. The ratio to the chain floor is the ratio of the two medians over rounds. "+
			"Each library takes its turns twice (issue 23): its own row as users call it (a go-redis client with default options; Lock gets a context with a deadline, as a request's, "+
			"and Unlock a context.WithTimeout: fairlock runs each Redis call on a goroutine of its own), and \""+strings.TrimSpace(SufOld)+"\" as this runner called it before "+
			"(ContextTimeoutEnabled: the client enforces the same deadlines and fairlock's calls run inline). The chain floor's clients have default options and its "+
			"acquisition a cancellable context.\n\n")
		chain := math.NaN()
		if fc, ok := r.Floor[FloorChain]; ok {
			chain = fc.med.Median()
		}
		p("| library | wake-up | grants/s | self %% | handoff median, any next holder | handoffs to another goroutine | handoff median, to another goroutine | to another goroutine / chain floor | handoff p99, to another goroutine | exclusion violations | errors |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, l := range r.libs {
			for _, name := range []string{l.Name, l.Name + SufOld} {
				cr, ok := r.Contention[name]
				if !ok {
					continue
				}
				ratio := "n/a"
				if q := cr.medOther.Median() / chain; !math.IsNaN(q) {
					ratio = fmt2(q)
				}
				p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %s |\n", name, l.Wakeup, cr.rate.cell(fmtInt), cr.selfPct.cell(fmtInt), cr.med.cell(fmtUs),
					cr.nOther.cell(fmtInt), cr.medOther.cell(fmtUs), ratio, cr.p99Other.cell(fmtUs), cr.violations, errCell(cr.errors, cr.firstErr))
			}
		}
		p("\n")
	}
	if len(r.Fairness) > 0 {
		p("### Scenario 3: fairness, %d contenders arriving one by one while the lock is held\n\n", r.P.fairN)
		p("Inversions: pairs granted in the opposite order of arrival (0 is FIFO; a random order averages %d, the maximum is %d). "+
			"Contenders are spread over 4 clients.\n\n", r.P.fairN*(r.P.fairN-1)/4, r.P.fairN*(r.P.fairN-1)/2)
		p("| library | arrivals | inversions | exclusion violations | errors |\n|---|---|---|---|---|\n")
		for _, l := range r.libs {
			if fr, ok := r.Fairness[l.Name]; ok {
				p("| %s | %s | %s | %d | %s |\n", l.Name, fr.arrival, fr.inv.cell(fmtInt), fr.violations, errCell(fr.errors, fr.firstErr))
			}
		}
		p("\n")
	}
	if len(r.Drain) > 0 {
		p("### Scenario 4: fair-queue drain (this project's fair lock, each engine)\n\n")
		p("n real waiters (a fair.Mutex and a goroutine each, over 4 clients) queue behind a holder (enqueue time: until the Redis queue holds n); " +
			"then the holder unlocks and each waiter takes the lock and releases it at once. Drain: from the holder's Unlock to the last " +
			"waiter's Unlock returning. Slowest script: the longest EVAL/EVALSHA during the drain, server-side from SLOWLOG at a 100 µs threshold " +
			"(only on a server the runner started; at threshold 0 Redis 7 would also log every call inside a script and slow it down) and client-side (round trip, including waits for a pooled connection). Commands per waiter count every command the clients sent during the drain; " +
			"Redis CPU per waiter is INFO cpu (user+sys) over the drain divided by n.\n\n")
		p("| engine | waiters | enqueue | drain | drain per waiter | Redis CPU per waiter | slowest script (server) | slowest script call (client) | commands per waiter | errors |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, l := range r.libs {
			for _, n := range r.Cfg.Sizes {
				dr, ok := r.Drain[sizeKey{l.Name, n}]
				if !ok {
					continue
				}
				p("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", l.Name, n, dr.enqueue.cell(fmtSec), dr.drain.cell(fmtSec), dr.perHandoff.cell(fmtUs), dr.cpu.cell(fmtUs),
					dr.slowServer.cell(fmtSlow), dr.slowClient.cell(fmtUs), dr.cmds.cell(fmt1), errCell(dr.errors, dr.firstErr))
			}
		}
		p("\n")
	}
	if len(r.FairHandoff) > 0 {
		p("### Scenario 4: fair-lock handoff latency with k waiters (issue 3)\n\n")
		p("k+1 goroutines (over up to 4 clients) cycle Lock/Unlock on one fair lock, each queueing again at the tail after its release, so k "+
			"waiters are queued at every release; %d grants per round. Latency as in scenario 2.\n\n", r.P.handoffN)
		p("| engine | waiters k | handoff median | handoff p99 | handoffs/s | self %% | exclusion violations | errors |\n|---|---|---|---|---|---|---|---|\n")
		for _, l := range r.libs {
			for _, k := range r.P.handoffK {
				hr, ok := r.FairHandoff[sizeKey{l.Name, k}]
				if !ok {
					continue
				}
				p("| %s | %d | %s | %s | %s | %s | %d | %s |\n", l.Name, k, hr.med.cell(fmtUs), hr.p99.cell(fmtUs), hr.rate.cell(fmtInt), hr.selfPct.cell(fmtInt), hr.violations, errCell(hr.errors, hr.firstErr))
			}
		}
		p("\n")
	}
	if len(r.CPU) > 0 {
		p("### Scenario 5: wake-up cost, a queue of %d waiters drained once, each holding the lock %v\n\n", r.P.cpuWaiters, r.P.cpuHold)
		p("The waiters (over 4 clients) arrive while a holder has the lock and settle for 300 ms; then the holder releases and each waiter "+
			"takes the lock once, holds it %v and leaves. Redis server CPU (INFO cpu, used_cpu_user + used_cpu_sys) and the commands the clients "+
			"sent are counted from the holder's release to the last release, and divided by the %d handoffs. Time per handoff is the drain "+
			"time per waiter less the hold. Net of idle: less the server's idle CPU rate (measured for 500 ms just before, clients connected, "+
			"no lock activity) times the drain's duration, since a slow drain is otherwise charged for the server's idle housekeeping. "+
			"Round trips per handoff are counted in the clients. Redis commands per handoff are INFO commandstats calls over the same window, "+
			"net of the idle rate, the runner's own INFO left out; they include the commands run inside scripts (so one EVALSHA of a script "+
			"that calls HSET and PUBLISH counts 3). Command time per handoff is the commandstats usec of the command types the clients sent "+
			"(a script's inner calls are inside its own time), net of idle.\n\n", r.P.cpuHold, r.P.cpuWaiters)
		p("| library | wake-up | Redis CPU per handoff | net of idle | Redis command time per handoff | round trips per handoff | Redis commands per handoff | time per handoff | exclusion violations | errors |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, l := range r.libs {
			if cr, ok := r.CPU[l.Name]; ok {
				p("| %s | %s | %s | %s | %s | %s | %s | %s | %d | %s |\n", l.Name, l.Wakeup, cr.cpuPer.cell(fmtUs), cr.cpuNet.cell(fmtUs), cr.cmdUsec.cell(fmtUs), cr.cmdsPer.cell(fmt1),
					cr.redisCmds.cell(fmt1), cr.perHandoff.cell(fmtUs), cr.violations, errCell(cr.errors, cr.firstErr))
			}
		}
		p("\nRedis commands per handoff by command (commandstats calls, net of idle, median over rounds; commands under 0.05 per handoff left out):\n\n")
		p("| library | commands per handoff |\n|---|---|\n")
		for _, l := range r.libs {
			if cr, ok := r.CPU[l.Name]; ok {
				p("| %s | %s |\n", l.Name, cmdBreakdown(cr.perCmd))
			}
		}
		p("\n")
	}
	r.semMarkdown(w)
	r.seatsMarkdown(w)
	r.issue23(w)
	r.targets(w)
	p("### Library configurations\n\n")
	for _, l := range r.libs {
		p("- %s: %s.\n", l.Name, l.Config)
	}
	if r.RueidisRetries > 0 {
		p("\nrueidislock: %d waits got no wake-up within %v and were retried by the runner (its acquire times out after 20 ms by default; "+
			"with NoLoopTracking it then waits for an invalidation of its own delete, which never comes).\n", r.RueidisRetries, rueidisWait)
	}
	if len(r.Errors) > 0 {
		p("\n### Errors during the run\n\n")
		for _, e := range r.Errors {
			p("- %s\n", e)
		}
	}
}

// cmdBreakdown lists commands by their median count, largest first.
func cmdBreakdown(per map[string]*summary) string {
	type kv struct {
		name string
		v    float64
	}
	var xs []kv
	for name, s := range per {
		if v := s.Median(); v >= 0.05 {
			xs = append(xs, kv{name, v})
		}
	}
	slices.SortFunc(xs, func(a, b kv) int {
		if a.v != b.v {
			if a.v > b.v {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	if len(xs) == 0 {
		return "n/a"
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%s %.2f", strings.ToUpper(x.name), x.v)
	}
	return strings.Join(parts, ", ")
}

func errCell(n int, first string) string {
	if n == 0 {
		return "0"
	}
	if len(first) > 80 {
		first = first[:80] + "…"
	}
	return fmt.Sprintf("%d (%s)", n, first)
}

func verdict(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**missed**"
}

// targets judges this run's figures against the targets of issues 6 and 2.
func (r *Results) targets(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	var lines []string
	add := func(format string, a ...any) { lines = append(lines, fmt.Sprintf(format, a...)) }
	isOurs := func(n string) bool { return slices.Contains(ours, n) }

	if f2, ok := r.Floor[Floor2]; ok {
		floor := f2.med.Median()
		fastest, fastestName := math.Inf(1), ""
		for _, l := range r.libs {
			if ur, ok := r.Uncontended[l.Name]; ok && !isOurs(l.Name) && ur.med.Median() < fastest {
				fastest, fastestName = ur.med.Median(), l.Name
			}
		}
		for _, name := range ours {
			ur, ok := r.Uncontended[name]
			if !ok {
				continue
			}
			m := ur.med.Median()
			add("Scenario 1, %s within 10%% of the two-round-trip floor: %s (median %s vs floor %s, ratio %.2f).",
				name, verdict(m <= 1.10*floor), fmtUs(m), fmtUs(floor), m/floor)
			if fastestName != "" {
				add("Scenario 1, %s at least as fast as the fastest peer: %s (median %s vs %s %s, ratio %.2f).",
					name, verdict(m <= fastest), fmtUs(m), fastestName, fmtUs(fastest), m/fastest)
			}
		}
	}
	if ur, ok := r.Uncontended["fairlock/reentrant"]; ok {
		rt, al := ur.rtt.Median(), ur.allocs.Median()
		add("Issue 2, reentrant Lock+Unlock round trips per cycle exactly 2: %s (%.2f); at most 30 allocs per cycle: %s (%.1f).",
			verdict(rt == 2), rt, verdict(al <= 30), al)
	}
	if f1, ok := r.Floor[Floor1]; ok {
		if fp, ok := r.Floor[FloorPub]; ok {
			floor := f1.med.Median() + fp.med.Median()
			for _, name := range ours {
				if cr, ok := r.Contention[name]; ok {
					m := cr.medOther.Median()
					line := fmt.Sprintf("Scenario 2, %s median handoff to another goroutine at most 3× (one round trip + one delivery = %s): %s (median %s, ratio %.2f to the floor, %.2f to 3×)",
						name, fmtUs(floor), verdict(m <= 3*floor), fmtUs(m), m/floor, m/(3*floor))
					if fc, ok := r.Floor[FloorChain]; ok {
						line += fmt.Sprintf("; the measured handoff chain floor is %s, ratio %.2f", fmtUs(fc.med.Median()), m/fc.med.Median())
					}
					add("%s.", line)
				}
			}
		}
	}
	for _, name := range []string{"fairlock/fair", "fairlock/fair-scalable"} {
		if fr, ok := r.Fairness[name]; ok {
			med, _, hi, ok := fr.inv.stats()
			if ok {
				add("Scenario 3, zero inversions for %s: %s (median %.0f, worst round %.0f, over %d rounds).", name, verdict(hi == 0 && fr.errors == 0), med, hi, len(fr.inv.vals))
			}
		}
	}
	var polling []string
	for _, l := range r.libs {
		if strings.HasPrefix(l.Wakeup, "polling") {
			polling = append(polling, l.Name)
		}
	}
	for _, name := range ours {
		cr, ok := r.CPU[name]
		if !ok {
			continue
		}
		m := cr.cpuNet.Median()
		okAll := true
		var cmp []string
		for _, pn := range polling {
			pr, ok := r.CPU[pn]
			if !ok {
				continue
			}
			pm := pr.cpuNet.Median()
			okAll = okAll && m < pm
			cmp = append(cmp, fmt.Sprintf("%s %s", pn, fmtUs(pm)))
		}
		if len(cmp) > 0 {
			add("Scenario 5, %s Redis CPU per handoff (net of idle) lower than every polling peer: %s (%s vs %s).", name, verdict(okAll), fmtUs(m), strings.Join(cmp, ", "))
		}
	}
	if len(lines) == 0 {
		return
	}
	p("### Targets, judged on this run\n\n")
	for _, l := range lines {
		p("- %s\n", l)
	}
	p("\n")
}
