package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/service"
)

// fakeClock is a per-test clock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time { return c.t }

func TestQuickstartSimulators(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg, err := config.Load("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	st, _ := memstore.New(memstore.Options{})
	svc, err := service.New(cfg, service.Options{Store: st, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
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
}
