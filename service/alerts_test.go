package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/alert"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/service"
)

const alertConfig = `
limits:
  - {name: per-user, key: [user], algorithm: fixed_window, limit: 10/min, alert_at: ["50%", "80%"]}
`

// webhook collects the events posted to it.
type webhook struct {
	mu     sync.Mutex
	events []alert.Event
}

func (h *webhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var e alert.Event
	if err := json.Unmarshal(body, &e); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

func (h *webhook) received() []alert.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

// TestAlertsAreSentOncePerThresholdAcrossReplicas: two replicas on one
// store charge one budget in turn; each threshold is crossed by one
// request, which carries it, and sent once in all, with its window's end.
func TestAlertsAreSentOncePerThresholdAcrossReplicas(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, store string) {
		hook := &webhook{}
		srv := httptest.NewServer(hook)
		defer srv.Close()
		start := time.Date(2026, 12, 2, 10, 0, 30, 0, time.UTC)
		cfg := testkit.ParseConfig(t, alertConfig)
		withHook := func(o *service.Options) { o.Alerts = alert.Options{Webhook: srv.URL, Secret: []byte("k")} }
		a := testkit.NewService(t, testkit.Setup{Store: store, Config: cfg, Start: start, Metrics: true, Edit: withHook})
		// The second replica decides on the same budgets (the store's
		// own prefix), through a service of its own.
		b := testkit.NewService(t, testkit.Setup{Store: store, Config: cfg, Start: start, Metrics: true, Redis: a.Redis,
			Edit: func(o *service.Options) { withHook(o); o.Store = a.Store }})
		defer a.Service.Close()
		defer b.Service.Close()
		req := service.Request{Descriptors: D{"user": "u"}}
		var crossed []string
		for i := range 10 {
			svc := []*service.Service{a.Service, b.Service}[i%2]
			d, err := svc.Check(context.Background(), req)
			if err != nil || !d.Allowed {
				t.Fatalf("request %d: %v, %s", i+1, err, describe(d))
			}
			for _, al := range d.Alerts {
				crossed = append(crossed, fmt.Sprintf("%s@%d", al, i+1))
			}
		}
		if want := []string{"per-user;threshold=50%@5", "per-user;threshold=80%@8"}; !slices.Equal(crossed, want) {
			t.Fatalf("alerts on the answers: %v, want %v", crossed, want)
		}
		testkit.Eventually(t, 10*time.Second, "two events", func() bool { return len(hook.received()) >= 2 })
		events := hook.received() // from two replicas: in any order
		slices.SortFunc(events, func(x, y alert.Event) int { return strings.Compare(x.Threshold, y.Threshold) })
		if len(events) != 2 {
			t.Fatalf("events: %+v, want one per threshold", events)
		}
		end := time.Date(2026, 12, 2, 10, 1, 0, 0, time.UTC)
		for i, want := range []struct {
			threshold string
			used      int64
		}{{"50%", 5}, {"80%", 8}} {
			e := events[i]
			if e.Threshold != want.threshold || e.Used != want.used || e.LimitValue != 10 || e.Limit != "per-user" ||
				!e.PeriodEnd.Equal(end) || e.Level != "config" || len(e.ID) != 32 {
				t.Errorf("event %d: %+v; want %s, used %d of 10, ending %s", i, e, want.threshold, want.used, end)
			}
		}
		sum := 0.0
		for _, e := range []*testkit.Env{a, b} {
			sum += testkit.Metric(t, e.Registry, "tokenlimit_alerts_total", "limit", "per-user", "threshold", "80%")
		}
		if sum != 1 {
			t.Errorf("tokenlimit_alerts_total{threshold=80%%} over both replicas: %v, want 1", sum)
		}
		// The next window crosses them again, and sends them again.
		a.Clock.Advance(time.Minute)
		b.Clock.Advance(time.Minute)
		for range 5 {
			if _, err := a.Service.Check(context.Background(), req); err != nil {
				t.Fatal(err)
			}
		}
		testkit.Eventually(t, 10*time.Second, "the next window's 50% event", func() bool { return len(hook.received()) == 3 })
	})
}

