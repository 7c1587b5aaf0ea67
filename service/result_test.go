package service

import (
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/service/stats"
)

// Each kind of outcome is counted under the result the metrics document
// (docs/operations.md): the table is written out, not derived from the code.
func TestStatsCountsEachResult(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		unavailable, shadow, failOpen, allowed bool
		want                                   string
	}{
		{false, false, false, true, "allowed"},
		{false, false, false, false, "denied"},
		{false, true, false, true, "shadow_allowed"},
		{false, true, false, false, "shadow_denied"},
		{false, false, true, true, "fail_open_allowed"},
		{false, false, true, false, "fail_open_denied"},
		{true, false, true, true, "fail_open_allowed"}, // the store failed; the local budget answered
		{true, false, false, false, "fail_closed"},
	} {
		m, err := newMetrics(nil)
		if err != nil {
			t.Fatal(err)
		}
		o := Outcome{Name: "x", Shadow: tt.shadow, FailOpen: tt.failOpen, Result: tokenlimit.Result{Allowed: tt.allowed}}
		m.observe(Decision{At: at, Unavailable: tt.unavailable, Limits: []Outcome{o}}, time.Millisecond)
		w := m.stats.Window(at, 1)
		var got []string
		for r, name := range stats.Results {
			if len(w.Limits) == 1 && w.Limits[0].Counts[r][0] == 1 {
				got = append(got, name)
			}
		}
		if len(got) != 1 || got[0] != tt.want {
			t.Errorf("%+v: counted as %v, want [%s]", tt, got, tt.want)
		}
	}
}
