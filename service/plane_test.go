package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

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
