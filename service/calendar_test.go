package service_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
)

// Plans' quotas follow the calendar of the configured time zone: a day ends
// at local midnight (and lasts 23 or 25 hours when daylight saving time
// starts or ends), a month on the 1st. Inspect's ResetAfter shows the window.
func TestCalendarQuotas(t *testing.T) {
	t.Parallel()
	const yml = `
timezone: Europe/Berlin
default_plan: free
plans:
  free: {daily: 10, monthly: 1000, key: [user]}
  metered: {monthly: 100, key: [user]}
`
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := func(y int, m time.Month, d, hh, mm int) time.Time { return time.Date(y, m, d, hh, mm, 0, 0, berlin) }

	testkit.EachStore(t, func(t *testing.T, store string) {
		t.Run("daily quota resets at local midnight", func(t *testing.T) {
			e := newEnv(t, store, yml, at(2026, 1, 15, 23, 30))
			u := D{"user": "day"}
			if d := e.check(u, 10); !d.Allowed {
				t.Fatalf("10 of 10: %s", describe(d))
			}
			d := e.check(u, 1)
			o := mustOutcome(t, d, "plan-free-daily")
			if d.Allowed || o.RetryAfter != 30*time.Minute || !strings.HasSuffix(o.Key, "|2026-01-15") {
				t.Fatalf("11th token at 23:30 Berlin: %s, want denied until midnight Berlin (30m) under the key of 2026-01-15", describe(d))
			}
			if r := mustOutcome(t, e.inspect(u), "plan-free-daily").ResetAfter; r != 30*time.Minute {
				t.Errorf("ResetAfter at 23:30 = %v, want 30m", r)
			}
			// Midnight UTC is 01:00 Berlin: 23:59:59.999 Berlin is still the same day.
			e.clock.Set(at(2026, 1, 16, 0, 0).Add(-time.Millisecond))
			if d := e.check(u, 1); d.Allowed {
				t.Fatalf("a millisecond before midnight Berlin: %s, want still denied", describe(d))
			}
			e.clock.Set(at(2026, 1, 16, 0, 0)) // 23:00 UTC on the 15th
			d = e.check(u, 10)
			o = mustOutcome(t, d, "plan-free-daily")
			if !d.Allowed || o.Remaining != 0 || o.ResetAfter != 24*time.Hour || !strings.HasSuffix(o.Key, "|2026-01-16") {
				t.Fatalf("midnight Berlin: %s, want a new day of 24h under the key of 2026-01-16", describe(d))
			}
			if m := mustOutcome(t, d, "plan-free-monthly"); m.Remaining != 980 {
				t.Errorf("monthly remaining %d after 20 tokens, want 980", m.Remaining)
			}
		})

		t.Run("monthly quota resets on the 1st", func(t *testing.T) {
			e := newEnv(t, store, yml, at(2026, 2, 10, 0, 0))
			u := D{"user": "month", "plan": "metered"}
			for i := range 10 { // ten tokens a day for ten days
				if d := e.check(u, 10); !d.Allowed {
					t.Fatalf("day %d: %s", i, describe(d))
				}
				e.clock.Advance(24 * time.Hour)
			}
			e.clock.Set(at(2026, 2, 28, 12, 0))
			d := e.check(u, 1)
			o := mustOutcome(t, d, "plan-metered-monthly")
			if d.Allowed || o.RetryAfter != 12*time.Hour || !strings.HasSuffix(o.Key, "|2026-02") {
				t.Fatalf("after 100 tokens in February: %s, want denied for 12h by the monthly quota of 2026-02", describe(d))
			}
			if r := mustOutcome(t, e.inspect(u), "plan-metered-monthly").ResetAfter; r != 12*time.Hour {
				t.Errorf("monthly ResetAfter at noon on Feb 28 = %v, want 12h", r)
			}
			e.clock.Set(at(2026, 3, 1, 0, 0))
			d = e.check(u, 1)
			o = mustOutcome(t, d, "plan-metered-monthly")
			// March 2026 in Berlin: 31 days less the hour lost on the 29th.
			if !d.Allowed || o.Remaining != 99 || o.ResetAfter != 31*24*time.Hour-time.Hour || !strings.HasSuffix(o.Key, "|2026-03") {
				t.Fatalf("March 1st: %s, want allowed in a month of 743h", describe(d))
			}
		})

		t.Run("the day daylight saving time starts lasts 23 hours", func(t *testing.T) {
			// 2026-03-29: 02:00 CET becomes 03:00 CEST.
			e := newEnv(t, store, yml, at(2026, 3, 29, 0, 0))
			u := D{"user": "spring"}
			if d := e.check(u, 1); !d.Allowed {
				t.Fatal(describe(d))
			}
			if r := mustOutcome(t, e.inspect(u), "plan-free-daily").ResetAfter; r != 23*time.Hour {
				t.Errorf("ResetAfter at midnight on 2026-03-29 = %v, want 23h", r)
			}
			e.clock.Set(at(2026, 3, 29, 12, 0))
			if r := mustOutcome(t, e.inspect(u), "plan-free-daily").ResetAfter; r != 12*time.Hour {
				t.Errorf("ResetAfter at noon on 2026-03-29 = %v, want 12h", r)
			}
			if d := e.check(u, 9); !d.Allowed {
				t.Fatal(describe(d))
			}
			e.clock.Set(at(2026, 3, 30, 0, 0).Add(-time.Millisecond))
			if d := e.check(u, 1); d.Allowed {
				t.Fatalf("just before midnight: %s, want denied", describe(d))
			}
			e.clock.Set(at(2026, 3, 30, 0, 0)) // 22:00 UTC on the 29th
			if d := e.check(u, 1); !d.Allowed || mustOutcome(t, d, "plan-free-daily").ResetAfter != 24*time.Hour {
				t.Fatalf("midnight on 2026-03-30: %s, want a new day of 24h", describe(d))
			}
		})

		t.Run("the day daylight saving time ends lasts 25 hours", func(t *testing.T) {
			// 2026-10-25: 03:00 CEST becomes 02:00 CET.
			e := newEnv(t, store, yml, at(2026, 10, 25, 0, 0))
			u := D{"user": "autumn"}
			if d := e.check(u, 10); !d.Allowed {
				t.Fatal(describe(d))
			}
			if r := mustOutcome(t, e.inspect(u), "plan-free-daily").ResetAfter; r != 25*time.Hour {
				t.Errorf("ResetAfter at midnight on 2026-10-25 = %v, want 25h", r)
			}
			e.clock.Set(at(2026, 10, 26, 0, 0).Add(-time.Millisecond))
			if d := e.check(u, 1); d.Allowed {
				t.Fatalf("just before midnight: %s, want denied", describe(d))
			}
			e.clock.Set(at(2026, 10, 26, 0, 0))
			if d := e.check(u, 1); !d.Allowed {
				t.Fatalf("midnight on 2026-10-26: %s, want allowed", describe(d))
			}
		})
	})
}
