package service_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/service"
)

func TestMatching(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: everyone
    algorithm: fixed_window
    limit: 1000/min
  - name: any-route
    match: {route: "*"}
    key: [user]
    algorithm: fixed_window
    limit: 1000/min
  - name: v1-prefix
    match: {route: /v1/*}
    key: [user]
    algorithm: fixed_window
    limit: 1000/min
  - name: exact-chat
    match: {route: /v1/chat, model: gpt-4o}
    key: [user, model]
    algorithm: fixed_window
    limit: 1000/min
  - name: per-tenant
    key: [tenant]
    algorithm: fixed_window
    limit: 1000/min
  - name: custom
    match: {region: eu-*}
    key: [region]
    algorithm: fixed_window
    limit: 1000/min
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, yml, t0)
		tests := []struct {
			desc D
			want []string // limits in configuration order
		}{
			{D{"user": "a"}, []string{"everyone"}},
			{D{"user": "a", "route": "/v2/x"}, []string{"everyone", "any-route"}},
			{D{"user": "a", "route": "/v1/embed"}, []string{"everyone", "any-route", "v1-prefix"}},
			{D{"user": "a", "route": "/v1/"}, []string{"everyone", "any-route", "v1-prefix"}},
			{D{"user": "a", "route": "/v1"}, []string{"everyone", "any-route"}},
			{D{"user": "a", "route": "/v1/chat", "model": "gpt-4o"}, []string{"everyone", "any-route", "v1-prefix", "exact-chat"}},
			{D{"user": "a", "route": "/v1/chat", "model": "gpt-4o-mini"}, []string{"everyone", "any-route", "v1-prefix"}},
			{D{"user": "a", "route": "/v1/chat"}, []string{"everyone", "any-route", "v1-prefix"}},
			// No user: every limit keyed by user is skipped, whatever matches.
			{D{"route": "/v1/chat", "model": "gpt-4o"}, []string{"everyone"}},
			// An empty value is a missing descriptor.
			{D{"user": "", "route": "/v1/chat", "model": "gpt-4o"}, []string{"everyone"}},
			{D{"user": "a", "route": ""}, []string{"everyone"}},
			{D{"user": "a", "tenant": "acme"}, []string{"everyone", "per-tenant"}},
			{D{"region": "eu-west"}, []string{"everyone", "custom"}},
			{D{"region": "us-east"}, []string{"everyone"}},
			{nil, []string{"everyone"}},
		}
		for _, tt := range tests {
			d := e.check(tt.desc, 1)
			if got := names(d); !slices.Equal(got, tt.want) || !d.Allowed {
				t.Errorf("Check(%v): limits %v allowed=%v, want %v allowed", tt.desc, got, d.Allowed, tt.want)
			}
		}
		// Keys are built from the key dimensions, in the configured order.
		d := e.check(D{"user": "a", "route": "/v1/chat", "model": "gpt-4o", "tenant": "acme"}, 1)
		wantKeys := map[string]string{
			"everyone":   "everyone",
			"any-route":  "any-route|user=a",
			"exact-chat": "exact-chat|user=a|model=gpt-4o",
			"per-tenant": "per-tenant|tenant=acme",
		}
		for name, key := range wantKeys {
			if o := mustOutcome(t, d, name); o.Key != key {
				t.Errorf("%s: key %q, want %q", name, o.Key, key)
			}
		}
	})
}

// A value containing the key syntax ('|', '=') or a Redis Cluster hash tag
// ('{', '}') must not reach another request's budget.
func TestKeyEscaping(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: one-shot
    key: [user, tenant]
    algorithm: fixed_window
    limit: 1/h
`
	// Each group holds descriptors whose keys collide if values are pasted
	// into "one-shot|user=<user>|tenant=<tenant>" as they are.
	requests := []D{
		{"user": "a|tenant=b", "tenant": "c"},
		{"user": "a", "tenant": "b|tenant=c"},
		{"user": "a=", "tenant": "b"},
		{"user": "a", "tenant": "=b"},
		{"user": "{x}", "tenant": "y"},
		{"user": "{x", "tenant": "}y"},
		{"user": "x}", "tenant": "{y"},
		{"user": "a%7Cb", "tenant": "t"}, // an escaped form, given literally
		{"user": "a|b", "tenant": "t"},
		{"user": "a b", "tenant": "t"},
		{"user": "a+b", "tenant": "t"},
		{"user": "a%20b", "tenant": "t"},
		{"user": "é", "tenant": "t"},
		{"user": "%C3%A9", "tenant": "t"},
	}
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, yml, t0)
		seen := map[string]D{}
		for _, desc := range requests {
			d := e.check(desc, 1)
			o := mustOutcome(t, d, "one-shot")
			if !d.Allowed {
				t.Errorf("first request of %q was denied: it shares a budget with an earlier one (key %q)", desc, o.Key)
			}
			if other, dup := seen[o.Key]; dup {
				t.Errorf("%q and %q share the key %q", desc, other, o.Key)
			}
			seen[o.Key] = desc
			if strings.ContainsAny(o.Key, "{}") || strings.Count(o.Key, "|") != 2 || strings.Count(o.Key, "=") != 2 {
				t.Errorf("key %q of %q: values are not escaped", o.Key, desc)
			}
		}
		// Each budget is really its own: the second request of each is denied.
		for _, desc := range requests {
			if d := e.check(desc, 1); d.Allowed {
				t.Errorf("second request of %q was allowed by a budget of 1", desc)
			}
		}
	})
}

func TestCostForms(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: constant
    key: [user]
    algorithm: token_bucket
    capacity: 100
    refill: 1/h
    cost: 5
  - name: by-route
    key: [user]
    algorithm: token_bucket
    capacity: 100
    refill: 1/h
    cost: {by: route, weights: {/v1/chat: 1, /v1/embed: 3}, default: 2}
  - name: by-model
    key: [user]
    algorithm: sliding_log
    limit: 1000/h
    cost: {by: model, weights: {gpt-4o: 10, gpt-4o-mini: 1}}
  - name: tokens
    key: [user]
    algorithm: fixed_window
    limit: 100000/h
    cost: request
  - name: absent
    key: [user]
    algorithm: gcra
    rate: 1/h
    max_burst: 99999
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, yml, t0)
		tests := []struct {
			desc D
			cost int64
			want map[string]int64
		}{
			{D{"user": "a", "route": "/v1/embed", "model": "gpt-4o"}, 250,
				map[string]int64{"constant": 5, "by-route": 3, "by-model": 10, "tokens": 250, "absent": 250}},
			{D{"user": "b", "route": "/v1/chat", "model": "gpt-4o-mini"}, 7,
				map[string]int64{"constant": 5, "by-route": 1, "by-model": 1, "tokens": 7, "absent": 7}},
			// Unlisted values take the default (2 given, 1 when not given);
			// a request's cost of 0 means 1.
			{D{"user": "c", "route": "/v1/images", "model": "llama"}, 0,
				map[string]int64{"constant": 5, "by-route": 2, "by-model": 1, "tokens": 1, "absent": 1}},
			// A missing descriptor takes the default too.
			{D{"user": "d"}, 40,
				map[string]int64{"constant": 5, "by-route": 2, "by-model": 1, "tokens": 40, "absent": 40}},
		}
		capacity := map[string]int64{"constant": 100, "by-route": 100, "by-model": 1000, "tokens": 100000, "absent": 100000}
		for _, tt := range tests {
			d := e.check(tt.desc, tt.cost)
			if !d.Allowed || len(d.Limits) != len(tt.want) {
				t.Fatalf("Check(%v, %d) = %s", tt.desc, tt.cost, describe(d))
			}
			for name, cost := range tt.want {
				o := mustOutcome(t, d, name)
				if o.Cost != cost || o.Remaining != capacity[name]-cost {
					t.Errorf("Check(%v, %d): %s cost %d remaining %d, want cost %d remaining %d",
						tt.desc, tt.cost, name, o.Cost, o.Remaining, cost, capacity[name]-cost)
				}
			}
		}
	})
}

func TestAPIKeyEnrichment(t *testing.T) {
	t.Parallel()
	const yml = `
default_plan: free
limits:
  - name: per-user
    key: [user]
    algorithm: fixed_window
    limit: 100/min
  - name: per-tenant
    key: [tenant]
    algorithm: fixed_window
    limit: 100/min
  - name: per-plan
    key: [plan]
    algorithm: fixed_window
    limit: 100/min
plans:
  free: {daily: 1000}
  pro: {daily: 5000}
api_keys:
  sk-a: {user: alice, tenant: acme, plan: pro}
  sk-b: {user: bob}
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, yml, t0)
		tests := []struct {
			name string
			desc D
			want map[string]string // limit -> key
		}{
			{"the key's user, tenant and plan", D{"api_key": "sk-a"}, map[string]string{
				"per-user": "per-user|user=alice", "per-tenant": "per-tenant|tenant=acme", "per-plan": "per-plan|plan=pro",
				"plan-pro-daily": "plan-pro-daily|api_key=" + service.DigestAPIKey("sk-a") + "|2026-01-15",
			}},
			{"explicit descriptors win", D{"api_key": "sk-a", "user": "mallory", "plan": "free"}, map[string]string{
				"per-user": "per-user|user=mallory", "per-tenant": "per-tenant|tenant=acme", "per-plan": "per-plan|plan=free",
				"plan-free-daily": "plan-free-daily|api_key=" + service.DigestAPIKey("sk-a") + "|2026-01-15",
			}},
			{"an empty descriptor is filled in", D{"api_key": "sk-a", "user": ""}, map[string]string{
				"per-user": "per-user|user=alice", "per-tenant": "per-tenant|tenant=acme", "per-plan": "per-plan|plan=pro",
				"plan-pro-daily": "plan-pro-daily|api_key=" + service.DigestAPIKey("sk-a") + "|2026-01-15",
			}},
			{"a key without tenant or plan takes the default plan", D{"api_key": "sk-b"}, map[string]string{
				"per-user": "per-user|user=bob", "per-plan": "per-plan|plan=free",
				"plan-free-daily": "plan-free-daily|api_key=" + service.DigestAPIKey("sk-b") + "|2026-01-15",
			}},
			{"an unknown key adds nothing but the default plan", D{"api_key": "sk-unknown"}, map[string]string{
				"per-plan": "per-plan|plan=free", "plan-free-daily": "plan-free-daily|api_key=" + service.DigestAPIKey("sk-unknown") + "|2026-01-15",
			}},
			{"no api key: the plan quota, keyed by api_key, is skipped", D{"user": "carol"}, map[string]string{
				"per-user": "per-user|user=carol", "per-plan": "per-plan|plan=free",
			}},
		}
		for _, tt := range tests {
			d := e.check(tt.desc, 1)
			got := map[string]string{}
			for _, o := range d.Limits {
				got[o.Name] = o.Key
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("%s: Check(%v) limits %v, want %v", tt.name, tt.desc, got, tt.want)
			}
		}
	})
}

func TestOverrides(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: tokens
    key: [api_key]
    algorithm: token_bucket
    capacity: 10
    refill: 1/h
    cost: request
  - name: requests
    key: [api_key]
    algorithm: gcra
    rate: 1/h
    max_burst: 1
    cost: 1
  - name: window
    key: [user]
    algorithm: fixed_window
    limit: 3/h
    cost: 1
api_keys:
  sk-big:
    user: big
    overrides:
      tokens: {capacity: 100, refill: 1/h}
      requests: {rate: 1/h, max_burst: 4}
      window: {limit: 5/h}
  sk-small: {user: small}
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, yml, t0)
		small := e.check(D{"api_key": "sk-small"}, 7)
		big := e.check(D{"api_key": "sk-big"}, 7)
		for _, c := range []struct {
			d                service.Decision
			limit            string
			capacity, remain int64
		}{
			{small, "tokens", 10, 3}, {small, "requests", 2, 1}, {small, "window", 3, 2},
			{big, "tokens", 100, 93}, {big, "requests", 5, 4}, {big, "window", 5, 4},
		} {
			o := mustOutcome(t, c.d, c.limit)
			if !o.Allowed || o.Limit != c.capacity || o.Remaining != c.remain {
				t.Errorf("%s: %s, want limit %d remaining %d", c.limit, describe(c.d), c.capacity, c.remain)
			}
		}
		if d := e.check(D{"api_key": "sk-small"}, 7); d.Allowed {
			t.Errorf("sk-small's second 7 tokens of 10: %s, want denied", describe(d))
		}
		if d := e.check(D{"api_key": "sk-big"}, 7); !d.Allowed {
			t.Errorf("sk-big's second 7 tokens of 100: %s, want allowed", describe(d))
		}
		// The override follows the api key, not the user it maps to.
		if d := e.check(D{"user": "big"}, 1); mustOutcome(t, d, "window").Limit != 3 {
			t.Errorf("user big without its api key: %s, want the configured limit of 3", describe(d))
		}
	})
}

func TestDefaultPlanQuota(t *testing.T) {
	t.Parallel()
	const yml = `
default_plan: free
limits:
  - name: wide
    key: [api_key]
    algorithm: fixed_window
    limit: 1000/min
plans:
  free: {daily: 3}
  pro: {daily: 5}
api_keys:
  sk-pro: {plan: pro}
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, yml, t0)
		for i := range 4 {
			d := e.check(D{"api_key": "sk-anon"}, 1)
			o := mustOutcome(t, d, "plan-free-daily")
			if d.Allowed != (i < 3) || o.Limit != 3 {
				t.Errorf("default-plan request %d: %s, want allowed=%v by a daily quota of 3", i, describe(d), i < 3)
			}
		}
		for i := range 6 {
			d := e.check(D{"api_key": "sk-pro"}, 1)
			if _, free := outcome(d, "plan-free-daily"); free || d.Allowed != (i < 5) {
				t.Errorf("pro request %d: %s, want only the pro quota, allowed=%v", i, describe(d), i < 5)
			}
		}
		// A denied quota charged nothing else: wide has 1000-3 left for sk-anon.
		if got := e.remaining(D{"api_key": "sk-anon"}, "wide"); got != 997 {
			t.Errorf("wide after 3 allowed and 1 denied: remaining %d, want 997", got)
		}
	})
}

func TestShadow(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: enforced
    key: [user]
    algorithm: fixed_window
    limit: 3/h
  - name: trial
    key: [user]
    algorithm: fixed_window
    limit: 1/h
    shadow: true
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, yml, t0)
		u := D{"user": "u"}
		for i := range 3 {
			d := e.check(u, 1)
			o := mustOutcome(t, d, "trial")
			if !d.Allowed || !o.Shadow || o.Allowed != (i == 0) || mustOutcome(t, d, "enforced").Shadow {
				t.Errorf("request %d: %s, want allowed, trial shadow and allowed=%v", i, describe(d), i == 0)
			}
			if tight, ok := d.Tightest(); !ok || tight.Name != "enforced" {
				t.Errorf("request %d: Tightest = %+v, want the enforced limit (shadow limits never constrain)", i, tight)
			}
		}
		// The enforced limit denies: the shadow limit is not charged.
		before := e.remaining(u, "trial")
		if d := e.check(u, 1); d.Allowed {
			t.Fatalf("fourth request: %s, want denied by enforced", describe(d))
		}
		if after := e.remaining(u, "trial"); after != before {
			t.Errorf("trial remaining %d after a denied request, was %d: a denied request charged the shadow limit", after, before)
		}
		if got := testkit.Metric(t, e.reg, "tokenlimit_decisions_total", "limit", "trial", "result", "shadow_allowed"); got != 1 {
			t.Errorf("shadow_allowed decisions of trial = %v, want 1", got)
		}
		if got := testkit.Metric(t, e.reg, "tokenlimit_decisions_total", "limit", "trial", "result", "shadow_denied"); got != 2 {
			t.Errorf("shadow_denied decisions of trial = %v, want 2", got)
		}
	})
}

// Shadow limits on their own: a shadow denial does not deny.
func TestShadowOnly(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: trial
    key: [user]
    algorithm: token_bucket
    capacity: 2
    refill: 1/h
    shadow: true
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, yml, t0)
		for i := range 4 {
			d := e.check(D{"user": "u"}, 1)
			o := mustOutcome(t, d, "trial")
			if !d.Allowed || o.Allowed != (i < 2) {
				t.Errorf("request %d: %s, want allowed with the shadow limit allowed=%v", i, describe(d), i < 2)
			}
		}
	})
}

func TestMultiRequestCheckIsAtomic(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: per-user
    key: [user]
    algorithm: fixed_window
    limit: 5/h
    cost: request
  - name: per-route
    key: [route]
    algorithm: sliding_log
    limit: 100/h
    cost: 1
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, yml, t0)
		a := func(cost int64) service.Request {
			return service.Request{Descriptors: D{"user": "a", "route": "/a"}, Cost: cost}
		}
		b := func(cost int64) service.Request {
			return service.Request{Descriptors: D{"user": "b", "route": "/b"}, Cost: cost}
		}
		state := func() [4]int64 {
			return [4]int64{
				e.remaining(D{"user": "a"}, "per-user"), e.remaining(D{"user": "b"}, "per-user"),
				e.remaining(D{"route": "/a"}, "per-route"), e.remaining(D{"route": "/b"}, "per-route"),
			}
		}
		// b's cost can never fit: nothing is charged, a's budgets included.
		d := e.checkAll(a(3), b(6))
		if d.Allowed || !mustOutcome(t, d, "per-user").Allowed {
			t.Fatalf("Check(a 3, b 6) = %s, want denied by b only", describe(d))
		}
		if got, want := state(), [4]int64{5, 5, 100, 100}; got != want {
			t.Fatalf("after a denied pair: remaining %v, want %v (nothing charged)", got, want)
		}
		d = e.checkAll(a(3), b(2))
		if !d.Allowed || len(d.Limits) != 4 {
			t.Fatalf("Check(a 3, b 2) = %s, want allowed with 4 outcomes", describe(d))
		}
		for _, o := range d.Limits {
			want := 1 // the outcomes of a's budgets come from request 0
			if strings.HasSuffix(o.Key, "a") {
				want = 0
			}
			if o.Request != want {
				t.Errorf("outcome %s (%s) has Request %d, want %d", o.Name, o.Key, o.Request, want)
			}
		}
		if got, want := state(), [4]int64{2, 3, 99, 99}; got != want {
			t.Fatalf("after an allowed pair: remaining %v, want %v", got, want)
		}
		// Now a is the one that does not fit: b is not charged either.
		if d := e.checkAll(a(3), b(1)); d.Allowed {
			t.Fatalf("Check(a 3, b 1) = %s, want denied by a", describe(d))
		}
		if got, want := state(), [4]int64{2, 3, 99, 99}; got != want {
			t.Fatalf("after a denied pair: remaining %v, want %v (nothing charged)", got, want)
		}
	})
}

func TestInvalidRequests(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: per-user
    key: [user]
    algorithm: fixed_window
    limit: 5/h
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, yml, t0, func(o *service.Options) { o.MaxDescriptorLength = 16 })
		ctx := context.Background()
		ok := service.Request{Descriptors: D{"user": strings.Repeat("u", 16)}}
		if d := e.checkAll(ok); !d.Allowed {
			t.Fatalf("a value of exactly the cap: %s", describe(d))
		}
		tests := []struct {
			name  string
			reqs  []service.Request
			field string
		}{
			{"value over the cap", []service.Request{{Descriptors: D{"user": strings.Repeat("u", 17)}}}, "requests[0].descriptors.user"},
			{"in the second request", []service.Request{ok, {Descriptors: D{"route": strings.Repeat("r", 100)}}}, "requests[1].descriptors.route"},
			{"name over 64 bytes", []service.Request{{Descriptors: D{strings.Repeat("n", 65): "v"}}}, "requests[0].descriptors"},
			{"empty name", []service.Request{{Descriptors: D{"": "v"}}}, "requests[0].descriptors"},
			{"negative cost", []service.Request{{Descriptors: D{"user": "u"}, Cost: -1}}, "requests[0].cost"},
			{"cost over MaxCost", []service.Request{{Descriptors: D{"user": "u"}, Cost: 1<<40 + 1}}, "requests[0].cost"},
			{"value not UTF-8", []service.Request{{Descriptors: D{"user": "\xff"}}}, "requests[0].descriptors.user"},
			{"other value not UTF-8", []service.Request{ok, {Descriptors: D{"user": "a\xfe"}}}, "requests[1].descriptors.user"},
			{"name not UTF-8", []service.Request{{Descriptors: D{"us\xffer": "v"}}}, "requests[0].descriptors"},
		}
		for _, tt := range tests {
			_, err := e.svc.Check(ctx, tt.reqs...)
			if !errors.Is(err, service.ErrInvalidRequest) || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("%s: Check error %v, want ErrInvalidRequest naming %s", tt.name, err, tt.field)
			}
			_, err = e.svc.Reserve(ctx, "", tt.reqs...)
			if !errors.Is(err, service.ErrInvalidRequest) {
				t.Errorf("%s: Reserve error %v, want ErrInvalidRequest", tt.name, err)
			}
			if len(tt.reqs) == 1 {
				if _, err := e.svc.Inspect(ctx, tt.reqs[0]); !errors.Is(err, service.ErrInvalidRequest) {
					t.Errorf("%s: Inspect error %v, want ErrInvalidRequest", tt.name, err)
				}
				if _, err := e.svc.Reset(ctx, tt.reqs[0], ""); !errors.Is(err, service.ErrInvalidRequest) {
					t.Errorf("%s: Reset error %v, want ErrInvalidRequest", tt.name, err)
				}
			}
		}
		// Nothing was charged by the refused requests (the first was valid).
		if got := e.remaining(ok.Descriptors, "per-user"); got != 4 {
			t.Errorf("remaining %d after refused requests, want 4", got)
		}
		if got := testkit.Metric(t, e.reg, "tokenlimit_decisions_total", "limit", "per-user", "result", "allowed"); got != 1 {
			t.Errorf("allowed decisions = %v, want 1: refused requests are not decisions", got)
		}
	})
}

// Each shadow limit must be a dry run of enforcing it: whether one shadow
// limit is over its budget must not decide whether another is charged.
func TestShadowLimitsAreChargedIndependently(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: enforced
    key: [user]
    algorithm: fixed_window
    limit: 100/h
  - name: shadow-tight
    key: [user]
    algorithm: fixed_window
    limit: 1/h
    shadow: true
  - name: shadow-loose
    key: [user]
    algorithm: fixed_window
    limit: 10/h
    shadow: true
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, yml, t0)
		for range 3 {
			e.check(D{"user": "u"}, 1)
		}
		// Three requests were admitted: shadow-loose saw all three.
		if got := e.remaining(D{"user": "u"}, "shadow-loose"); got != 7 {
			t.Errorf("shadow-loose remaining after 3 admitted requests = %d, want 7 (shadow-tight's denial stopped its charge)", got)
		}
	})
}

// A request the service cannot check because of its own content must be
// reported as ErrInvalidRequest (a 400), not as an internal error.
func TestStoreValidationErrorsAreInvalidRequests(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: per-user
    key: [user, tenant]
    algorithm: fixed_window
    limit: 100/h
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, yml, t0)
		ctx := context.Background()
		// Two values within the 256-byte cap whose escaped key exceeds
		// tokenlimit.MaxKeyLength (1024).
		long := strings.Repeat("|", 256)
		_, err := e.svc.Check(ctx, service.Request{Descriptors: D{"user": long, "tenant": long}})
		if err != nil && !errors.Is(err, service.ErrInvalidRequest) {
			t.Errorf("descriptors within the cap, key too long: %v; want a decision, or ErrInvalidRequest", err)
		}
		// Two requests selecting one budget.
		r := service.Request{Descriptors: D{"user": "u", "tenant": "t"}}
		_, err = e.svc.Check(ctx, r, r)
		if err != nil && !errors.Is(err, service.ErrInvalidRequest) {
			t.Errorf("two requests on one budget: %v; want a decision, or ErrInvalidRequest", err)
		}
		// More than 32 budgets in one call.
		var many []service.Request
		for i := range 33 {
			many = append(many, service.Request{Descriptors: D{"user": strings.Repeat("u", i+1), "tenant": "t"}})
		}
		_, err = e.svc.Check(ctx, many...)
		if err != nil && !errors.Is(err, service.ErrInvalidRequest) {
			t.Errorf("33 budgets in one check: %v; want a decision, or ErrInvalidRequest", err)
		}
	})
}
