package service_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/plane"
	"github.com/tokenlimit/tokenlimit/service"
)

const authYAML = planeYAML + `
api_keys:
  sk-yaml-0001: {user: yaml}
  tl-listed-in-the-yaml: {user: listed}
`

// TestAuthenticate: a key of api_keys stands as it is; a plane secret
// gives the request as its key makes it (the key's value, never the
// secret, and its team's and plan's limits, decided as the secret itself
// would be); a refused secret says why; anything else is unknown.
func TestAuthenticate(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		var e *env
		p, err := plane.Open(context.Background(), plane.NewMemoryStore(), plane.Options{
			KnownPlan: func(name string) bool { return e.svc.KnownPlan(name) }, Logger: testkit.Quiet(),
			Clock: func() time.Time { return e.clock.Now() },
		})
		if err != nil {
			t.Fatal(err)
		}
		e = newEnv(t, store, authYAML, t0, func(o *service.Options) { o.Plane = p })
		ctx := context.Background()
		if _, err := p.CreateTeam(ctx, plane.Spec{Name: "acme", Plan: "pro", Limits: limitsJSON(`[{"name": "team-rpm", "algorithm": "fixed_window", "limit": "4/min"}]`)}); err != nil {
			t.Fatal(err)
		}
		k, secret, err := p.CreateKey(ctx, plane.Spec{Name: "one", Team: "acme", Limits: limitsJSON(`[{"name": "rpm", "algorithm": "fixed_window", "limit": "3/min"}]`)})
		if err != nil {
			t.Fatal(err)
		}
		auth := func(apiKey string) (service.Request, *plane.Key, error) {
			return e.svc.Authenticate(service.Request{Descriptors: D{"api_key": apiKey, "ip": "192.0.2.1"}, Cost: 1})
		}

		for _, listed := range []string{"sk-yaml-0001", "tl-listed-in-the-yaml"} {
			req, key, err := auth(listed)
			if err != nil || key != nil || req.Descriptors["api_key"] != listed {
				t.Errorf("%s, listed under api_keys: %v, key %v, descriptors %v; want it as it is", listed, err, key, req.Descriptors)
			}
		}

		req, key, err := auth(secret)
		if err != nil || key == nil || key.ID != k.ID {
			t.Fatalf("the plane key: %v, key %v; want key %s", err, key, k.ID)
		}
		want := D{"api_key": "plane:" + k.ID, "team": "acme", "plan": "pro", "ip": "192.0.2.1"}
		if len(req.Descriptors) != len(want) {
			t.Errorf("descriptors %v, want %v", req.Descriptors, want)
		}
		for name, v := range want {
			if req.Descriptors[name] != v {
				t.Errorf("descriptor %s = %q, want %q (all: %v)", name, req.Descriptors[name], v, req.Descriptors)
			}
		}
		d, err := e.svc.Check(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		quota := map[string]int64{}
		for _, o := range d.Limits {
			quota[o.Name] = o.Limit
		}
		if quota["rpm"] != 3 || quota["team-rpm"] != 4 || quota["plan-pro-daily"] != 1000 || quota["burst"] != 50 || len(quota) != 4 {
			t.Fatalf("limits %v: want the key's rpm (3), the team's team-rpm (4), the plan's daily and burst", quota)
		}
		// The same budgets as the secret itself selects.
		if left := e.remaining(D{"api_key": secret}, "rpm"); left != 2 {
			t.Errorf("rpm read with the secret: %d left, want 2", left)
		}

		for _, unknown := range []string{"", "sk-nobody"} {
			if _, key, err := auth(unknown); !errors.Is(err, service.ErrUnknownAPIKey) || key != nil {
				t.Errorf("%q: %v, key %v; want ErrUnknownAPIKey", unknown, err, key)
			}
		}
		if _, _, err := auth("tl-0000"); !errors.Is(err, service.ErrUnauthorized) || !errors.Is(err, plane.ErrUnknownKey) {
			t.Errorf("an unknown secret: %v, want ErrUnauthorized, plane.ErrUnknownKey", err)
		}
		_, expiring, err := p.CreateKey(ctx, plane.Spec{Name: "short", ExpiresAt: t0.Add(time.Minute).Format(time.RFC3339)})
		if err != nil {
			t.Fatal(err)
		}
		_, disabled, err := p.CreateKey(ctx, plane.Spec{Name: "off", Disabled: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := auth(disabled); !errors.Is(err, service.ErrUnauthorized) || !errors.Is(err, plane.ErrKeyDisabled) {
			t.Errorf("a disabled key: %v, want ErrUnauthorized, plane.ErrKeyDisabled", err)
		}
		if _, _, err := auth(expiring); err != nil {
			t.Errorf("a key before its expiry: %v", err)
		}
		e.clock.Advance(time.Minute)
		if _, _, err := auth(expiring); !errors.Is(err, service.ErrUnauthorized) || !errors.Is(err, plane.ErrKeyExpired) {
			t.Errorf("an expired key: %v, want ErrUnauthorized, plane.ErrKeyExpired", err)
		}
		if err := p.DeleteKey(ctx, k.ID, plane.AnyVersion); err != nil {
			t.Fatal(err)
		}
		if _, _, err := auth(secret); !errors.Is(err, service.ErrUnauthorized) || !errors.Is(err, plane.ErrUnknownKey) {
			t.Errorf("a revoked key: %v, want ErrUnauthorized, plane.ErrUnknownKey", err)
		}
	})
}

// TestAuthenticateWithoutAPlane: with no plane, a secret's form is a key
// like any other, unknown unless listed.
func TestAuthenticateWithoutAPlane(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testkit.Memory, authYAML, t0)
	if _, _, err := e.svc.Authenticate(service.Request{Descriptors: D{"api_key": "tl-0000"}}); !errors.Is(err, service.ErrUnknownAPIKey) {
		t.Errorf("a secret without a plane: %v, want ErrUnknownAPIKey", err)
	}
	if _, _, err := e.svc.Authenticate(service.Request{Descriptors: D{"api_key": "tl-listed-in-the-yaml"}}); err != nil {
		t.Errorf("a listed key: %v", err)
	}
}

