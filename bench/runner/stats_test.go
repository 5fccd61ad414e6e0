package runner

import (
	"math"
	"testing"
)

func TestInversions(t *testing.T) {
	for _, c := range []struct {
		grant []int64
		want  int
	}{
		{nil, 0},
		{[]int64{1, 2, 3, 4}, 0},
		{[]int64{4, 3, 2, 1}, 6},
		{[]int64{2, 1, 3, 4}, 1},
		{[]int64{1, 3, 2, 5, 4}, 2},
	} {
		if got := inversions(c.grant); got != c.want {
			t.Errorf("inversions(%v) = %d, want %d", c.grant, got, c.want)
		}
	}
}

func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	if got := percentile(append([]float64(nil), xs...), 50); got != 5 {
		t.Errorf("p50 = %v, want 5", got)
	}
	if got := percentile(append([]float64(nil), xs...), 99); got != 10 {
		t.Errorf("p99 = %v, want 10", got)
	}
	if got := percentile(nil, 50); !math.IsNaN(got) {
		t.Errorf("p50 of nothing = %v, want NaN", got)
	}
	var s summary
	for _, v := range []float64{3, math.NaN(), 1, 2} {
		s.add(v)
	}
	if med, lo, hi, ok := s.stats(); !ok || med != 2 || lo != 1 || hi != 3 {
		t.Errorf("stats = %v %v %v %v, want 2 1 3 true", med, lo, hi, ok)
	}
	if got := s.cell(fmtInt); got != "2 (1–3)" {
		t.Errorf("cell = %q", got)
	}
}
