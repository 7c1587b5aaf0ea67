package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/plane"
	"github.com/tokenlimit/tokenlimit/service"
)

const planeYAML = `
plans:
  pro: {daily: 1000}
limits:
  - {name: rpm, key: [api_key], algorithm: fixed_window, limit: 100/min}
  - {name: burst, key: [api_key], algorithm: fixed_window, limit: 50/min}
`

// newPlaneEnv is a service with a plane on an in-memory store.
func newPlaneEnv(t *testing.T, store string) (*env, *plane.Plane) {
	t.Helper()
	var svc *service.Service
	p, err := plane.Open(context.Background(), plane.NewMemoryStore(), plane.Options{
		KnownPlan: func(name string) bool { return svc.KnownPlan(name) }, Logger: testkit.Quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, store, planeYAML, t0, func(o *service.Options) { o.Plane = p })
	svc = e.svc
	return e, p
}

func limitsJSON(s string) json.RawMessage { return json.RawMessage(s) }

// TestPlanePrecedence: a limit of the same name on the key replaces the
// team's, which replaces the plan's; limits of different names all apply;
// a team's limit is one budget for all its keys.
func TestPlanePrecedence(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e, p := newPlaneEnv(t, store)
		ctx := context.Background()
		if _, err := p.CreateTeam(ctx, plane.Spec{Name: "acme", Plan: "pro", Limits: limitsJSON(`[
			{"name": "rpm", "algorithm": "fixed_window", "limit": "10/min"},
			{"name": "team-rpm", "algorithm": "fixed_window", "limit": "4/min"}]`)}); err != nil {
			t.Fatal(err)
		}
		_, secret, err := p.CreateKey(ctx, plane.Spec{Name: "one", Team: "acme", Limits: limitsJSON(`[
			{"name": "rpm", "algorithm": "fixed_window", "limit": "3/min"},
			{"name": "own", "algorithm": "fixed_window", "limit": "7/min"}]`)})
		if err != nil {
			t.Fatal(err)
		}
		_, other, err := p.CreateKey(ctx, plane.Spec{Name: "two", Team: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		d := e.check(D{"api_key": secret}, 1)
		quota := map[string]int64{}
		for _, o := range d.Limits {
			quota[o.Name] = o.Limit
		}
		want := map[string]int64{"rpm": 3, "own": 7, "team-rpm": 4, "burst": 50, "plan-pro-daily": 1000}
		if len(quota) != len(want) {
			t.Fatalf("limits %v, want %v", quota, want)
		}
		for name, q := range want {
			if quota[name] != q {
				t.Errorf("limit %s: quota %d, want %d (all: %v)", name, quota[name], q, quota)
			}
		}
		// The other key of the team: the team's rpm (no key override)
		// and the team's budget, of which one call is spent.
		d = e.check(D{"api_key": other}, 1)
		i := slices.IndexFunc(d.Limits, func(o service.Outcome) bool { return o.Name == "team-rpm" })
		if i < 0 || d.Limits[i].Remaining != 2 {
			t.Fatalf("team-rpm for the second key: %+v, want 2 remaining of one shared budget", d.Limits)
		}
		if j := slices.IndexFunc(d.Limits, func(o service.Outcome) bool { return o.Name == "rpm" }); j < 0 || d.Limits[j].Limit != 10 {
			t.Fatalf("rpm for the second key: %+v, want the team's 10", d.Limits)
		}
		e.check(D{"api_key": secret}, 1)
		e.check(D{"api_key": secret}, 1)
		d = e.check(D{"api_key": other}, 1)
		if i := slices.IndexFunc(d.Limits, func(o service.Outcome) bool { return !o.Allowed }); d.Allowed || i < 0 || d.Limits[i].Name != "team-rpm" {
			t.Fatalf("the team's fifth call: %+v, want denied by team-rpm", d.Limits)
		}
	})
}

func TestPlaneRefusesUnknownAndRevokedKeys(t *testing.T) {
	t.Parallel()
	e, p := newPlaneEnv(t, testkit.Memory)
	ctx := context.Background()
	k, secret, err := p.CreateKey(ctx, plane.Spec{Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if d := e.check(D{"api_key": secret}, 1); !d.Allowed {
		t.Fatalf("a live key: %+v", d)
	}
	if err := p.DeleteKey(ctx, k.ID, plane.AnyVersion); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Check(ctx, service.Request{Descriptors: D{"api_key": secret}})
	if !errors.Is(err, service.ErrUnauthorized) {
		t.Fatalf("a revoked key: got %v, want ErrUnauthorized", err)
	}
	// An api key of another form is a descriptor like any other.
	if d := e.check(D{"api_key": "sk-other"}, 1); !d.Allowed {
		t.Fatalf("a key that is not the plane's: %+v", d)
	}
}

// TestPlaneOutcomeLevels: each outcome names where its limit comes from
// (the plan, the key's team, the key) and what it counts, in a decision,
// a denial and KeyUsage alike.
func TestPlaneOutcomeLevels(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e, p := newPlaneEnv(t, store)
		ctx := context.Background()
		if _, err := p.CreateTeam(ctx, plane.Spec{Name: "acme", Plan: "pro", Limits: limitsJSON(`[
			{"name": "usd-monthly", "unit": "usd", "algorithm": "fixed_window", "limit": "50.00/day", "calendar": "month"}]`)}); err != nil {
			t.Fatal(err)
		}
		k, secret, err := p.CreateKey(ctx, plane.Spec{Name: "laptop", Team: "acme", Limits: limitsJSON(`[
			{"name": "rpm", "algorithm": "fixed_window", "limit": "3/min"}]`)})
		if err != nil {
			t.Fatal(err)
		}
		type level struct {
			level      service.Level
			name       string
			unit       service.Unit
			used, left int64
		}
		// Limits without a cost charge the request's (Tokens).
		want := map[string]level{
			"rpm":            {service.LevelKey, "laptop", service.Tokens, 1, 2},
			"usd-monthly":    {service.LevelTeam, "acme", service.USD, 50_000_000, 0},
			"burst":          {service.LevelPlan, "pro", service.Tokens, 1, 49},
			"plan-pro-daily": {service.LevelPlan, "pro", service.Tokens, 1, 999},
		}
		levels := func(what string, got map[string]level, full bool) {
			t.Helper()
			if len(got) != len(want) {
				t.Fatalf("%s: %v, want %v", what, got, want)
			}
			for name, w := range want {
				g := got[name]
				if !full {
					g.used, g.left, w.used, w.left = 0, 0, 0, 0
				}
				if g != w {
					t.Errorf("%s of %s: %+v, want %+v", what, name, g, w)
				}
			}
		}
		d, err := e.svc.Check(ctx, service.Request{Descriptors: D{"api_key": secret}, Spend: 50_000_000})
		if err != nil || !d.Allowed {
			t.Fatalf("the first call: %+v, %v", d, err)
		}
		got := map[string]level{}
		for _, o := range d.Limits {
			got[o.Name] = level{level: o.Level, name: o.LevelName, unit: o.Unit}
		}
		levels("decision", got, false)
		d, err = e.svc.Check(ctx, service.Request{Descriptors: D{"api_key": secret}, Spend: 1})
		if err != nil || d.Allowed {
			t.Fatalf("a call past the team's budget: %+v, %v", d, err)
		}
		i := slices.IndexFunc(d.Limits, func(o service.Outcome) bool { return !o.Allowed })
		if o := d.Limits[i]; o.Name != "usd-monthly" || o.Level != service.LevelTeam || o.LevelName != "acme" || o.Unit != service.USD {
			t.Errorf("denied by %+v, want the team acme's usd-monthly", o)
		}
		us, err := e.svc.KeyUsage(ctx, k.ID)
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]level{}
		for _, u := range us {
			got[u.Name] = level{level: u.Level, name: u.LevelName, unit: u.Unit, used: u.Used, left: u.Remaining}
			if u.Name == "usd-monthly" && !u.Reset.Equal(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)) {
				t.Errorf("usd-monthly resets %v, want the month's end", u.Reset)
			}
		}
		levels("usage", got, true)
		// A call without a plane key: the configuration's limits, at the
		// level of the request's plan.
		d = e.check(D{"api_key": "sk-yaml", "plan": "pro"}, 1)
		for _, o := range d.Limits {
			if o.Level != service.LevelPlan || o.LevelName != "pro" {
				t.Errorf("a call without a plane key: %s at %v %q, want plan pro", o.Name, o.Level, o.LevelName)
			}
		}
	})
}