// TestAlertsOnReservations: a reservation whose estimate crosses a
// threshold carries it and sends it, as a check does; replaying the
// reservation (the same id again) raises nothing more.
func TestAlertsOnReservations(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, store string) {
		hook := &webhook{}
		srv := httptest.NewServer(hook)
		defer srv.Close()
		e := testkit.NewService(t, testkit.Setup{Store: store, Config: testkit.ParseConfig(t, alertConfig),
			Start: time.Date(2026, 12, 2, 10, 0, 30, 0, time.UTC),
			Edit:  func(o *service.Options) { o.Alerts = alert.Options{Webhook: srv.URL, Secret: []byte("k")} }})
		defer e.Service.Close()
		req := service.Request{Descriptors: D{"user": "u"}, Cost: 1}
		var crossed []string
		for i := range 8 {
			d, err := e.Service.Reserve(context.Background(), fmt.Sprintf("r%d", i+1), req)
			if err != nil || !d.Allowed {
				t.Fatalf("reservation %d: %v, %s", i+1, err, describe(d))
			}
			for _, al := range d.Alerts {
				crossed = append(crossed, fmt.Sprintf("%s@%d", al, i+1))
			}
		}
		if d, err := e.Service.Reserve(context.Background(), "r8", req); err != nil || !d.Replayed || len(d.Alerts) != 0 {
			t.Errorf("replayed reservation: %v, replayed %v, alerts %v; want a replay raising none", err, d.Replayed, d.Alerts)
		}
		if want := []string{"per-user;threshold=50%@5", "per-user;threshold=80%@8"}; !slices.Equal(crossed, want) {
			t.Fatalf("alerts on the reservations: %v, want %v", crossed, want)
		}
		testkit.Eventually(t, 10*time.Second, "two events", func() bool { return len(hook.received()) >= 2 })
		if n := len(hook.received()); n != 2 {
			t.Errorf("%d events, want 2", n)
		}
	})
}

// TestAlertsOnSettlements: a settlement above the reservation's estimate
// that carries a budget past a threshold sends it (the request after it
// starts above the threshold and could not); one below sends nothing.
func TestAlertsOnSettlements(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, store string) {
		hook := &webhook{}
		srv := httptest.NewServer(hook)
		defer srv.Close()
		e := testkit.NewService(t, testkit.Setup{Store: store, Metrics: true, Config: testkit.ParseConfig(t, `
limits:
  - {name: tokens, key: [user], algorithm: fixed_window, limit: 100/min, alert_at: ["50%", "80%"]}
`),
			Start: time.Date(2026, 12, 2, 10, 0, 30, 0, time.UTC),
			Edit:  func(o *service.Options) { o.Alerts = alert.Options{Webhook: srv.URL, Secret: []byte("k")} }})
		defer e.Service.Close()
		ctx := context.Background()
		req := service.Request{Descriptors: D{"user": "u"}, Cost: 10}
		settle := func(id string, actual int64) {
			t.Helper()
			d, err := e.Service.Reserve(ctx, id, req)
			if err != nil || !d.Allowed || len(d.Alerts) != 0 {
				t.Fatalf("reserve %s: %v, %s, alerts %v; want allowed, none crossed by the estimate", id, err, describe(d), d.Alerts)
			}
			if st, _, err := e.Service.SettleUsage(ctx, d, actual, nil, config.Usage{}); err != nil || st != tokenlimit.Settled {
				t.Fatalf("settle %s: %v, %v", id, st, err)
			}
		}
		settle("small", 5) // 10 → 5 used: nothing crossed
		settle("big", 55)  // 5 + 10 = 15, settled to 5 + 55 = 60: past 50%
		testkit.Eventually(t, 10*time.Second, "the 50% event", func() bool { return len(hook.received()) >= 1 })
		events := hook.received()
		if len(events) != 1 || events[0].Threshold != "50%" || events[0].Used != 60 {
			t.Fatalf("events %+v, want the 50%% one at 60 used", events)
		}
		if n := testkit.Metric(t, e.Registry, "tokenlimit_alerts_total", "limit", "tokens", "threshold", "80%"); n != 0 {
			t.Errorf("80%% counted %v times, want 0", n)
		}
	})
}