// failures is a caller's own limit: 2 per hour per ip, remembered locally
// once denied.
var failures = &config.Limit{Name: "test:failures", Key: []string{"ip"}, Limit: tokenlimit.TokenBucketLimit(2, 2, time.Hour),
	Cost: config.Cost{Constant: 1}, FailOpen: true, FailOpenShare: 1, LocalCache: true}

// TestCheckLimit: a caller's own limit is decided on the store like a
// configured one, counted in the same metrics; its denial is remembered
// (LocalDenial) until its retry-after, and a refund of a reservation does
// not drop it; a request without its key's descriptor is not charged.
func TestCheckLimit(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		var counted *countingStore
		e := newEnv(t, store, `
limits:
  - {name: tokens, key: [user], algorithm: token_bucket, capacity: 100, refill: 100/min}
`, t0, func(o *service.Options) {
			counted = &countingStore{Store: o.Store}
			o.Store = counted
		})
		ctx := context.Background()
		addr := D{"ip": "192.0.2.1"}
		if _, ok := e.svc.LocalDenial(failures, addr); ok {
			t.Fatal("a denial before any check")
		}
		for i := range 2 {
			if d, err := e.svc.CheckLimit(ctx, failures, addr); err != nil || !d.Allowed {
				t.Fatalf("check %d: %v, %s; want allowed", i, err, describe(d))
			}
		}
		d, err := e.svc.CheckLimit(ctx, failures, addr)
		if err != nil || d.Allowed || counted.checks.Load() != 3 {
			t.Fatalf("third check: %v, %s after %d store calls; want denied by the store", err, describe(d), counted.checks.Load())
		}
		o := mustOutcome(t, d, "test:failures")
		if o.Key != "test:failures|ip=192.0.2.1" || o.RetryAfter != 30*time.Minute {
			t.Errorf("outcome %+v: want key test:failures|ip=192.0.2.1, retry after 30m", o)
		}
		if other, err := e.svc.CheckLimit(ctx, failures, D{"ip": "192.0.2.2"}); err != nil || !other.Allowed {
			t.Errorf("another address: %v, %s; want its own budget", err, describe(other))
		}
		// A reservation settled below its estimate refunds: the cached
		// denials of configured limits go, the caller's own stay.
		if _, err := e.svc.Reserve(ctx, "r1", service.Request{Descriptors: D{"user": "u"}, Cost: 50}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.Settle(ctx, "r1", 10); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(10 * time.Minute)
		held, ok := e.svc.LocalDenial(failures, addr)
		if !ok || held.Allowed || mustOutcome(t, held, "test:failures").RetryAfter != 20*time.Minute {
			t.Fatalf("after a refund, 10 minutes on: %v %s; want the denial held, 20m left", ok, describe(held))
		}
		if _, ok := e.svc.LocalDenial(failures, D{"ip": "192.0.2.2"}); ok {
			t.Error("a denial held for an address the store admitted")
		}
		e.clock.Advance(20 * time.Minute)
		if _, ok := e.svc.LocalDenial(failures, addr); ok {
			t.Error("a denial held past its retry-after")
		}
		before := counted.checks.Load()
		if d, err := e.svc.CheckLimit(ctx, failures, D{"user": "no ip"}); err != nil || !d.Allowed || len(d.Limits) != 0 || counted.checks.Load() != before {
			t.Errorf("no ip: %v, %s; want admitted without a store call", err, describe(d))
		}
		if _, err := e.svc.CheckLimit(ctx, failures, D{"ip": "\xff"}); !errors.Is(err, service.ErrInvalidRequest) {
			t.Errorf("an invalid descriptor: %v, want ErrInvalidRequest", err)
		}
		if got := testkit.Metric(t, e.reg, "tokenlimit_decisions_total", "limit", "test:failures", "result", "denied"); got != 1 {
			t.Errorf("tokenlimit_decisions_total{limit=test:failures,result=denied} = %v, want 1", got)
		}
	})
}