// TestPlaneLevelsAreOneCall: a call made with a plane key is decided
// against its own limits, its team's and its plan's in one store call, all
// or nothing: when the team's budget denies, the key's and the plan's
// budgets are not charged.
func TestPlaneLevelsAreOneCall(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		var counted *testkit.FaultStore
		var svc *service.Service
		p, err := plane.Open(context.Background(), plane.NewMemoryStore(), plane.Options{
			KnownPlan: func(name string) bool { return svc.KnownPlan(name) }, Logger: testkit.Quiet(),
		})
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, store, planeYAML, t0, func(o *service.Options) {
			o.Plane = p
			counted = &testkit.FaultStore{Store: o.Store}
			o.Store = counted
		})
		svc = e.svc
		ctx := context.Background()
		if _, err := p.CreateTeam(ctx, plane.Spec{Name: "acme", Plan: "pro", Limits: limitsJSON(`[{"name": "team-rpm", "algorithm": "fixed_window", "limit": "2/min"}]`)}); err != nil {
			t.Fatal(err)
		}
		_, secret, err := p.CreateKey(ctx, plane.Spec{Name: "one", Team: "acme", Limits: limitsJSON(`[{"name": "own", "algorithm": "sliding_log", "limit": "5/h"}]`)})
		if err != nil {
			t.Fatal(err)
		}
		key := D{"api_key": secret}
		levels := []string{"own", "team-rpm", "rpm", "burst", "plan-pro-daily"}
		for i := range 3 {
			left := map[string]int64{}
			for _, name := range levels {
				left[name] = e.remaining(key, name)
			}
			before := counted.Checks()
			d := e.check(key, 1)
			if calls := counted.Checks() - before; calls != 1 {
				t.Errorf("call %d made %d store calls, want 1 for the key's, team's and plan's limits", i+1, calls)
			}
			if got := names(d); len(got) != len(levels) {
				t.Errorf("call %d decided %v, want %v", i+1, got, levels)
			}
			if d.Allowed != (i < 2) {
				t.Fatalf("call %d: allowed %v, want %v (team-rpm 2/min): %s", i+1, d.Allowed, i < 2, describe(d))
			}
			for _, name := range levels {
				want := left[name] - 1
				if !d.Allowed {
					want = left[name]
				}
				if got := e.remaining(key, name); got != want {
					t.Errorf("call %d (allowed %v): %s has %d left, want %d", i+1, d.Allowed, name, got, want)
				}
			}
		}
	})
}