// TestAlertsOnSettleByID: a settlement that carries only the reservation's
// id, made by another replica, raises the thresholds it crosses as any
// settlement does (the budgets come back from the reservation's record),
// once each across replicas; one that crosses nothing new raises none.
func TestAlertsOnSettleByID(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, store string) {
		hook := &webhook{}
		srv := httptest.NewServer(hook)
		defer srv.Close()
		start := time.Date(2026, 12, 2, 10, 0, 30, 0, time.UTC)
		cfg := testkit.ParseConfig(t, `
limits:
  - {name: tokens, key: [user], algorithm: fixed_window, limit: 100/min, alert_at: ["50%", "80%"]}
  - {name: quiet, key: [user], algorithm: fixed_window, limit: 1000/min}
`)
		withHook := func(o *service.Options) { o.Alerts = alert.Options{Webhook: srv.URL, Secret: []byte("k")} }
		a := testkit.NewService(t, testkit.Setup{Store: store, Config: cfg, Start: start, Metrics: true, Edit: withHook})
		b := testkit.NewService(t, testkit.Setup{Store: store, Config: cfg, Start: start, Metrics: true, Redis: a.Redis,
			Edit: func(o *service.Options) { withHook(o); o.Store = a.Store }})
		defer a.Service.Close()
		defer b.Service.Close()
		ctx := context.Background()
		req := service.Request{Descriptors: D{"user": "u"}, Cost: 10}
		reserveOnA := func(id string) {
			t.Helper()
			d, err := a.Service.Reserve(ctx, id, req)
			if err != nil || !d.Allowed || len(d.Alerts) != 0 {
				t.Fatalf("reserve %s: %v, %s, alerts %v; want allowed, none crossed by the estimate", id, err, describe(d), d.Alerts)
			}
		}
		settleOnB := func(id string, actual int64) {
			t.Helper()
			if st, err := b.Service.Settle(ctx, id, actual); err != nil || st != tokenlimit.Settled {
				t.Fatalf("settle %s by id on the other replica: %v, %v", id, st, err)
			}
		}
		reserveOnA("r1")
		settleOnB("r1", 85) // 10 reserved, settled to 85: past 50% and 80%
		testkit.Eventually(t, 10*time.Second, "the 50% and 80% events", func() bool { return len(hook.received()) >= 2 })
		events := hook.received()
		slices.SortFunc(events, func(x, y alert.Event) int { return strings.Compare(x.Threshold, y.Threshold) })
		if len(events) != 2 || events[0].Threshold != "50%" || events[1].Threshold != "80%" {
			t.Fatalf("events %+v, want 50%% and 80%%", events)
		}
		for _, e := range events {
			if e.Used != 85 || e.LimitValue != 100 || e.Limit != "tokens" || e.Level != "config" || !e.PeriodEnd.Equal(time.Date(2026, 12, 2, 10, 1, 0, 0, time.UTC)) {
				t.Errorf("event %+v; want tokens at 85 of 100, ending at 10:01", e)
			}
		}
		for _, th := range []string{"50%", "80%"} {
			onA := testkit.Metric(t, a.Registry, "tokenlimit_alerts_total", "limit", "tokens", "threshold", th)
			onB := testkit.Metric(t, b.Registry, "tokenlimit_alerts_total", "limit", "tokens", "threshold", th)
			if onA != 0 || onB != 1 {
				t.Errorf("tokenlimit_alerts_total{threshold=%s}: %v on the reserving replica, %v on the settling one; want 0 and 1", th, onA, onB)
			}
		}
		// Above both already: a settlement crosses nothing new.
		reserveOnA("r2")
		settleOnB("r2", 5)
		if st, err := b.Service.Settle(ctx, "r2", 50); err != nil || st != tokenlimit.AlreadySettled {
			t.Fatalf("settling r2 again: %v, %v; want already settled", st, err)
		}
		// The next window: the first settlement by id past 50% raises it.
		a.Clock.Advance(time.Minute)
		b.Clock.Advance(time.Minute)
		reserveOnA("r3")
		settleOnB("r3", 60)
		testkit.Eventually(t, 10*time.Second, "the next window's 50% event", func() bool { return len(hook.received()) >= 3 })
		if got := hook.received(); len(got) != 3 || got[2].Threshold != "50%" || got[2].Used != 60 {
			t.Errorf("events %+v, want a third: 50%% at 60", got)
		}
	})
}
