package runner

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// percentile returns the p-th percentile (0..100) of xs by the nearest-rank
// method; NaN for an empty sample. xs is sorted in place.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	slices.Sort(xs)
	rank := int(math.Ceil(p / 100 * float64(len(xs))))
	rank = min(max(rank, 1), len(xs))
	return xs[rank-1]
}

// durPercentile is percentile over durations, in microseconds.
func durPercentile(ds []time.Duration, p float64) float64 {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d) / float64(time.Microsecond)
	}
	return percentile(xs, p)
}

// inversions counts the pairs (i < j) with grant[i] > grant[j]: how far the
// grant order is from the arrival order (index order). 0 is perfect FIFO.
func inversions(grant []int64) int {
	n := 0
	for i := range grant {
		for j := i + 1; j < len(grant); j++ {
			if grant[i] > grant[j] {
				n++
			}
		}
	}
	return n
}

// summary is one figure's values over the rounds.
type summary struct {
	vals []float64
}

func (s *summary) add(v float64) { s.vals = append(s.vals, v) }

func (s *summary) stats() (med, lo, hi float64, ok bool) {
	var xs []float64
	for _, v := range s.vals {
		if !math.IsNaN(v) {
			xs = append(xs, v)
		}
	}
	if len(xs) == 0 {
		return 0, 0, 0, false
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		med = xs[n/2]
	} else {
		med = (xs[n/2-1] + xs[n/2]) / 2
	}
	return med, xs[0], xs[n-1], true
}

// Median is the median over the rounds (NaN when there is none).
func (s *summary) Median() float64 {
	m, _, _, ok := s.stats()
	if !ok {
		return math.NaN()
	}
	return m
}

// cell formats "median (min–max)" with the given number formatter.
func (s *summary) cell(f func(float64) string) string {
	med, lo, hi, ok := s.stats()
	if !ok {
		return "n/a"
	}
	if len(s.vals) == 1 || lo == hi {
		return f(med)
	}
	return fmt.Sprintf("%s (%s–%s)", f(med), f(lo), f(hi))
}

// number formatters
func fmtUs(v float64) string {
	switch {
	case v >= 100000:
		return fmt.Sprintf("%.0f ms", v/1000)
	case v >= 10000:
		return fmt.Sprintf("%.1f ms", v/1000)
	case v >= 100:
		return fmt.Sprintf("%.0f µs", v)
	}
	return fmt.Sprintf("%.1f µs", v)
}

func fmtInt(v float64) string { return fmt.Sprintf("%.0f", v) }

func fmt1(v float64) string { return fmt.Sprintf("%.1f", v) }

func fmt2(v float64) string { return fmt.Sprintf("%.2f", v) }

func fmtSec(v float64) string {
	if v < 1 {
		return fmt.Sprintf("%.0f ms", v*1000)
	}
	return fmt.Sprintf("%.2f s", v)
}

// fmtSlow formats a slowest-script figure where 0 means none was logged.
func fmtSlow(v float64) string {
	if v == 0 {
		return fmt.Sprintf("< %d µs", slowThresholdUs)
	}
	return fmtUs(v)
}
