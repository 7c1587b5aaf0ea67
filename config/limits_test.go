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