// TestPlaneKeyPlan: a call made with a plane key is on the key's plan,
// else its team's, else the configuration's default plan.
func TestPlaneKeyPlan(t *testing.T) {
	t.Parallel()
	const yml = `
default_plan: free
plans:
  free: {daily: 10}
  pro: {daily: 1000}
`
	var svc *service.Service
	p, err := plane.Open(context.Background(), plane.NewMemoryStore(), plane.Options{
		KnownPlan: func(name string) bool { return svc.KnownPlan(name) }, Logger: testkit.Quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, testkit.Memory, yml, t0, func(o *service.Options) { o.Plane = p })
	svc = e.svc
	ctx := context.Background()
	if _, err := p.CreateTeam(ctx, plane.Spec{Name: "acme", Plan: "pro"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.CreateTeam(ctx, plane.Spec{Name: "plain"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		spec plane.Spec
		plan string
	}{
		{plane.Spec{Name: "own plan", Plan: "pro"}, "pro"},
		{plane.Spec{Name: "team's plan", Team: "acme"}, "pro"},
		{plane.Spec{Name: "own over team's", Team: "acme", Plan: "free"}, "free"},
		{plane.Spec{Name: "team without a plan", Team: "plain"}, "free"},
		{plane.Spec{Name: "no team, no plan"}, "free"},
	} {
		_, secret, err := p.CreateKey(ctx, c.spec)
		if err != nil {
			t.Fatal(err)
		}
		d := e.check(D{"api_key": secret}, 1)
		if got := names(d); !slices.Equal(got, []string{"plan-" + c.plan + "-daily"}) {
			t.Errorf("%s: limits %v, want plan %s's", c.spec.Name, got, c.plan)
		}
	}
}
