package runner

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func sum(vs ...float64) summary { return summary{vals: vs} }

// TestIssue23 judges made-up figures against issue 23's table, whose limits
// are restated here from the issue (not from the code under test).
func TestIssue23(t *testing.T) {
	r := &Results{P: params{cpuWaiters: 100}, libs: Libs(),
		Floor: map[string]*latRow{FloorChain: {med: sum(100, 110, 90)}}, // median 100
		Uncontended: map[string]*latRow{
			"fairlock/reentrant":     {med: sum(100)},
			"fairlock/fair":          {med: sum(105)}, // 1.05: met
			"fairlock/fair-scalable": {med: sum(106)}, // 1.06: missed
			"redsync":                {med: sum(120)},
			"bsm/redislock":          {med: sum(100)}, // reentrant / bsm = 1.00: met
			"rueidislock":            {med: sum(50)},  // faster, but the target names bsm/redislock
		},
		Contention: map[string]*contRow{
			"fairlock/reentrant":     {medOther: sum(150)},        // 1.5: met
			"fairlock/fair":          {medOther: sum(151)},        // missed
			"fairlock/fair-scalable": {medOther: sum(91)},         // 0.91 > 0.9: missed
			"redsync":                {medOther: sum(math.NaN())}, // no handoff to another goroutine
			"bsm/redislock":          {medOther: sum(300)},
			"rueidislock":            {medOther: sum(113.75)}, // best peer; best ours 91: 0.80, met
		},
		CPU: map[string]*cpuRow{
			"fairlock/reentrant":     {cpuNet: sum(99)},  // below redsync's 100: met
			"fairlock/fair":          {cpuNet: sum(100)}, // equal: missed
			"fairlock/fair-scalable": {cpuNet: sum(50)},
			"redsync":                {cpuNet: sum(100)},
			"bsm/redislock":          {cpuNet: sum(40)}, // lower, but the target names redsync
			"rueidislock":            {cpuNet: sum(10)},
		},
		Drain: map[sizeKey]*drainRow{
			{"fairlock/fair-scalable", 100}:   {perHandoff: sum(500)},
			{"fairlock/fair-scalable", 1000}:  {perHandoff: sum(100)}, // the size the issue names: 1.0, met
			{"fairlock/fair-scalable", 10000}: {perHandoff: sum(150)},
			{"fairlock/fair", 1000}:           {perHandoff: sum(5000)},
		},
	}
	want := []struct {
		what  string
		ratio float64
		met   bool
	}{
		{"uncontended Lock+Unlock median: fair / reentrant", 1.05, true},
		{"uncontended Lock+Unlock median: fair-scalable / reentrant", 1.06, false},
		{"uncontended Lock+Unlock median: reentrant / bsm/redislock", 1.00, true},
		{"handoff to another goroutine, median: reentrant / handoff chain floor", 1.50, true},
		{"handoff to another goroutine, median: fair / handoff chain floor", 1.51, false},
		{"handoff to another goroutine, median: fair-scalable / handoff chain floor", 0.91, false},
		{"handoff to another goroutine, median: best fairlock / best peer", 0.80, true},
		{"Redis CPU per handoff, 100 waiters each holding 0s (net of idle): reentrant / redsync", 0.99, true},
		{"Redis CPU per handoff, 100 waiters each holding 0s (net of idle): fair / redsync", 1.00, false},
		{"Redis CPU per handoff, 100 waiters each holding 0s (net of idle): fair-scalable / redsync", 0.50, true},
		{"drain of 1000 real waiters, scalable engine, per waiter / handoff chain floor", 1.00, true},
	}
	got := r.Issue23()
	if len(got) != len(want) {
		for _, g := range got {
			t.Logf("%+v", g)
		}
		t.Fatalf("%d targets, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.What != w.what {
			t.Errorf("target %d is %q, want %q", i, g.What, w.what)
		}
		if math.Abs(g.Ratio-w.ratio) > 1e-9 {
			t.Errorf("%s: ratio %v, want %v", w.what, g.Ratio, w.ratio)
		}
		if g.Met != w.met {
			t.Errorf("%s: met %v, want %v (%+v)", w.what, g.Met, w.met, g)
		}
	}
	var b bytes.Buffer
	r.issue23(&b)
	md := b.String()
	if n := strings.Count(md, "\n| "); n != len(want)+1 { // the header and one row per target
		t.Errorf("table has %d rows, want %d:\n%s", n, len(want)+1, md)
	}
	if !strings.Contains(md, "| handoff to another goroutine, median: best fairlock / best peer | 91.0 µs (fair-scalable) / 114 µs (rueidislock) | 0.80 | <= 0.80 | **met** |") {
		t.Errorf("best-handoff row missing or wrong:\n%s", md)
	}
}

func TestStatsDelta(t *testing.T) {
	before := map[string]cmdStat{"evalsha": {10, 100}, "info": {5, 50}, "get": {3, 3}}
	after := map[string]cmdStat{"evalsha": {14, 180}, "info": {9, 90}, "get": {3, 3}, "publish": {2, 4}}
	d := statsDelta(before, after)
	if len(d) != 2 || d["evalsha"] != (cmdStat{4, 80}) || d["publish"] != (cmdStat{2, 4}) {
		t.Errorf("statsDelta = %v, want evalsha {4 80} and publish {2 4} only (info is the runner's own, get did not change)", d)
	}
	per := map[string]*summary{"get": {vals: []float64{3, 1}}, "del": {vals: []float64{0.01}}, "set": {vals: []float64{3}}, "publish": {vals: []float64{1}}}
	if got, want := cmdBreakdown(per), "SET 3.00, GET 2.00, PUBLISH 1.00"; got != want {
		t.Errorf("cmdBreakdown = %q, want %q", got, want)
	}
}
