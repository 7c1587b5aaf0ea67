package service_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tokenlimit/tokenlimit"
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

// TestReserveHold: a hold charges the estimate, settles each limit in its
// own unit (tokens to the actual, requests unchanged, the in-flight slot
// released), settles once, and keeps no record when denied.
func TestReserveHold(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, proxySupportConfig, t0)
		ctx := context.Background()
		desc := D{"api_key": "k2", "model": "big"}
		d, h, err := e.svc.ReserveHold(ctx, service.Request{Descriptors: desc, Cost: 400}, service.HoldOptions{ID: "call-1"})
		if err != nil || !d.Allowed || h == nil || d.ReservationID != "call-1" {
			t.Fatalf("ReserveHold = %s, %v, %v", describe(d), h, err)
		}
		for name, want := range map[string]int64{"tokens": 600, "requests": 9, "weighted": 95, "in-flight": 1, "plan-free-daily": 4600} {
			if got := e.remaining(desc, name); got != want {
				t.Errorf("reserved: %s remaining %d, want %d", name, got, want)
			}
		}
		if err := h.Settle(ctx, 120); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]int64{"tokens": 880, "requests": 9, "weighted": 95, "in-flight": 2, "plan-free-daily": 4880} {
			if got := e.remaining(desc, name); got != want {
				t.Errorf("settled: %s remaining %d, want %d", name, got, want)
			}
		}
		if err := h.Settle(ctx, 0); !errors.Is(err, tokenlimit.ErrSettled) {
			t.Errorf("second Settle = %v, want ErrSettled", err)
		}
		var nilHold *service.Hold
		if err := nilHold.Settle(ctx, 5); err != nil {
			t.Errorf("Settle on a nil hold = %v", err)
		}

		// Requests only: the token limits are left out.
		d, h, err = e.svc.ReserveHold(ctx, service.Request{Descriptors: desc}, service.HoldOptions{Units: []service.Unit{service.Requests, service.InFlight}})
		if err != nil || !d.Allowed || len(d.Limits) != 3 || d.ReservationID == "" {
			t.Fatalf("requests only: %s, %v", describe(d), err)
		}
		if err := h.Settle(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if got := e.remaining(desc, "tokens"); got != 880 {
			t.Errorf("requests only: tokens remaining %d, want 880", got)
		}

		// Denied: nothing charged, no hold.
		d, h, err = e.svc.ReserveHold(ctx, service.Request{Descriptors: desc, Cost: 900}, service.HoldOptions{})
		if err != nil || d.Allowed || h != nil {
			t.Fatalf("too big: %s, %v, %v; want denied with no hold", describe(d), h, err)
		}
		if got := e.remaining(desc, "in-flight"); got != 2 {
			t.Errorf("denied: in-flight remaining %d, want 2", got)
		}
		if _, _, err := e.svc.ReserveHold(ctx, service.Request{Descriptors: desc, Cost: -1}, service.HoldOptions{}); !errors.Is(err, service.ErrInvalidRequest) {
			t.Errorf("negative cost: %v, want ErrInvalidRequest", err)
		}
	})
}
