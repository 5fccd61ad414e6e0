package demo

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/template"
	"time"
)

// The chart that demo --svg writes: for each lock kind of the run, a
// scatter of arrival rank (x) against grant rank (y), where a fair lock
// draws the diagonal, and below it a histogram of the waits. The
// histograms of all kinds share their bins and their scales.
//
// The data are the run's Bookings: Arrival (the number a booking took when
// its first lock attempt ran in Redis, one at a time) and the grant order
// (Bookings is in grant order). Arrival numbers are turned into ranks among
// the granted bookings, so a run whose arrivals have gaps (an arrival that
// never got the lock, such as one cut short by Ctrl-C) still draws a
// square; "out of turn" is counted on the arrival numbers, as the table
// does.

// ChartMaxPoints is the most points a scatter draws; a larger run draws
// every k-th grant and says so.
const ChartMaxPoints = 3000

// chart geometry, in SVG user units (pixels at 100%)
const (
	chartColW     = 560 // one lock kind's column
	chartMarginX  = 20
	chartPlotL    = 70  // plot's left edge, from the column's
	chartPlotW    = 380 // both plots' width; the scatter is square
	chartScatterT = 144
	chartHistT    = 624
	chartHistH    = 170
	chartHeight   = 900 // with the width (1160 for two kinds), fits a 1200 x 900 window
	chartHistBins = 40  // at most
)

// svgEl is one SVG element of the chart.
type svgEl struct {
	Tag                string // line, rect, circle, text
	X, Y, X2, Y2, W, H float64
	R                  float64
	Class              string
	Anchor             string // text-anchor of a text
	Rotate             bool   // a text turned -90 degrees about (X, Y)
	Text               string // a text's content
	Title              string // tooltip
	Count              int    // a histogram bar's count (data-count)
	Kind               string // the lock kind of a point or bar (data-kind)
	Arrival, Grant     int    // a point's ranks (data-arrival, data-grant)
}

type svgDoc struct {
	W, H  int
	Title string
	Els   []svgEl

	allResults []*Result // the histograms share their y scale
}

var svgTmpl = template.Must(template.New("svg").Funcs(template.FuncMap{
	"x": func(s string) string {
		var b strings.Builder
		_ = xml.EscapeText(&b, []byte(s))
		return b.String()
	},
	"f": func(v float64) string { return fmt.Sprintf("%.1f", v) },
}).Parse(`<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">
<title>{{x .Title}}</title>
<style>
text { fill: #222; font-size: 13px; }
text.title { font-size: 20px; font-weight: bold; }
text.sub { fill: #555; }
text.head { font-weight: bold; font-size: 14px; }
text.tick { fill: #555; font-size: 11px; }
text.note { fill: #555; font-size: 12px; }
line.axis { stroke: #333; stroke-width: 1; }
line.grid { stroke: #e4e4e4; stroke-width: 1; }
line.diag { stroke: #888; stroke-width: 1.5; stroke-dasharray: 6 4; }
rect.frame { fill: none; stroke: #333; stroke-width: 1; }
rect.bar { fill: #4a7ab8; stroke: #fff; stroke-width: 0.5; }
circle.pt { fill: #2b6cb0; fill-opacity: 0.8; }
circle.late { fill: #d9480f; }
circle.key { fill: #2b6cb0; }
circle.keylate { fill: #d9480f; }
</style>
<rect x="0" y="0" width="{{.W}}" height="{{.H}}" fill="#fff"/>
{{range .Els}}{{if eq .Tag "line"}}<line class="{{.Class}}" x1="{{f .X}}" y1="{{f .Y}}" x2="{{f .X2}}" y2="{{f .Y2}}"/>
{{else if eq .Tag "rect"}}<rect class="{{.Class}}" x="{{f .X}}" y="{{f .Y}}" width="{{f .W}}" height="{{f .H}}"{{if .Kind}} data-kind="{{x .Kind}}" data-count="{{.Count}}"{{end}}>{{if .Title}}<title>{{x .Title}}</title>{{end}}</rect>
{{else if eq .Tag "circle"}}<circle class="{{.Class}}" cx="{{f .X}}" cy="{{f .Y}}" r="{{f .R}}"{{if .Kind}} data-kind="{{x .Kind}}" data-arrival="{{.Arrival}}" data-grant="{{.Grant}}"{{end}}>{{if .Title}}<title>{{x .Title}}</title>{{end}}</circle>
{{else if eq .Tag "text"}}<text class="{{.Class}}" x="{{f .X}}" y="{{f .Y}}"{{if .Anchor}} text-anchor="{{.Anchor}}"{{end}}{{if .Rotate}} transform="rotate(-90 {{f .X}} {{f .Y}})"{{end}}>{{x .Text}}</text>
{{end}}{{end}}</svg>
`))

