package service_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/service"
)

const proxySupportConfig = `
default_plan: free
limits:
  - {name: tokens, key: [api_key], algorithm: token_bucket, capacity: 1000, refill: 1000/min, cost: request}
  - {name: requests, key: [api_key], algorithm: fixed_window, limit: 10/min, cost: 1}
  - {name: weighted, key: [api_key], algorithm: fixed_window, limit: 100/min, cost: {by: model, weights: {big: 5}, default: 2}}
  - {name: in-flight, key: [api_key], algorithm: concurrency, limit: 2}
  - {name: trial, key: [api_key], algorithm: token_bucket, capacity: 50, refill: 50/min, shadow: true}
plans:
  free: {daily: 5000}
api_keys:
  k1: {user: u1, overrides: {tokens: {capacity: 300, refill: 300/min}}}
`

func TestUnitsAndSelect(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "memory", proxySupportConfig, t0)
	for name, want := range map[string]service.Unit{
		"tokens": service.Tokens, "requests": service.Requests, "weighted": service.Requests,
		"in-flight": service.InFlight, "trial": service.Tokens, "plan-free-daily": service.Tokens,
	} {
		if got, ok := e.svc.UnitOf(name); !ok || got != want {
			t.Errorf("UnitOf(%s) = %s, %v; want %s", name, got, ok, want)
		}
	}
	if _, ok := e.svc.UnitOf("nope"); ok {
		t.Error("UnitOf(nope) found a limit")
	}
	if !e.svc.KnownAPIKey("k1") || e.svc.KnownAPIKey("k2") || e.svc.KnownAPIKey("") {
		t.Error("KnownAPIKey: want k1 known, k2 and the empty key not")
	}
	sel, err := e.svc.Select(service.Request{Descriptors: D{"api_key": "k1"}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]service.Selection{}
	for _, s := range sel {
		got[s.Name] = s
	}
	if len(sel) != 6 || got["tokens"].Limit.Capacity() != 300 || got["in-flight"].Unit != service.InFlight ||
		!got["trial"].Shadow || got["plan-free-daily"].Limit.Algorithm != tokenlimit.FixedWindow {
		t.Errorf("Select = %+v; want 6 limits, k1's override on tokens, the concurrency and shadow limits, the plan's quota", sel)
	}
}

// TestReserveWithUnits: a reservation charges the estimate, settles each
// limit in its own unit (tokens to the actual, requests unchanged, the
// in-flight slot released), settles once, and keeps no record when denied.
func TestReserveWithUnits(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, proxySupportConfig, t0)
		ctx := context.Background()
		desc := D{"api_key": "k2", "model": "big"}
		d, err := e.svc.ReserveWith(ctx, service.ReserveOptions{ID: "call-1"}, service.Request{Descriptors: desc, Cost: 400})
		if err != nil || !d.Allowed || !d.Reserved || d.ReservationID != "call-1" {
			t.Fatalf("ReserveWith = %s, %v", describe(d), err)
		}
		for name, want := range map[string]int64{"tokens": 600, "requests": 9, "weighted": 95, "in-flight": 1, "plan-free-daily": 4600} {
			if got := e.remaining(desc, name); got != want {
				t.Errorf("reserved: %s remaining %d, want %d", name, got, want)
			}
		}
		if st, err := e.svc.Settle(ctx, "call-1", 120); err != nil || st != tokenlimit.Settled {
			t.Fatal(st, err)
		}
		for name, want := range map[string]int64{"tokens": 880, "requests": 9, "weighted": 95, "in-flight": 2, "plan-free-daily": 4880} {
			if got := e.remaining(desc, name); got != want {
				t.Errorf("settled: %s remaining %d, want %d", name, got, want)
			}
		}
		if st, err := e.svc.Settle(ctx, "call-1", 0); err != nil || st != tokenlimit.AlreadySettled {
			t.Errorf("second Settle = %s, %v; want already settled", st, err)
		}

		// Requests only: the token limits are left out.
		d, err = e.svc.ReserveWith(ctx, service.ReserveOptions{Units: []service.Unit{service.Requests, service.InFlight}}, service.Request{Descriptors: desc})
		if err != nil || !d.Allowed || len(d.Limits) != 3 || d.ReservationID == "" {
			t.Fatalf("requests only: %s, %v", describe(d), err)
		}
		if st, err := e.svc.Settle(ctx, d.ReservationID, 0); err != nil || st != tokenlimit.Settled {
			t.Fatal(st, err)
		}
		if got := e.remaining(desc, "tokens"); got != 880 {
			t.Errorf("requests only: tokens remaining %d, want 880", got)
		}

		// Denied: nothing charged, nothing recorded.
		d, err = e.svc.ReserveWith(ctx, service.ReserveOptions{}, service.Request{Descriptors: desc, Cost: 900})
		if err != nil || d.Allowed || d.Reserved {
			t.Fatalf("too big: %s, %v; want denied with nothing reserved", describe(d), err)
		}
		if st, err := e.svc.Settle(ctx, d.ReservationID, 5); err != nil || st != tokenlimit.UnknownReservation {
			t.Errorf("settling a denied reservation: %s, %v; want unknown", st, err)
		}
		if got := e.remaining(desc, "in-flight"); got != 2 {
			t.Errorf("denied: in-flight remaining %d, want 2", got)
		}
		if _, err := e.svc.ReserveWith(ctx, service.ReserveOptions{}, service.Request{Descriptors: desc, Cost: -1}); !errors.Is(err, service.ErrInvalidRequest) {
			t.Errorf("negative cost: %v, want ErrInvalidRequest", err)
		}
	})
}

