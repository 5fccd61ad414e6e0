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

// Target is one line of issue 14's table, judged on a run.
type Target struct {
	What     string  // the figure, as issue 14's table names it
	Measured string  // the figures it is computed from
	Ratio    float64 // NaN when the target is not a ratio
	Value    float64 // the figure compared with Limit (the ratio, or a count)
	Limit    string  // the target, as text
	Met      bool
}

// Issue14 judges this run against the targets of issue 14. Every figure is
// the median over the rounds of this run; a ratio is the ratio of two such
// medians, both measured in this run (the uncontended ones in the same
// interleaved rotation, the handoffs with the chain floor interleaved
// between the libraries' turns). A target whose figures this run lacks is
// left out.
func (r *Results) Issue14() []Target {
	var ts []Target
	med := func(s summary) float64 { return s.Median() } // summary.Median has a pointer receiver
	short := func(n string) string { return strings.TrimPrefix(n, "fairlock/") }
	var peers, polling []string
	for _, l := range r.libs {
		if slices.Contains(ours, l.Name) {
			continue
		}
		peers = append(peers, l.Name)
		if strings.HasPrefix(l.Wakeup, "polling") {
			polling = append(polling, l.Name)
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

	// 1. uncontended fair / reentrant
	if re, ok := unc("fairlock/reentrant"); ok {
		for _, n := range []string{"fairlock/fair", "fairlock/fair-scalable"} {
			if f, ok := unc(n); ok {
				q := f / re
				ts = append(ts, Target{What: "uncontended Lock+Unlock median: " + short(n) + " / reentrant",
					Measured: fmt.Sprintf("%s / %s", fmtUs(f), fmtUs(re)), Ratio: q, Value: q, Limit: "<= 1.10", Met: q <= 1.10})
			}
		}
		// 2. reentrant / fastest peer
		if p, who := best(peers, unc); who != "" {
			q := re / p
			ts = append(ts, Target{What: "uncontended Lock+Unlock median: reentrant / fastest peer",
				Measured: fmt.Sprintf("%s / %s (%s)", fmtUs(re), fmtUs(p), who), Ratio: q, Value: q, Limit: "<= 1.00", Met: q <= 1.00})
		}
	}
	// 3. allocations
	for _, n := range ours {
		if ur, ok := r.Uncontended[n]; ok {
			a := med(ur.allocs)
			ts = append(ts, Target{What: "allocations per Lock+Unlock: " + short(n),
				Measured: fmt.Sprintf("%.1f", a), Ratio: math.NaN(), Value: a, Limit: "<= 30", Met: a <= 30})
		}
	}
	// 4. handoff / chain floor
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
				q := h / chain
				ts = append(ts, Target{What: "handoff to another goroutine, median: " + short(n) + " / handoff chain floor",
					Measured: fmt.Sprintf("%s / %s", fmtUs(h), fmtUs(chain)), Ratio: q, Value: q, Limit: "<= 1.8", Met: q <= 1.8})
			}
		}
	}
	// 5. best fairlock handoff / best peer handoff
	if h, who := best(ours, hand); who != "" {
		if p, pwho := best(peers, hand); pwho != "" {
			q := h / p
			ts = append(ts, Target{What: "handoff to another goroutine, median: best fairlock / best peer",
				Measured: fmt.Sprintf("%s (%s) / %s (%s)", fmtUs(h), short(who), fmtUs(p), pwho), Ratio: q, Value: q, Limit: "<= 1.00", Met: q <= 1.00})
		}
	}
	// 6. Redis CPU per handoff
	cpu := func(n string) (float64, bool) {
		cr, ok := r.CPU[n]
		if !ok {
			return 0, false
		}
		return med(cr.cpuNet), true
	}
	if p, pwho := best(polling, cpu); pwho != "" {
		for _, n := range ours {
			if c, ok := cpu(n); ok {
				q := c / p
				ts = append(ts, Target{What: fmt.Sprintf("Redis CPU per handoff, %d waiters each holding %v (net of idle): %s / lowest polling peer", r.P.cpuWaiters, r.P.cpuHold, short(n)),
					Measured: fmt.Sprintf("%s / %s (%s)", fmtUs(c), fmtUs(p), pwho), Ratio: q, Value: q, Limit: "< 1 (below every polling peer)", Met: q < 1})
			}
		}
	}
	// 7. scalable drain per waiter / chain floor, at the largest size run
	if !math.IsNaN(chain) {
		n := 0
		for k, dr := range r.Drain {
			if k.lib == "fairlock/fair-scalable" && k.n > n && !math.IsNaN(med(dr.perHandoff)) {
				n = k.n
			}
		}
		if n > 0 {
			d := med(r.Drain[sizeKey{"fairlock/fair-scalable", n}].perHandoff)
			q := d / chain
			ts = append(ts, Target{What: fmt.Sprintf("drain of %d real waiters, scalable engine, per waiter / handoff chain floor", n),
				Measured: fmt.Sprintf("%s / %s", fmtUs(d), fmtUs(chain)), Ratio: q, Value: q, Limit: "<= 1.5", Met: q <= 1.5})
		}
	}
	return ts
}

// issue14 writes Issue14 as a markdown table, to paste into
// docs/benchmarks.md.
func (r *Results) issue14(w io.Writer) {
	ts := r.Issue14()
	if len(ts) == 0 {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("### Issue 14's targets, judged on this run\n\n")
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