// ChartInfo describes the run above the chart.
type ChartInfo struct {
	Subtitle string // e.g. the sizes and the Redis
}

// WriteSVG writes the chart of rs (lock or semaphore runs; not --multi).
func WriteSVG(w io.Writer, rs []*Result, info ChartInfo) error {
	if len(rs) == 0 {
		return fmt.Errorf("no run to chart")
	}
	if rs[0].Multi > 0 {
		return fmt.Errorf("no chart of a --multi run: its grant numbers order only bookings that share a seat")
	}
	// two columns wide at least, for the title, legend and notes; one
	// kind's column is centred
	d := &svgDoc{W: 2*chartMarginX + max(len(rs), 2)*chartColW, H: chartHeight, allResults: rs}
	kinds := make([]string, len(rs))
	for i, r := range rs {
		kinds[i] = r.Kind
	}
	d.Title = "fairlock demo: arrival order against grant order, and waits (" + strings.Join(kinds, " vs ") + ")"
	d.text(chartMarginX, 34, "title", "", "fairlock demo: who got the lock, in which order, after how long")
	if info.Subtitle != "" {
		d.text(chartMarginX, 56, "sub", "", info.Subtitle)
	}
	// legend
	ly := 82.0
	d.Els = append(d.Els, svgEl{Tag: "circle", X: chartMarginX + 6, Y: ly - 4, R: 4, Class: "key"})
	d.text(chartMarginX+16, ly, "", "", "granted in turn (no earlier arrival waiting)")
	lx := float64(chartMarginX + 310)
	d.Els = append(d.Els, svgEl{Tag: "circle", X: lx + 6, Y: ly - 4, R: 4, Class: "keylate"})
	d.text(lx+16, ly, "", "", "granted out of turn (an earlier arrival still waiting)")
	lx += 350
	d.Els = append(d.Els, svgEl{Tag: "line", X: lx, Y: ly - 4, X2: lx + 30, Y2: ly - 4, Class: "diag"})
	d.text(lx+38, ly, "", "", "grant order = arrival order (a fair lock)")

	bins := waitBins(rs)
	for i, r := range rs {
		x0 := float64(d.W-len(rs)*chartColW)/2 + float64(i*chartColW)
		d.scatter(x0, r)
		d.histogram(x0, r, bins)
	}
	d.text(chartMarginX, chartHeight-38, "note", "",
		"arrival: the order in which bookings' first lock attempts ran in Redis (taken one at a time, so exact);")
	d.text(chartMarginX, chartHeight-22, "note", "",
		"grant: the order the lock (or permit) was granted; wait: from just before Lock (Acquire for a permit) was called to its return.")
	return svgTmpl.Execute(w, d)
}

func (d *svgDoc) text(x, y float64, class, anchor, s string) {
	d.Els = append(d.Els, svgEl{Tag: "text", X: x, Y: y, Class: class, Anchor: anchor, Text: s})
}

func (d *svgDoc) line(x, y, x2, y2 float64, class string) {
	d.Els = append(d.Els, svgEl{Tag: "line", X: x, Y: y, X2: x2, Y2: y2, Class: class})
}

// chartPoint is one booking in the scatter: ranks from 1.
type chartPoint struct {
	arrival, grant int
	late           bool
	b              Booking
}

// chartPoints ranks the bookings (in grant order) by arrival.
func chartPoints(r *Result) []chartPoint {
	n := len(r.Bookings)
	byArrival := make([]int, n)
	for i := range byArrival {
		byArrival[i] = i
	}
	sort.SliceStable(byArrival, func(a, b int) bool {
		return r.Bookings[byArrival[a]].Arrival < r.Bookings[byArrival[b]].Arrival
	})
	rank := make([]int, n)
	for k, i := range byArrival {
		rank[i] = k + 1
	}
	// out of turn as the table counts it: on the arrival numbers, so an
	// arrival never granted (a cut-short run) counts as still waiting
	arrivals := make([]int, n)
	for i, b := range r.Bookings {
		arrivals[i] = b.Arrival
	}
	late := outOfTurn(arrivals)
	ps := make([]chartPoint, n)
	for i, b := range r.Bookings {
		ps[i] = chartPoint{arrival: rank[i], grant: i + 1, late: late[i], b: b}
	}
	return ps
}

