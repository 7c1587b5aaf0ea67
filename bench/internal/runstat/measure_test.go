package runstat

import (
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	in := []time.Duration{3, 1, 2}
	if got := Median(in); got != 2 || in[0] != 3 {
		t.Errorf("Median(%v) = %v (input now %v), want 2 and the input unchanged", []time.Duration{3, 1, 2}, got, in)
	}
}

func TestCPUTimeGrows(t *testing.T) {
	before, ok := CPUTime(0)
	if !ok {
		t.Fatal("CPUTime(0): no /proc/self/stat")
	}
	// Spin until the kernel has counted at least one more tick: a
	// condition, not a duration.
	for x := 0; ; x++ {
		if now, _ := CPUTime(0); now > before {
			break
		}
		_ = x * x
	}
	if _, ok := CPUTime(-1); ok {
		t.Error("CPUTime(-1): ok, want false for a process that cannot exist")
	}
}
