package service_test

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/service"
)

// goExpr is a cost expression written in Go (the library parses
// expressions but compiles none; the proxy module's costexpr does).
type goExpr func(u *config.Usage, desc map[string]string) (int64, error)

func (f goExpr) Eval(u *config.Usage, desc map[string]string) (int64, error) { return f(u, desc) }
func (f goExpr) String() string                                              { return "go" }

const usageConfig = `
limits:
  - name: itpm
    key: [user]
    algorithm: fixed_window
    limit: 10000/min
    cost: uncached_input_tokens
  - name: all-input
    key: [user]
    algorithm: fixed_window
    limit: 10000/min
    cost: input_tokens
  - name: otpm
    key: [user]
    algorithm: token_bucket
    capacity: 10000
    refill: 10000/min
    cost: output_tokens
  - name: tokens
    key: [user]
    algorithm: fixed_window
    limit: 10000/min
  - name: total
    key: [user]
    algorithm: fixed_window
    limit: 10000/min
    cost: total_tokens
  - name: weighted
    key: [user]
    algorithm: fixed_window
    limit: 100000/min
  - name: broken
    key: [user]
    algorithm: fixed_window
    limit: 100000/min
  - name: requests
    key: [user]
    algorithm: fixed_window
    limit: 100/min
    cost: 1
`

// TestSettleUsage: each limit is reserved at its cost on the estimated
// usage and settles to its cost on the real one, on both stores; an
// expression that returns a negative cost charges 0 and is counted.
func TestSettleUsage(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		cfg := testkit.ParseConfig(t, usageConfig)
		for i := range cfg.Limits {
			switch cfg.Limits[i].Name {
			case "weighted": // input + 4 * output, doubled for model o3
				cfg.Limits[i].Cost = config.Cost{Expr: goExpr(func(u *config.Usage, d map[string]string) (int64, error) {
					v := u.Input + 4*u.Output
					if d["model"] == "o3" {
						v *= 2
					}
					return v, nil
				})}
			case "broken": // negative whenever the reply is longer than the prompt
				cfg.Limits[i].Cost = config.Cost{Expr: goExpr(func(u *config.Usage, _ map[string]string) (int64, error) { return u.Input - u.Output, nil })}
			}
		}
		e := testkit.NewService(t, testkit.Setup{Store: store, Config: cfg, Start: t0, Metrics: true})
		ctx := context.Background()
		desc := D{"user": "u", "model": "o3"}
		remaining := func() map[string]int64 {
			d, err := e.Service.Inspect(ctx, service.Request{Descriptors: desc})
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]int64{}
			for _, o := range d.Limits {
				out[o.Name] = o.Limit - o.Remaining
			}
			return out
		}
		expect := func(step string, want map[string]int64) {
			t.Helper()
			got := remaining()
			for name, w := range want {
				if got[name] != w {
					t.Errorf("%s: %s used %d, want %d (all: %v)", step, name, got[name], w, got)
				}
			}
		}

		// The estimate: a prompt of 1,000 tokens and a reply of at most 500.
		est := &config.Usage{Input: 1000, Output: 500}
		d, err := e.Service.Reserve(ctx, "r1", service.Request{Descriptors: desc, Cost: 1500, Usage: est})
		if err != nil || !d.Reserved {
			t.Fatalf("Reserve = %s, %v", describe(d), err)
		}
		expect("reserved", map[string]int64{"itpm": 1000, "all-input": 1000, "otpm": 500, "tokens": 1500, "total": 1500,
			"weighted": 2 * (1000 + 4*500), "broken": 500, "requests": 1})

		// The upstream reports 1,200 input tokens, 800 of them read from
		// the cache and 100 written to it, and 300 output tokens.
		used := config.Usage{Input: 1200, Cached: 800, CacheWrite: 100, Output: 300, Reasoning: 50}
		st, charged, err := e.Service.SettleUsage(ctx, d, 1500, nil, used)
		if err != nil || st != tokenlimit.Settled {
			t.Fatalf("SettleUsage = %s, %v", st, err)
		}
		if want := (service.Charges{"itpm": 400, "all-input": 1200, "otpm": 300, "total": 1500, "weighted": 2 * (1200 + 4*300), "broken": 900}); !maps.Equal(charged, want) {
			t.Errorf("SettleUsage charged %v, want %v", charged, want)
		}
		expect("settled", map[string]int64{"itpm": 400, "all-input": 1200, "otpm": 300, "tokens": 1500, "total": 1500,
			"weighted": 2 * (1200 + 4*300), "broken": 900, "requests": 1})

		// A reply longer than its prompt: "broken" is charged 0 and
		// counted; the others settle as before.
		d, err = e.Service.Reserve(ctx, "r2", service.Request{Descriptors: desc, Cost: 100, Usage: &config.Usage{Input: 100}})
		if err != nil || !d.Reserved {
			t.Fatalf("Reserve(r2) = %s, %v", describe(d), err)
		}
		if st, _, err := e.Service.SettleUsage(ctx, d, 300, nil, config.Usage{Input: 100, Output: 200}); err != nil || st != tokenlimit.Settled {
			t.Fatalf("SettleUsage(r2) = %s, %v", st, err)
		}
		expect("a negative cost", map[string]int64{"itpm": 500, "otpm": 500, "broken": 900, "tokens": 1800})
		if got := testkit.Metric(t, e.Registry, "tokenlimit_cost_expression_errors_total", "limit", "broken", "reason", "negative"); got != 1 {
			t.Errorf("tokenlimit_cost_expression_errors_total{limit=broken,reason=negative} = %v, want 1", got)
		}

		// Settled by id alone (another process, which has no usage): the
		// limits counting token classes keep their estimates.
		d, err = e.Service.Reserve(ctx, "r3", service.Request{Descriptors: desc, Cost: 10, Usage: &config.Usage{Input: 10}})
		if err != nil || !d.Reserved {
			t.Fatalf("Reserve(r3) = %s, %v", describe(d), err)
		}
		if st, err := e.Service.Settle(ctx, "r3", 4); err != nil || st != tokenlimit.Settled {
			t.Fatalf("Settle(r3) = %s, %v", st, err)
		}
		expect("settled by id", map[string]int64{"itpm": 510, "tokens": 1804})
	})
}

// TestUnitsOfTokenClasses: a limit counting input or output tokens says so
// (the proxy fills the providers' input- and output-tokens headers from
// them); an expression counts tokens.
func TestUnitsOfTokenClasses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "memory", usageConfig, t0)
	for name, want := range map[string]service.Unit{"itpm": service.InputTokens, "all-input": service.InputTokens, "otpm": service.OutputTokens,
		"tokens": service.Tokens, "total": service.Tokens, "requests": service.Requests} {
		if got, ok := e.svc.UnitOf(name); !ok || got != want {
			t.Errorf("UnitOf(%s) = %s, %v; want %s", name, got, ok, want)
		}
	}
	if !slices.ContainsFunc([]service.Unit{service.InputTokens, service.OutputTokens, service.Tokens}, service.Unit.IsTokens) || service.Requests.IsTokens() {
		t.Error("IsTokens is wrong")
	}
}