func (d *svgDoc) scatter(x0 float64, r *Result) {
	ps := chartPoints(r)
	n := len(ps)
	left, top, size := x0+chartPlotL, float64(chartScatterT), float64(chartPlotW)
	lateN := 0
	for _, p := range ps {
		if p.late {
			lateN++
		}
	}
	inv, pairs := r.Inversions()
	d.text(left, top-30, "head", "", fmt.Sprintf("%s: arrival against grant", r.Kind))
	d.text(left, top-12, "sub", "", fmt.Sprintf("%d of %d grants out of turn; %d of %d pairs inverted", lateN, n, inv, pairs))
	// scale: ranks 0.5 .. n+0.5 across the plot
	lo, hi := 0.5, float64(max(n, 1))+0.5
	sx := func(v float64) float64 { return left + (v-lo)/(hi-lo)*size }
	sy := func(v float64) float64 { return top + size - (v-lo)/(hi-lo)*size }
	for _, t := range rankTicks(n) {
		v := float64(t)
		d.line(sx(v), top, sx(v), top+size, "grid")
		d.line(left, sy(v), left+size, sy(v), "grid")
		d.line(sx(v), top+size, sx(v), top+size+5, "axis")
		d.line(left-5, sy(v), left, sy(v), "axis")
		d.text(sx(v), top+size+18, "tick", "middle", fmt.Sprint(t))
		d.text(left-8, sy(v)+4, "tick", "end", fmt.Sprint(t))
	}
	d.line(sx(lo), sy(lo), sx(hi), sy(hi), "diag")
	d.Els = append(d.Els, svgEl{Tag: "rect", X: left, Y: top, W: size, H: size, Class: "frame"})
	stride := 1
	if n > ChartMaxPoints {
		stride = (n + ChartMaxPoints - 1) / ChartMaxPoints
	}
	rad := 3.0
	switch {
	case n > 2000:
		rad = 1.3
	case n > 400:
		rad = 2
	}
	for i, p := range ps {
		if i%stride != 0 {
			continue
		}
		class := "pt"
		if p.late {
			class = "pt late"
		}
		d.Els = append(d.Els, svgEl{Tag: "circle", X: sx(float64(p.arrival)), Y: sy(float64(p.grant)), R: rad,
			Class: class, Kind: r.Kind, Arrival: p.arrival, Grant: p.grant,
			Title: fmt.Sprintf("%s: arrival %d, grant %d, %s waited %s", r.Kind, p.arrival, p.grant, p.b.Who, dur(p.b.Wait))})
	}
	xl := "arrival rank (1 = first to call " + lockCall(r) + ")"
	if stride > 1 {
		xl += fmt.Sprintf("; one grant in %d drawn", stride)
	}
	d.text(left+size/2, top+size+38, "", "middle", xl)
	d.Els = append(d.Els, svgEl{Tag: "text", X: left - 44, Y: top + size/2, Anchor: "middle", Rotate: true,
		Text: "grant rank (1 = first granted)"})
}

// waitBinning is the histograms' common bins: Count bins of Width from 0.
type waitBinning struct {
	Width time.Duration
	Count int
}

// waitBins picks a round bin width that covers every wait of rs in at most
// chartHistBins bins.
func waitBins(rs []*Result) waitBinning {
	var hi time.Duration
	for _, r := range rs {
		for _, b := range r.Bookings {
			hi = max(hi, b.Wait)
		}
	}
	w := time.Duration(niceStep(float64(max(hi, time.Microsecond)) / chartHistBins))
	w = max(w, time.Microsecond)
	n := int(hi/w) + 1 // a wait of exactly k*w falls in bin k
	return waitBinning{Width: w, Count: min(n, chartHistBins+1)}
}

func (bb waitBinning) index(d time.Duration) int {
	return min(int(d/bb.Width), bb.Count-1)
}

// histCounts counts r's waits per bin.
func histCounts(r *Result, bb waitBinning) []int {
	c := make([]int, bb.Count)
	for _, b := range r.Bookings {
		c[bb.index(b.Wait)]++
	}
	return c
}

