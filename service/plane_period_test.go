package service_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/plane"
	"github.com/tokenlimit/tokenlimit/service"
)

// TestPlaneBudgetEditedMidPeriod: a team's spend budget edited through the
// plane in the middle of its period keeps what was already spent (a daily
// $5 raised to $10 after $4 spent leaves $6), and the period's end refills
// it on the calendar of the configured time zone whatever was edited: the
// day at local midnight, the month on the 1st (a month's budget written
// N/month or, the older spelling, N/day with calendar: month).
func TestPlaneBudgetEditedMidPeriod(t *testing.T) {
	t.Parallel()
	const yml = `
timezone: Europe/Berlin
limits:
  - {name: rpm, key: [api_key], algorithm: fixed_window, limit: 100/min}
`
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := func(m time.Month, d, hh int) time.Time { return time.Date(2026, m, d, hh, 0, 0, 0, berlin) }
	const dollar = 1_000_000
	// The month's budget is created in the older spelling (N/day under
	// calendar: month) and edited as N/month: one budget either way.
	limits := func(daily, monthly string) plane.Spec {
		month := `"` + monthly + `/month"`
		if monthly == "50.00" {
			month = `"` + monthly + `/day", "calendar": "month"`
		}
		return plane.Spec{Name: "acme", Limits: limitsJSON(`[
			{"name": "usd-daily", "unit": "usd", "algorithm": "fixed_window", "limit": "` + daily + `/day", "calendar": "day"},
			{"name": "usd-monthly", "unit": "usd", "algorithm": "fixed_window", "limit": ` + month + `}]`)}
	}
	testkit.EachStore(t, func(t *testing.T, store string) {
		var svc *service.Service
		p, err := plane.Open(context.Background(), plane.NewMemoryStore(), plane.Options{
			KnownPlan: func(name string) bool { return svc.KnownPlan(name) }, Logger: testkit.Quiet(),
		})
		if err != nil {
			t.Fatal(err)
		}
		// 30 January, 15:00 in Berlin: two days before the month ends.
		e := newEnv(t, store, yml, at(time.January, 30, 15), func(o *service.Options) { o.Plane = p })
		svc = e.svc
		ctx := context.Background()
		if _, err := p.CreateTeam(ctx, limits("5.00", "50.00")); err != nil {
			t.Fatal(err)
		}
		_, secret, err := p.CreateKey(ctx, plane.Spec{Name: "laptop", Team: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		spend := func(dollars float64) service.Decision {
			t.Helper()
			return e.checkAll(service.Request{Descriptors: D{"api_key": secret}, Spend: int64(dollars * dollar)})
		}
		want := func(d service.Decision, allowed bool, daily, monthly int64, dayLabel string) {
			t.Helper()
			if d.Allowed != allowed {
				t.Fatalf("allowed %v, want %v: %s", d.Allowed, allowed, describe(d))
			}
			o, m := mustOutcome(t, d, "usd-daily"), mustOutcome(t, d, "usd-monthly")
			if o.Remaining != daily*dollar || m.Remaining != monthly*dollar {
				t.Errorf("remaining daily %d, monthly %d; want %d, %d: %s", o.Remaining, m.Remaining, daily*dollar, monthly*dollar, describe(d))
			}
			if !strings.HasSuffix(o.Key, "|"+dayLabel) || !strings.HasSuffix(m.Key, "|"+dayLabel[:7]) {
				t.Errorf("keys %q, %q: want the day %s and its month", o.Key, m.Key, dayLabel)
			}
		}
		want(spend(4), true, 1, 46, "2026-01-30")

		// Raised mid-day: the $4 spent stay spent.
		raise := func(daily, monthly string) {
			t.Helper()
			if _, err := p.UpdateTeam(ctx, "acme", limits(daily, monthly), plane.AnyVersion); err != nil {
				t.Fatal(err)
			}
		}
		raise("10.00", "50.00")
		want(e.inspect(D{"api_key": secret}), true, 6, 46, "2026-01-30")
		want(spend(6), true, 0, 40, "2026-01-30")
		want(spend(0.000001), false, 0, 40, "2026-01-30")
		// Lowered below what was spent: nothing is left, nothing is owed.
		raise("3.00", "50.00")
		want(spend(0.000001), false, 0, 40, "2026-01-30")

		// Local midnight refills the day (23:00 UTC), not a millisecond
		// before; the month keeps its spend.
		e.clock.Set(at(time.January, 31, 0).Add(-time.Millisecond))
		want(spend(0.000001), false, 0, 40, "2026-01-30")
		e.clock.Set(at(time.January, 31, 0))
		want(spend(1), true, 2, 39, "2026-01-31")

		// The month edited mid-month keeps its spend too ($11 of it).
		raise("3.00", "12.00")
		want(spend(1), true, 1, 0, "2026-01-31")
		want(spend(0.000001), false, 1, 0, "2026-01-31")

		// 1 February at midnight in Berlin refills both.
		e.clock.Set(at(time.February, 1, 0))
		want(spend(2), true, 1, 10, "2026-02-01")
	})
}
