package runner

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// ours are this project's locks, in report order.
var ours = []string{"fairlock/reentrant", "fairlock/fair", "fairlock/fair-scalable"}

// Target is one line of issue 23's table, judged on a run.
type Target struct {
	What     string  // the figure, as issue 23's table names it
	Measured string  // the figures it is computed from
	Ratio    float64 // NaN when the target is not a ratio
	Value    float64 // the figure compared with Limit (the ratio, or a count)
	Limit    string  // the target, as text
	Met      bool
}

// Issue23 judges this run against the targets of issue 23 (each library
// called as users call it: default go-redis options, context.Background()
// for an uncontended cycle, a cancellable context for a wait; the runner's
// own rows). Every figure is
// the median over the rounds of this run; a ratio is the ratio of two such
// medians, both measured in this run (the uncontended ones in the same
// interleaved rotation, the handoffs with the chain floor interleaved
// between the libraries' turns). A target whose figures this run lacks is
// left out.
func (r *Results) Issue23() []Target {
	var ts []Target
	med := func(s summary) float64 { return s.Median() } // summary.Median has a pointer receiver
	short := func(n string) string { return strings.TrimPrefix(n, "fairlock/") }
	var peers []string
	for _, l := range r.libs {
		if !slices.Contains(ours, l.Name) {
			peers = append(peers, l.Name)
		}
	}
	// best returns the lowest figure among names (NaNs skipped).
	best := func(names []string, f func(string) (float64, bool)) (float64, string) {
		v, who := math.Inf(1), ""
		for _, n := range names {
			if x, ok := f(n); ok && !math.IsNaN(x) && x < v {
				v, who = x, n
			}
		}
		return v, who
	}
	unc := func(n string) (float64, bool) {
		ur, ok := r.Uncontended[n]
		if !ok {
			return 0, false
		}
		return med(ur.med), true
	}

	// 1. uncontended fair / reentrant, both engines
	if re, ok := unc("fairlock/reentrant"); ok {
		for _, n := range []string{"fairlock/fair", "fairlock/fair-scalable"} {
			if f, ok := unc(n); ok {
				q := f / re
				ts = append(ts, Target{What: "uncontended Lock+Unlock median: " + short(n) + " / reentrant",
					Measured: fmt.Sprintf("%s / %s", fmtUs(f), fmtUs(re)), Ratio: q, Value: q, Limit: "<= 1.05", Met: q <= 1.05})
			}
		}
		// 2. reentrant / bsm/redislock
		if p, ok := unc("bsm/redislock"); ok {
			q := re / p
			ts = append(ts, Target{What: "uncontended Lock+Unlock median: reentrant / bsm/redislock",
				Measured: fmt.Sprintf("%s / %s", fmtUs(re), fmtUs(p)), Ratio: q, Value: q, Limit: "<= 1.00", Met: q <= 1.00})
		}
	}
	// 3. handoff / chain floor: every lock <= 1.5, the scalable engine <= 0.9
	chain := math.NaN()
	if fc, ok := r.Floor[FloorChain]; ok {
		chain = med(fc.med)
	}
	hand := func(n string) (float64, bool) {
		cr, ok := r.Contention[n]
		if !ok {
			return 0, false
		}
		return med(cr.medOther), true
	}
	if !math.IsNaN(chain) {
		for _, n := range ours {
			if h, ok := hand(n); ok {
				q, lim := h/chain, 1.5
				if n == "fairlock/fair-scalable" {
					lim = 0.9
				}
				ts = append(ts, Target{What: "handoff to another goroutine, median: " + short(n) + " / handoff chain floor",
					Measured: fmt.Sprintf("%s / %s", fmtUs(h), fmtUs(chain)), Ratio: q, Value: q, Limit: "<= " + fmt2(lim), Met: q <= lim})
			}
		}
	}
	// 4. best fairlock handoff / best peer handoff
	if h, who := best(ours, hand); who != "" {
		if p, pwho := best(peers, hand); pwho != "" {
			q := h / p
			ts = append(ts, Target{What: "handoff to another goroutine, median: best fairlock / best peer",
				Measured: fmt.Sprintf("%s (%s) / %s (%s)", fmtUs(h), short(who), fmtUs(p), pwho), Ratio: q, Value: q, Limit: "<= 0.80", Met: q <= 0.80})
		}
	}
	// 5. Redis CPU per handoff: below redsync's
	cpu := func(n string) (float64, bool) {
		cr, ok := r.CPU[n]
		if !ok {
			return 0, false
		}
		return med(cr.cpuNet), true
	}
	if p, ok := cpu("redsync"); ok {
		for _, n := range ours {
			if c, ok := cpu(n); ok {
				q := c / p
				ts = append(ts, Target{What: fmt.Sprintf("Redis CPU per handoff, %d waiters each holding %v (net of idle): %s / redsync", r.P.cpuWaiters, r.P.cpuHold, short(n)),
					Measured: fmt.Sprintf("%s / %s", fmtUs(c), fmtUs(p)), Ratio: q, Value: q, Limit: "< 1 (below redsync's)", Met: q < 1})
			}
		}
	}
	// 6. scalable drain per waiter / chain floor, at 1,000 waiters (the
	// largest size run when it has no 1,000)
	if !math.IsNaN(chain) {
		n := 0
		for k, dr := range r.Drain {
			if k.lib == "fairlock/fair-scalable" && !math.IsNaN(med(dr.perHandoff)) && n != 1000 && (k.n == 1000 || k.n > n) {
				n = k.n
			}
		}
		if n > 0 {
			d := med(r.Drain[sizeKey{"fairlock/fair-scalable", n}].perHandoff)
			q := d / chain
			ts = append(ts, Target{What: fmt.Sprintf("drain of %d real waiters, scalable engine, per waiter / handoff chain floor", n),
				Measured: fmt.Sprintf("%s / %s", fmtUs(d), fmtUs(chain)), Ratio: q, Value: q, Limit: "<= 1.00", Met: q <= 1.0})
		}
	}
	return ts
}

// issue23 writes Issue23 as a markdown table, to paste into
// docs/benchmarks.md.
func (r *Results) issue23(w io.Writer) {
	ts := r.Issue23()
	if len(ts) == 0 {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("### Issue 23's targets, judged on this run\n\n")
	p("Each figure is the median over this run's rounds; a ratio is the ratio of two such medians from this run. The uncontended " +
		"figures come from the interleaved rotation of scenario 1, the handoffs from scenario 2 (to another goroutine) with the handoff " +
		"chain floor measured between the libraries' turns, the Redis CPU from scenario 5, the drain from scenario 4.\n\n")
	p("| target | measured | ratio | target | verdict |\n|---|---|---|---|---|\n")
	for _, t := range ts {
		ratio := "—"
		if !math.IsNaN(t.Ratio) {
			ratio = fmt2(t.Ratio)
		}
		p("| %s | %s | %s | %s | %s |\n", t.What, t.Measured, ratio, t.Limit, verdict(t.Met))
	}
	p("\n")
}
