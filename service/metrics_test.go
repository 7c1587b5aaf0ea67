package service_test

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

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
	eachStore(t, func(t *testing.T, store string) {
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
			if got := metric(t, e.reg, "tokenlimit_decisions_total", "limit", k[0], "result", k[1]); got != v {
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
		if got := metric(t, e.reg, "tokenlimit_near_limit_total", "limit", "enforced"); got != 2 {
			t.Errorf("near_limit{enforced} = %v, want 2", got)
		}
		if got := metric(t, e.reg, "tokenlimit_decision_seconds"); got != 22 {
			t.Errorf("decision latency samples = %v, want 22 (one per Check)", got)
		}
		if got := metric(t, e.reg, "tokenlimit_store_errors_total"); got != 0 {
			t.Errorf("store errors on a healthy store = %v, want 0", got)
		}
		if got := metric(t, e.reg, "tokenlimit_breaker_state"); got != 0 {
			t.Errorf("breaker state = %v, want 0 (closed)", got)
		}
	})
}

// Two services cannot share a registry by accident: New reports the clash.
func TestMetricsRegisterTwice(t *testing.T) {
	t.Parallel()
	cfg := parseConfig(t, "limits:\n  - {name: a, algorithm: fixed_window, limit: 1/s}\n")
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

// The embedded store fails too, when it is full: failure modes then apply
// exactly as for Redis (fail-open limits decide on the local share, fail-closed
// ones answer unavailable), and each failure is counted.
func TestFailureModesOnAFullMemoryStore(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: open
    match: {route: /open}
    key: [user]
    algorithm: token_bucket
    capacity: 4
    refill: 1/h
    fail_open_share: 0.5
  - name: closed
    match: {route: /closed}
    key: [user]
    algorithm: fixed_window
    limit: 4/h
    failure_mode: closed
`
	st, err := memstore.New(memstore.Options{MaxKeys: 1})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, "memory", yml, t0, func(o *service.Options) { o.Store = st })
	if d := e.check(D{"user": "first", "route": "/open"}, 1); !d.Allowed || d.Limits[0].FailOpen {
		t.Fatalf("first key: %s, want decided by the store", describe(d))
	}
	// The store holds one key: any other fails. Fail-open: 2 of 4 locally.
	for i := range 4 {
		d := e.check(D{"user": "other", "route": "/open"}, 1)
		o := mustOutcome(t, d, "open")
		if d.Allowed != (i < 2) || !o.FailOpen || d.Unavailable || o.Limit != 2 {
			t.Errorf("fail-open request %d: %s, want fail-open allowed=%v of a local budget of 2", i, describe(d), i < 2)
		}
	}
	d := e.check(D{"user": "other", "route": "/closed"}, 1)
	if d.Allowed || !d.Unavailable || len(d.Limits) != 1 || d.Limits[0].Name != "closed" || d.Limits[0].FailOpen {
		t.Errorf("fail-closed request: %s, want unavailable", describe(d))
	}
	for k, v := range map[string]float64{"fail_open_allowed": 2, "fail_open_denied": 2} {
		if got := metric(t, e.reg, "tokenlimit_decisions_total", "limit", "open", "result", k); got != v {
			t.Errorf("decisions{open,%s} = %v, want %v", k, got, v)
		}
	}
	if got := metric(t, e.reg, "tokenlimit_decisions_total", "limit", "closed", "result", "fail_closed"); got != 1 {
		t.Errorf("decisions{closed,fail_closed} = %v, want 1", got)
	}
	if got := metric(t, e.reg, "tokenlimit_store_errors_total"); got != 5 {
		t.Errorf("store errors = %v, want 5", got)
	}
	// The breaker only guards remote stores.
	if h := e.svc.Health(); h.Degraded {
		t.Errorf("Health() = %+v: the embedded store has no breaker", h)
	}
}