func (d *svgDoc) histogram(x0 float64, r *Result, bb waitBinning) {
	left, top, w, h := x0+chartPlotL, float64(chartHistT), float64(chartPlotW), float64(chartHistH)
	counts := histCounts(r, bb)
	what := "the lock"
	if r.Permits > 0 {
		what = "a permit"
	}
	d.text(left, top-30, "head", "", fmt.Sprintf("%s: waits for %s", r.Kind, what))
	d.text(left, top-12, "sub", "", fmt.Sprintf("p50 %s, p90 %s, p99 %s, max %s (%d grants)",
		dur(r.WaitPercentile(50)), dur(r.WaitPercentile(90)), dur(r.WaitPercentile(99)),
		dur(r.WaitPercentile(100)), len(r.Bookings)))
	// the y scale is the tallest bar of any kind, so the panels compare
	top1 := 1
	for _, rr := range d.allResults {
		for _, c := range histCounts(rr, bb) {
			top1 = max(top1, c)
		}
	}
	yt := countTicks(float64(top1), 5)
	ymax := yt[len(yt)-1]
	xmax := float64(bb.Width) * float64(bb.Count)
	sx := func(v float64) float64 { return left + v/xmax*w }
	sy := func(v float64) float64 { return top + h - v/ymax*h }
	for _, t := range yt {
		d.line(left, sy(t), left+w, sy(t), "grid")
		d.line(left-5, sy(t), left, sy(t), "axis")
		d.text(left-8, sy(t)+4, "tick", "end", fmt.Sprint(int(t)))
	}
	unit, uname := waitUnit(time.Duration(xmax))
	for _, t := range niceTicks(xmax/float64(unit), 8) {
		v := t * float64(unit)
		if v > xmax*1.0001 {
			break
		}
		d.line(sx(v), top+h, sx(v), top+h+5, "axis")
		d.text(sx(v), top+h+18, "tick", "middle", trimFloat(t))
	}
	for i, c := range counts {
		if c == 0 {
			continue
		}
		a, b := time.Duration(i)*bb.Width, time.Duration(i+1)*bb.Width
		d.Els = append(d.Els, svgEl{Tag: "rect", X: sx(float64(a)), Y: sy(float64(c)), W: sx(float64(b)) - sx(float64(a)),
			H: h - (sy(float64(c)) - top), Class: "bar", Kind: r.Kind, Count: c,
			Title: fmt.Sprintf("%s: %d waits of %s to %s", r.Kind, c, dur(a), dur(b))})
	}
	d.line(left, top+h, left+w, top+h, "axis")
	d.line(left, top, left, top+h, "axis")
	d.text(left+w/2, top+h+38, "", "middle", "wait ("+uname+"), from calling "+lockCall(r)+" to its return")
	d.Els = append(d.Els, svgEl{Tag: "text", X: left - 44, Y: top + h/2, Anchor: "middle", Rotate: true, Text: "grants"})
}

// waitUnit is the unit of the wait axis.
func waitUnit(hi time.Duration) (time.Duration, string) {
	switch {
	case hi >= 10*time.Second:
		return time.Second, "s"
	case hi >= 10*time.Millisecond:
		return time.Millisecond, "ms"
	default:
		return time.Microsecond, "µs"
	}
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// niceStep is the smallest of 1, 2, 2.5, 5 x 10^k at least v (v > 0).
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// niceTicks are 0, s, 2s, ... up to the first at least hi, with about n
// steps.
func niceTicks(hi float64, n int) []float64 {
	return ticksOf(hi, niceStep(hi/float64(n)))
}

// countTicks are niceTicks with a whole step: the y axis counts grants.
func countTicks(hi float64, n int) []float64 {
	s := niceStep(hi / float64(n))
	switch {
	case s < 1:
		s = 1
	case s != math.Floor(s):
		s = 5 // 2.5, the one fractional step above 1
	}
	return ticksOf(hi, s)
}

func ticksOf(hi, s float64) []float64 {
	var ts []float64
	for v := 0.0; ; v += s {
		ts = append(ts, v)
		if v >= hi*(1-1e-9) {
			return ts
		}
	}
}

// rankTicks are 1 and round ranks up to n.
func rankTicks(n int) []int {
	ts := []int{1}
	if n <= 1 {
		return ts
	}
	s := max(int(niceStep(float64(n)/6)), 1)
	for v := s; v <= n; v += s {
		if v > 1 && v-1 >= s/2 { // not crowding the 1
			ts = append(ts, v)
		}
	}
	return ts
}

// lockCall is the call a booking of r waits in: Acquire for a semaphore's
// permit (--permits), Lock otherwise.
func lockCall(r *Result) string {
	if r.Permits > 0 {
		return "Acquire"
	}
	return "Lock"
}
