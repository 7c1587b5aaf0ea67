package service_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/service"
)

func TestReload(t *testing.T) {
	t.Parallel()
	const before = `
limits:
  - name: api
    key: [user]
    algorithm: fixed_window
    limit: 1/h
`
	const after = `
limits:
  - name: api
    key: [user]
    algorithm: fixed_window
    limit: 5/h
  - name: route-cap
    match: {route: /v1/*}
    key: [user]
    algorithm: sliding_log
    limit: 2/h
    failure_mode: closed
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, before, t0)
		u := D{"user": "u", "route": "/v1/chat"}
		if v := e.svc.ConfigVersion(); v != 1 {
			t.Errorf("version at start = %d, want 1", v)
		}
		if d := e.check(u, 1); !d.Allowed || !slices.Equal(names(d), []string{"api"}) {
			t.Fatalf("before reload: %s", describe(d))
		}
		if d := e.check(u, 1); d.Allowed {
			t.Fatalf("second request under 1/h: %s, want denied", describe(d))
		}

		e.svc.Reload(testkit.ParseConfig(t, after))
		if v := e.svc.ConfigVersion(); v != 2 {
			t.Errorf("version after a reload = %d, want 2", v)
		}
		// The new limits apply at once; the budget of a limit that keeps its
		// name and key keeps what it counted (1 of the new 5).
		d := e.check(u, 1)
		if !d.Allowed || !slices.Equal(names(d), []string{"api", "route-cap"}) || mustOutcome(t, d, "api").Remaining != 3 {
			t.Fatalf("after reload: %s, want allowed by api (3 left of 5) and route-cap", describe(d))
		}
		infos := e.svc.Limits()
		if len(infos) != 2 || infos[1].Name != "route-cap" || infos[1].Algorithm != tokenlimit.SlidingLog || infos[1].Quota != 2 ||
			infos[1].PeriodMs != 3600000 || infos[1].FailOpen || infos[1].Match["route"] != "/v1/*" {
			t.Errorf("Limits() after reload = %+v", infos)
		}

		// A rejected file changes nothing.
		e.svc.ReloadFailed("bad.yaml", errors.New("bad.yaml:3: limits[0].name: bad"))
		if v := e.svc.ConfigVersion(); v != 2 {
			t.Errorf("version after a failed reload = %d, want 2", v)
		}
		if d := e.check(u, 1); !d.Allowed || len(d.Limits) != 2 {
			t.Fatalf("after a failed reload: %s, want the reloaded limits still in force", describe(d))
		}
		if d := e.check(u, 1); d.Allowed || mustOutcome(t, d, "route-cap").Allowed {
			t.Fatalf("third request under route-cap 2/h: %s, want denied by it", describe(d))
		}

		e.svc.Reload(testkit.ParseConfig(t, before))
		if v := e.svc.ConfigVersion(); v != 3 {
			t.Errorf("version after a second reload = %d, want 3", v)
		}
		if got := testkit.Metric(t, e.reg, "tokenlimit_config_reloads_total", "result", "ok"); got != 2 {
			t.Errorf("reloads ok = %v, want 2", got)
		}
		if got := testkit.Metric(t, e.reg, "tokenlimit_config_reloads_total", "result", "error"); got != 1 {
			t.Errorf("reloads error = %v, want 1", got)
		}
	})
}

func TestInspectAndReset(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: bucket
    key: [user]
    algorithm: token_bucket
    capacity: 10
    refill: 1/h
  - name: log
    key: [user]
    algorithm: sliding_log
    limit: 5/h
  - name: trial
    key: [user]
    algorithm: gcra
    rate: 1/h
    max_burst: 2
    shadow: true
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, yml, t0)
		ctx := context.Background()
		u := D{"user": "u"}
		d := e.inspect(u)
		if !d.Allowed || !slices.Equal(names(d), []string{"bucket", "log", "trial"}) {
			t.Fatalf("Inspect of a fresh user: %s", describe(d))
		}
		for _, o := range d.Limits {
			if o.Remaining != o.Limit || o.Cost != 0 {
				t.Errorf("fresh %s: %s, want full and cost 0", o.Name, describe(d))
			}
		}
		e.check(u, 3)
		for range 3 { // inspecting charges nothing
			d = e.inspect(u)
		}
		if b, l, tr := mustOutcome(t, d, "bucket"), mustOutcome(t, d, "log"), mustOutcome(t, d, "trial"); b.Remaining != 7 || l.Remaining != 2 || tr.Remaining != 0 || !tr.Shadow {
			t.Fatalf("after a check of 3: %s, want remaining 7, 2 and (shadow) 0", describe(d))
		}
		if d := e.inspect(D{"route": "/x"}); !d.Allowed || len(d.Limits) != 0 {
			t.Errorf("Inspect selecting nothing: %s", describe(d))
		}

		keys, err := e.svc.Reset(ctx, service.Request{Descriptors: u}, "log")
		if err != nil || !slices.Equal(keys, []string{"log|user=u"}) {
			t.Fatalf("Reset(log) = %q, %v; want [log|user=u]", keys, err)
		}
		d = e.inspect(u)
		if b, l := mustOutcome(t, d, "bucket"), mustOutcome(t, d, "log"); b.Remaining != 7 || l.Remaining != 5 {
			t.Fatalf("after resetting log: %s, want bucket untouched (7) and log whole (5)", describe(d))
		}
		keys, err = e.svc.Reset(ctx, service.Request{Descriptors: u}, "")
		if err != nil || !slices.Equal(keys, []string{"bucket|user=u", "log|user=u", "trial|user=u"}) {
			t.Fatalf("Reset(all) = %q, %v", keys, err)
		}
		for _, o := range e.inspect(u).Limits {
			if o.Remaining != o.Limit {
				t.Errorf("after Reset(all): %s has %d of %d", o.Name, o.Remaining, o.Limit)
			}
		}
		if keys, err := e.svc.Reset(ctx, service.Request{Descriptors: u}, "no-such-limit"); err != nil || len(keys) != 0 {
			t.Errorf("Reset of an unknown limit = %q, %v; want nothing reset", keys, err)
		}
	})
}

func TestHealthHealthyStores(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - {name: a, algorithm: fixed_window, limit: 1/s}
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, yml, t0)
		e.check(D{"user": "u"}, 1)
		h := e.svc.Health()
		if h.Store != store || h.Breaker != "closed" || h.Degraded {
			t.Errorf("Health() = %+v, want store %s, breaker closed, not degraded", h, store)
		}
	})
}
