package service_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/service"
)

func TestQuickstartSimulators(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	svc := testkit.NewService(t, testkit.Setup{Store: testkit.Memory, Config: cfg, Start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}).Service
	ctx := context.Background()
	check := func(route string) service.Decision {
		d, err := svc.Check(ctx, service.Request{Descriptors: map[string]string{"user": "alice", "route": route}})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// Chat then three embeds empty the bucket of 10; a fourth embed waits 1.5s.
	for i, want := range []int64{9, 6, 3, 0} {
		route := "/v1/embed"
		if i == 0 {
			route = "/v1/chat"
		}
		d := check(route)
		if !d.Allowed || len(d.Limits) != 1 || d.Limits[0].Name != "llm-budget" || d.Limits[0].Remaining != want {
			t.Fatalf("request %d (%s): %+v, want allowed by llm-budget with %d left", i, route, d, want)
		}
	}
	d := check("/v1/embed")
	if tight, ok := d.Tightest(); d.Allowed || !ok || tight.RetryAfter != 1500*time.Millisecond {
		t.Fatalf("fifth request: %+v, want denied with retry-after 1.5s", d)
	}
	// The sensitive route adds the hard cap; user bob has a full bucket.
	for i := range 6 {
		d, err := svc.Check(ctx, service.Request{Descriptors: map[string]string{"user": "bob", "route": "/v1/sensitive"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Limits) != 2 || d.Allowed != (i < 5) {
			t.Fatalf("sensitive request %d: %+v, want 2 limits and allowed=%v", i, d, i < 5)
		}
	}
	// The inspector sees the hard cap's log: the five admitted requests.
	d, err = svc.Inspect(ctx, service.Request{Descriptors: map[string]string{"user": "bob", "route": "/v1/sensitive"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range d.Limits {
		if want := map[string]int{"hard-cap": 5, "llm-budget": 0}[o.Name]; len(o.Entries) != want {
			t.Errorf("Inspect: %s has %d log entries, want %d", o.Name, len(o.Entries), want)
		}
	}
}

func TestConcurrencyLimitHoldsSlotsUntilSettled(t *testing.T) {
	t.Parallel()
	e := testkit.NewService(t, testkit.Setup{Store: testkit.Memory, Start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Config: testkit.ParseConfig(t, `
limits:
  - name: in-flight
    key: [api_key]
    algorithm: concurrency
    limit: 3
    lease: 1m
`)})
	svc, clock := e.Service, e.Clock
	ctx := context.Background()
	req := service.Request{Descriptors: map[string]string{"api_key": "k1"}}
	reserve := func(id string) bool {
		d, err := svc.Reserve(ctx, id, req)
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	for i, id := range []string{"a", "b", "c"} {
		if !reserve(id) {
			t.Fatalf("request %d in flight denied, want 3 slots", i)
		}
	}
	if reserve("d") {
		t.Fatal("a fourth request in flight was allowed")
	}
	if d, err := svc.Check(ctx, req); err != nil || !d.Allowed || len(d.Limits) != 0 {
		t.Fatalf("Check: %+v %v, want concurrency limits to apply to reservations only", d, err)
	}
	if _, err := svc.Settle(ctx, "b", 1234); err != nil {
		t.Fatal(err)
	}
	if !reserve("e") {
		t.Fatal("a slot released by Settle was not reusable")
	}
	if reserve("f") {
		t.Fatal("more than 3 in flight after a release")
	}
	clock.Advance(time.Minute) // the unsettled leases end: a crashed holder frees its slot
	if !reserve("g") {
		t.Fatal("a slot whose lease ended was not reusable")
	}
}

// TestStoreDescribesItself: the service learns from the store whether it is
// remote and what to call it; a store that says nothing counts as remote,
// so a call that hangs is cut at StoreTimeout and the limits fail over.
func TestStoreDescribesItself(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: per-user
    key: [user]
    algorithm: fixed_window
    limit: 5/h
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, yml, t0)
		if h := e.svc.Health(); h.Store != store {
			t.Errorf("Health().Store = %q, want %q", h.Store, store)
		}
	})
	t.Run("silent store", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "memory", yml, t0, func(o *service.Options) {
			hanging := &testkit.FaultStore{Store: o.Store, Info: &tokenlimit.StoreInfo{Name: "custom", Remote: true}}
			hanging.Set(testkit.Hang)
			o.Store = hanging
			o.StoreTimeout = 10 * time.Millisecond
		})
		if h := e.svc.Health(); h.Store != "custom" {
			t.Errorf("Health().Store = %q, want custom", h.Store)
		}
		d := e.check(D{"user": "a"}, 1)
		if !d.Allowed || len(d.Limits) != 1 || !d.Limits[0].FailOpen {
			t.Errorf("a hanging store that says nothing: %s, want allowed on the fail-open local budget after StoreTimeout", describe(d))
		}
	})
}

// TestNegativeOptions: New refuses every negative duration and size,
// naming the option.
func TestNegativeOptions(t *testing.T) {
	t.Parallel()
	cfg := testkit.ParseConfig(t, "limits:\n  - {name: a, key: [user], algorithm: fixed_window, limit: 5/h}\n")
	st, _ := memstore.New(memstore.Options{})
	for name, edit := range map[string]func(*service.Options){
		"StoreTimeout":        func(o *service.Options) { o.StoreTimeout = -time.Second },
		"BreakerCooldown":     func(o *service.Options) { o.BreakerCooldown = -1 },
		"ReservationTTL":      func(o *service.Options) { o.ReservationTTL = -time.Minute },
		"BreakerThreshold":    func(o *service.Options) { o.BreakerThreshold = -1 },
		"MaxDescriptorLength": func(o *service.Options) { o.MaxDescriptorLength = -1 },
		"MaxReservations":     func(o *service.Options) { o.MaxReservations = -1 },
		"FailOpenRecovery":    func(o *service.Options) { o.FailOpenRecovery = -time.Second },
	} {
		opts := service.Options{Store: st}
		edit(&opts)
		_, err := service.New(cfg, opts)
		if err == nil || !strings.Contains(err.Error(), name+" must not be negative") {
			t.Errorf("%s negative: New error %v, want one naming %s", name, err, name)
		}
	}
}
