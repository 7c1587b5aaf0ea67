package stats

import (
	"errors"
	"sync"
	"testing"
	"time"
)

var statsBase = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// record counts one decision of the given limits, each with its result,
// decided at at in took, as the service does.
func record(st *Stats, at time.Time, took time.Duration, limits map[string]Result) {
	for name, r := range limits {
		st.Count(at, name, r)
	}
	st.Time(at, took)
}

func TestStatsWindow(t *testing.T) {
	t.Parallel()
	var st Stats
	if w := st.Window(statsBase, 10); len(w.Limits) != 0 || len(w.Checks) != 10 || w.From != statsBase.Unix()-9 {
		t.Fatalf("empty stats: %+v", w)
	}
	at := func(s int) time.Time { return statsBase.Add(time.Duration(s) * time.Second) }
	// Second 0: 2 allowed and 1 denied on "a", 1 shadow denial on "b".
	record(&st, at(0), 2*time.Millisecond, map[string]Result{"a": Allowed, "b": ShadowDenied})
	record(&st, at(0).Add(900*time.Millisecond), 4*time.Millisecond, map[string]Result{"a": Allowed})
	record(&st, at(0), 0, map[string]Result{"a": Denied}) // a reservation: not timed
	// Second 3: a fail-closed answer and a fail-open allowance.
	record(&st, at(3), time.Millisecond, map[string]Result{"a": FailClosed})
	record(&st, at(3), time.Millisecond, map[string]Result{"a": FailOpenAllowed})

	w := st.Window(at(3), 5)
	if w.From != at(-1).Unix() {
		t.Errorf("From %d, want %d", w.From, at(-1).Unix())
	}
	if len(w.Limits) != 2 || w.Limits[0].Name != "a" || w.Limits[1].Name != "b" {
		t.Fatalf("limits %+v", w.Limits)
	}
	a := w.Limits[0].Counts
	want := map[string][]int64{
		"allowed":           {0, 2, 0, 0, 0},
		"denied":            {0, 1, 0, 0, 0},
		"fail_closed":       {0, 0, 0, 0, 1},
		"fail_open_allowed": {0, 0, 0, 0, 1},
		"shadow_denied":     {0, 0, 0, 0, 0},
	}
	for r, name := range Results {
		if exp, ok := want[name]; ok && !equal(a[r], exp) {
			t.Errorf("a %s: %v, want %v", name, a[r], exp)
		}
	}
	if got := w.Limits[1].Counts[3]; !equal(got, []int64{0, 1, 0, 0, 0}) {
		t.Errorf("b shadow_denied: %v", got)
	}
	if !equal(w.Checks, []int64{0, 2, 0, 0, 2}) || !equal(w.LatencyMicros, []int64{0, 3000, 0, 0, 1000}) {
		t.Errorf("checks %v latency %v", w.Checks, w.LatencyMicros)
	}

	// After the ring has gone round, second 0's slot holds second 300's
	// counts only, and a straggler from second 0 is dropped.
	record(&st, at(Seconds), time.Millisecond, map[string]Result{"a": Denied})
	record(&st, at(0), time.Millisecond, map[string]Result{"a": Allowed})
	w = st.Window(at(Seconds), Seconds+50) // clamped
	if len(w.Checks) != Seconds || w.From != at(1).Unix() {
		t.Fatalf("window of %d seconds from %d", len(w.Checks), w.From)
	}
	last := len(w.Checks) - 1
	if a := w.Limits[0].Counts; a[0][last] != 0 || a[1][last] != 1 || a[6][2] != 1 || w.Checks[last] != 1 {
		t.Errorf("after wrapping: allowed %d denied %d fail_closed(3s) %d checks %d", a[0][last], a[1][last], a[6][2], w.Checks[last])
	}
	// A window that saw nothing lists no limits.
	if w := st.Window(at(10*Seconds), 60); len(w.Limits) != 0 {
		t.Errorf("idle window lists %+v", w.Limits)
	}
}

func TestStatsReloads(t *testing.T) {
	t.Parallel()
	var st Stats
	if _, _, _, ok := st.Reloads(); ok {
		t.Error("a fresh Stats reports a reload")
	}
	st.RecordReload(statsBase, 2, nil)
	st.RecordReload(statsBase.Add(time.Minute), 2, errors.New("limits.yaml:3: bad"))
	ok, failed, last, seen := st.Reloads()
	if ok != 1 || failed != 1 || !seen || last.Version != 2 || last.Err != "limits.yaml:3: bad" || !last.At.Equal(statsBase.Add(time.Minute)) {
		t.Errorf("reloads %d ok %d failed, last %+v", ok, failed, last)
	}
}

// Concurrent recording across a second boundary loses nothing (run with
// -race).
func TestStatsConcurrent(t *testing.T) {
	t.Parallel()
	var st Stats
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				at := statsBase.Add(time.Duration(i%2) * time.Second)
				st.Count(at, "a", Allowed)
				st.Count(at, string(rune('b'+g%3)), Denied)
				st.Time(at, time.Microsecond)
			}
		}()
	}
	wg.Wait()
	w := st.Window(statsBase.Add(time.Second), 2)
	var allowed, denied int64
	for _, l := range w.Limits {
		allowed += l.Counts[0][0] + l.Counts[0][1]
		denied += l.Counts[1][0] + l.Counts[1][1]
	}
	if allowed != goroutines*each || denied != goroutines*each || len(w.Limits) != 4 {
		t.Errorf("allowed %d denied %d over %d limits, want %d each over 4", allowed, denied, len(w.Limits), goroutines*each)
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// BenchmarkStatsRecord is the cost Stats adds to a decision of two limits.
func BenchmarkStatsRecord(b *testing.B) {
	var st Stats
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			st.Count(statsBase, "hard-cap", Allowed)
			st.Count(statsBase, "llm-budget", Allowed)
			st.Time(statsBase, time.Microsecond)
		}
	})
}
