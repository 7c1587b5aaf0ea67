package service_test

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/service"
)

func TestMetricsDecisions(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: enforced
    key: [user]
    algorithm: fixed_window
    limit: 20/h
  - name: trial
    key: [user]
    algorithm: fixed_window
    limit: 1/h
    shadow: true
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, yml, t0)
		u := D{"user": "u"}
		for range 19 {
			e.check(u, 1)
		}
		e.check(u, 1) // the 20th leaves 0 < 10% of 20: near the limit
		e.check(u, 1) // denied
		e.check(u, 5) // denied
		want := map[[2]string]float64{
			{"enforced", "allowed"}:           20,
			{"enforced", "denied"}:            2,
			{"trial", "shadow_allowed"}:       1,
			{"trial", "shadow_denied"}:        19,
			{"enforced", "fail_open_allowed"}: 0,
			{"enforced", "fail_closed"}:       0,
		}
		for k, v := range want {
			if got := testkit.Metric(t, e.reg, "tokenlimit_decisions_total", "limit", k[0], "result", k[1]); got != v {
				t.Errorf("decisions{limit=%s,result=%s} = %v, want %v", k[0], k[1], got, v)
			}
		}
		// Labels name limits and results, never keys.
		for _, ls := range metricLabels(t, e.reg, "tokenlimit_decisions_total") {
			if !slices.Contains([]string{
				"limit=enforced,result=allowed", "limit=enforced,result=denied",
				"limit=trial,result=shadow_allowed", "limit=trial,result=shadow_denied",
			}, ls) {
				t.Errorf("unexpected decision labels %q", ls)
			}
		}
		// Allowed decisions leaving less than 10%: the 19th (1 left) and the
		// 20th (0 left) of enforced; every shadow decision of trial that was
		// allowed left 0 of 1.
		if got := testkit.Metric(t, e.reg, "tokenlimit_near_limit_total", "limit", "enforced"); got != 2 {
			t.Errorf("near_limit{enforced} = %v, want 2", got)
		}
		if got := testkit.Metric(t, e.reg, "tokenlimit_decision_seconds"); got != 22 {
			t.Errorf("decision latency samples = %v, want 22 (one per Check)", got)
		}
		if got := testkit.Metric(t, e.reg, "tokenlimit_store_errors_total", "store", "default"); got != 0 {
			t.Errorf("store errors on a healthy store = %v, want 0", got)
		}
		if got := testkit.Metric(t, e.reg, "tokenlimit_breaker_state", "store", "default"); got != 0 {
			t.Errorf("breaker state = %v, want 0 (closed)", got)
		}
	})
}

// Two services cannot share a registry by accident: New reports the clash.
func TestMetricsRegisterTwice(t *testing.T) {
	t.Parallel()
	cfg := testkit.ParseConfig(t, "limits:\n  - {name: a, algorithm: fixed_window, limit: 1/s}\n")
	reg := prometheus.NewRegistry()
	st, _ := memstore.New(memstore.Options{})
	if _, err := service.New(cfg, service.Options{Store: st, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := service.New(cfg, service.Options{Store: st, Registerer: reg}); err == nil {
		t.Error("a second service on the same registry: no error")
	}
	if _, err := service.New(cfg, service.Options{Store: st}); err != nil {
		t.Errorf("no registerer: %v", err)
	}
}
