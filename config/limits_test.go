package config

import (
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

func TestParseLimitsValid(t *testing.T) {
	ls, err := ParseLimits([]byte(`[{"name": "tpm", "algorithm": "token_bucket", "capacity": 100, "refill": "10/s"},
		{"name": "usd-monthly", "unit": "usd", "algorithm": "fixed_window", "limit": "50.00/day", "calendar": "month"}]`), "limits")
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 2 || ls[0].Limit != tokenlimit.TokenBucketLimit(100, 10, 1e9) || !ls[1].Cost.Spend || ls[1].Calendar != Month || ls[1].Limit.Quota != 50_000_000 {
		t.Fatalf("got %+v", ls)
	}
}

func TestParseLimitsErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`[{"name": "a", "algorithm": "fixed_window", "limit": "10/s", "colour": 1}]`, `limits[0].colour: unknown field`},
		{`[{"name": "a", "algorithm": "fixed_window", "limit": "10/s"}, {"name": "b", "algorithm": "token_bucket", "capacity": -5, "refill": "1/s"}]`, `limits[1].capacity: `},
		{`[{"name": "a", "algorithm": "token_bucket", "capacity": "many", "refill": "1/s"}]`, `limits[0].capacity: `},
		{`[{"name": "a", "algorithm": "fixed_window", "limit": "-3/s"}]`, `limits[0].limit: `},
		{`[{"name": "a", "algorithm": "fixed_window", "limit": "10/s", "key": ["user"]}]`, `limits[0].key: a plane limit`},
		{`[{"name": "a", "algorithm": "fixed_window", "limit": "10/s", "match": {"user": "*"}}]`, `limits[0].match: a plane limit`},
		{`[{"name": "a", "algorithm": "fixed_window", "limit": "10/s"}, {"name": "a", "algorithm": "fixed_window", "limit": "10/s"}]`, `limits[1].name: "a" is already`},
		{`{"name": "a"}`, `limits: want a list`},
		{`[{"name": "a", "name": "b", "algorithm": "fixed_window", "limit": "10/s"}]`, `limits[0].name: repeated key`},
		{`[{"name": "a", "algoritm": "fixed_window", "limit": "10/s"}]`, `limits[0].algoritm: unknown field (did you mean algorithm?)`},
	} {
		_, err := ParseLimits([]byte(c.in), "limits")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.in, err, c.want)
		}
	}
}

// TestWaitDefaults: wait alone takes DefaultMaxWaiting; max_waiting sets it.
func TestWaitDefaults(t *testing.T) {
	ls, err := ParseLimits([]byte(`[{"name": "a", "algorithm": "fixed_window", "limit": "10/s", "wait": "2s"},
		{"name": "b", "algorithm": "fixed_window", "limit": "10/s", "wait": "500ms", "max_waiting": 7},
		{"name": "c", "algorithm": "fixed_window", "limit": "10/s"}]`), "limits")
	if err != nil {
		t.Fatal(err)
	}
	got := [][2]any{{ls[0].Wait, ls[0].MaxWaiting}, {ls[1].Wait, ls[1].MaxWaiting}, {ls[2].Wait, ls[2].MaxWaiting}}
	want := [][2]any{{2 * time.Second, DefaultMaxWaiting}, {500 * time.Millisecond, 7}, {time.Duration(0), 0}}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("limit %d: wait, max_waiting = %v, want %v", i, got[i], want[i])
		}
	}
}

// TestCalendarPeriods: a fixed window's period follows its calendar: N/month
// is the calendar month (calendar: month may be left out), N/day the day;
// N/day under calendar: month is the older spelling of N per month.
func TestCalendarPeriods(t *testing.T) {
	day := 24 * time.Hour
	for _, c := range []struct {
		fields   string
		calendar Calendar
		quota    int64
		period   time.Duration
	}{
		{`"unit": "usd", "limit": "50.00/month"`, Month, 50_000_000, monthPeriod},
		{`"limit": "1000/month", "calendar": "month"`, Month, 1000, monthPeriod},
		{`"limit": "1000 / month"`, Month, 1000, monthPeriod},
		{`"unit": "usd", "limit": "50.00/day", "calendar": "month"`, Month, 50_000_000, monthPeriod},
		{`"limit": "1000/day", "calendar": "day"`, Day, 1000, day},
		{`"limit": "1000/d", "calendar": "day"`, Day, 1000, day},
		{`"limit": "1000/24h", "calendar": "day"`, Day, 1000, day},
		{`"limit": "1000/day"`, NoCalendar, 1000, day},
		{`"limit": "1000/30d"`, NoCalendar, 1000, 30 * day},
	} {
		in := `[{"name": "a", "algorithm": "fixed_window", ` + c.fields + `}]`
		ls, err := ParseLimits([]byte(in), "limits")
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if l := ls[0]; l.Calendar != c.calendar || l.Limit.Quota != c.quota || l.Limit.Period != c.period {
			t.Errorf("%s: calendar %v, quota %d per %v; want %v, %d per %v", in, l.Calendar, l.Limit.Quota, l.Limit.Period, c.calendar, c.quota, c.period)
		}
	}
}

// TestCalendarPeriodMismatches: a period that is not its calendar's, or a
// month where a fixed length is needed, is refused naming the field.
func TestCalendarPeriodMismatches(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`"algorithm": "fixed_window", "limit": "100/month", "calendar": "day"`, `limits[0].limit: calendar: day counts per calendar day, not per month`},
		{`"algorithm": "fixed_window", "limit": "100/h", "calendar": "month"`, `limits[0].limit: calendar: month counts per calendar month: want N/month, got "100/h"`},
		{`"algorithm": "fixed_window", "limit": "100/7d", "calendar": "day"`, `limits[0].limit: calendar: day counts per calendar day: want N/day, got "100/7d"`},
		{`"algorithm": "sliding_counter", "limit": "100/month"`, `limits[0].limit: a month has no fixed length`},
		{`"algorithm": "token_bucket", "capacity": 100, "refill": "100/month"`, `limits[0].refill: a month has no fixed length`},
		{`"algorithm": "gcra", "rate": "100/month", "max_burst": 5`, `limits[0].rate: a month has no fixed length`},
		{`"algorithm": "fixed_window", "limit": "100/week"`, `limits[0].limit: there is no calendar week: use 7d`},
		{`"algorithm": "fixed_window", "limit": "100/month", "rls_limit_override": true`, `limits[0].rls_limit_override: a calendar limit's period`},
	} {
		in := `[{"name": "a", ` + c.in + `}]`
		_, err := ParseLimits([]byte(in), "limits")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", in, err, c.want)
		} else if strings.Count(err.Error(), "\n") != 0 {
			t.Errorf("%s: %d errors, want one:\n%v", in, strings.Count(err.Error(), "\n")+1, err)
		}
	}
}
