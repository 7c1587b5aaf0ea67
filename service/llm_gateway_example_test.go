package service_test

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
)

// The LLM gateway example does what its comments say, on both stores.
func TestLLMGatewayExample(t *testing.T) {
	t.Parallel()
	yml, err := os.ReadFile("../examples/llm-gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, string(yml), time.Date(2026, 6, 30, 23, 0, 0, 0, berlin))
		free := D{"api_key": "sk-demo-free", "model": "gpt-4o", "route": "/v1/chat"}
		d := e.check(free, 30000)
		want := []string{"tokens-per-key-model", "requests-per-key", "plan-free-daily", "plan-free-monthly", "per-tenant-trial"}
		if !d.Allowed || !slices.Equal(names(d), want) {
			t.Fatalf("free key: %s, want allowed by %v", describe(d), want)
		}
		for name, w := range map[string][3]int64{ // cost, limit, remaining
			"tokens-per-key-model": {30000, 40000, 10000},
			"requests-per-key":     {1, 11, 10},
			"plan-free-daily":      {30000, 100000, 70000},
			"plan-free-monthly":    {30000, 1000000, 970000},
			"per-tenant-trial":     {30000, 100000, 70000},
		} {
			if o := mustOutcome(t, d, name); [3]int64{o.Cost, o.Limit, o.Remaining} != w {
				t.Errorf("%s: cost %d limit %d remaining %d, want %v", name, o.Cost, o.Limit, o.Remaining, w)
			}
		}
		if o := mustOutcome(t, d, "per-tenant-trial"); !o.Shadow || o.Key != "per-tenant-trial|tenant=acme" {
			t.Errorf("per-tenant-trial: %s, want a shadow limit keyed by the key's tenant", describe(d))
		}
		// Another model has its own token bucket, but the same plan quota.
		d = e.check(D{"api_key": "sk-demo-free", "model": "gpt-4o-mini"}, 30000)
		if !d.Allowed || mustOutcome(t, d, "tokens-per-key-model").Remaining != 10000 || mustOutcome(t, d, "plan-free-daily").Remaining != 40000 {
			t.Fatalf("second model: %s", describe(d))
		}
		// The daily quota ends at midnight Berlin, an hour away; the month
		// ends with it.
		if o := mustOutcome(t, d, "plan-free-daily"); o.ResetAfter != time.Hour || mustOutcome(t, d, "plan-free-monthly").ResetAfter != time.Hour {
			t.Errorf("plan quotas at 23:00 Berlin on June 30: %s, want both reset in 1h", describe(d))
		}
		// The pro key's override: a bucket of 200000.
		d = e.check(D{"api_key": "sk-demo-pro", "model": "gpt-4o"}, 150000)
		if o := mustOutcome(t, d, "tokens-per-key-model"); !d.Allowed || o.Limit != 200000 || o.Remaining != 50000 {
			t.Errorf("pro key: %s, want its override of 200000", describe(d))
		}
		if _, ok := outcome(d, "plan-pro-daily"); !ok {
			t.Errorf("pro key: %s, want the pro plan's quota", describe(d))
		}
		// The admin hard cap: 5 per 10s per user, on admin routes only.
		admin := D{"api_key": "sk-demo-pro", "route": "/v1/admin/keys"}
		for i := range 6 {
			d := e.check(admin, 1)
			if o := mustOutcome(t, d, "admin-hard-cap"); d.Allowed != (i < 5) || o.Key != "admin-hard-cap|user=bob" {
				t.Errorf("admin request %d: %s, want allowed=%v", i, describe(d), i < 5)
			}
		}
		e.clock.Advance(10 * time.Second)
		if d := e.check(admin, 1); !d.Allowed {
			t.Errorf("admin request 10s later: %s, want allowed", describe(d))
		}
	})
}