// TestReserveStopLimits: a stream's growth is reserved on the budgets in
// tokens, output tokens or usd whose on_exhaust is stop, and on nothing
// else; Cancel refunds it whole, once; with no such budget nothing is
// charged or recorded.
func TestReserveStopLimits(t *testing.T) {
	t.Parallel()
	const cfg = `
prices:
  gpt-4o: {input: 2.50, output: 10.00}
limits:
  - {name: tokens, key: [api_key], algorithm: token_bucket, capacity: 1000, refill: 1000/min}
  - {name: tokens-finish, key: [api_key], algorithm: token_bucket, capacity: 1000, refill: 1000/min, on_exhaust: finish}
  - {name: output, key: [api_key], algorithm: token_bucket, capacity: 1000, refill: 1000/min, cost: output_tokens}
  - {name: input, key: [api_key], algorithm: token_bucket, capacity: 1000, refill: 1000/min, cost: input_tokens}
  - {name: usd, key: [api_key], unit: usd, algorithm: fixed_window, limit: 1.00/day}
  - {name: requests, key: [api_key], algorithm: fixed_window, limit: 10/min, cost: 1}
  - {name: in-flight, key: [api_key], algorithm: concurrency, limit: 2}
  - {name: trial, key: [api_key], algorithm: token_bucket, capacity: 50, refill: 50/min, shadow: true}
  - {name: other, key: [user], algorithm: token_bucket, capacity: 50, refill: 50/min}
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, cfg, t0)
		ctx := context.Background()
		desc := D{"api_key": "k", "model": "gpt-4o"}
		d, err := e.svc.ReserveWith(ctx, service.ReserveOptions{ID: "grow-1", StopLimits: true},
			service.Request{Descriptors: desc, Cost: 400, Spend: 4000, Usage: &config.Usage{Output: 400}})
		if err != nil || !d.Allowed || !d.Reserved || len(d.Limits) != 3 || d.Limits[0].Name != "tokens" || d.Limits[1].Name != "output" || d.Limits[2].Name != "usd" {
			t.Fatalf("ReserveWith(StopLimits) = %s, %v; want tokens, output and usd reserved", describe(d), err)
		}
		for name, want := range map[string]int64{"tokens": 600, "tokens-finish": 1000, "output": 600, "input": 1000, "usd": 996_000, "requests": 10, "in-flight": 2, "trial": 50} {
			if got := e.remaining(desc, name); got != want {
				t.Errorf("reserved: %s remaining %d, want %d", name, got, want)
			}
		}
		if st, err := e.svc.Cancel(ctx, "grow-1"); err != nil || st != tokenlimit.Settled {
			t.Fatal(st, err)
		}
		for name, want := range map[string]int64{"tokens": 1000, "output": 1000, "usd": 1_000_000} {
			if got := e.remaining(desc, name); got != want {
				t.Errorf("cancelled: %s remaining %d, want %d", name, got, want)
			}
		}
		if st, err := e.svc.Cancel(ctx, "grow-1"); err != nil || st != tokenlimit.AlreadySettled {
			t.Errorf("second Cancel = %s, %v; want already settled", st, err)
		}
		if _, err := e.svc.Cancel(ctx, ""); !errors.Is(err, service.ErrInvalidRequest) {
			t.Errorf("Cancel without an id: %v, want ErrInvalidRequest", err)
		}
		d, err = e.svc.ReserveWith(ctx, service.ReserveOptions{StopLimits: true}, service.Request{Descriptors: D{"user": "u"}, Cost: 40})
		if err != nil || !d.Allowed || !d.Reserved || len(d.Limits) != 1 {
			t.Fatalf("user budget: %s, %v", describe(d), err)
		}
		d, err = e.svc.ReserveWith(ctx, service.ReserveOptions{StopLimits: true}, service.Request{Descriptors: D{"route": "/"}, Cost: 40})
		if err != nil || !d.Allowed || d.Reserved || len(d.Limits) != 0 {
			t.Errorf("no stop limit: %s, %v; want admitted, nothing reserved", describe(d), err)
		}
	})
}
