package tokenlimit_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/storekit"
)

func TestLimitValidate(t *testing.T) {
	t.Parallel()
	const (
		ms  = time.Millisecond
		sec = time.Second
	)
	tb := tokenlimit.TokenBucket
	slowest := tokenlimit.TokenBucketLimit(1, 1, tokenlimit.MaxPeriod) // one token per 366 days
	maxBurst := testkit.BucketBound(slowest)
	if maxBurst < 2 || maxBurst >= tokenlimit.MaxQuota {
		t.Fatalf("precision bound %d for %s: the table below assumes 2 <= bound < MaxQuota", maxBurst, slowest)
	}
	gcraSlowest := tokenlimit.GCRALimit(maxBurst-1, 1, tokenlimit.MaxPeriod) // burst maxBurst

	tests := []struct {
		name  string
		limit tokenlimit.Limit
		field string // "" means valid
	}{
		// Valid limits, one per constructor, and the edges of each bound.
		{"fixed window", tokenlimit.FixedWindowLimit(5, 5*sec), ""},
		{"sliding log", tokenlimit.SlidingLogLimit(5, 5*sec), ""},
		{"sliding counter", tokenlimit.SlidingCounterLimit(5, 5*sec), ""},
		{"token bucket", tokenlimit.TokenBucketLimit(10, 2, sec), ""},
		{"gcra", tokenlimit.GCRALimit(10, 5, time.Minute), ""},
		{"token bucket burst 0 means quota", tokenlimit.Limit{Algorithm: tb, Quota: 7, Period: sec}, ""},
		{"period of exactly 1ms", tokenlimit.FixedWindowLimit(1, ms), ""},
		{"period of exactly MaxPeriod", tokenlimit.FixedWindowLimit(1, tokenlimit.MaxPeriod), ""},
		{"quota of exactly MaxQuota", tokenlimit.FixedWindowLimit(tokenlimit.MaxQuota, time.Hour), ""},
		{"sliding counter at both its bounds", tokenlimit.SlidingCounterLimit(tokenlimit.MaxSlidingCounterQuota, tokenlimit.MaxSlidingCounterPeriod), ""},
		{"bucket at the precision bound", tokenlimit.TokenBucketLimit(maxBurst, 1, tokenlimit.MaxPeriod), ""},
		{"gcra at the precision bound", gcraSlowest, ""},
		{"burst MaxQuota at a fast rate", tokenlimit.TokenBucketLimit(tokenlimit.MaxQuota, 1000, ms), ""},

		// algorithm
		{"zero algorithm", tokenlimit.Limit{Quota: 1, Period: sec}, "algorithm"},
		{"algorithm past GCRA", tokenlimit.Limit{Algorithm: tokenlimit.GCRA + 1, Quota: 1, Period: sec}, "algorithm"},

		// quota
		{"zero quota", tokenlimit.FixedWindowLimit(0, sec), "quota"},
		{"negative quota", tokenlimit.SlidingLogLimit(-1, sec), "quota"},
		{"quota above MaxQuota", tokenlimit.FixedWindowLimit(tokenlimit.MaxQuota+1, sec), "quota"},
		{"bucket refill above MaxQuota", tokenlimit.TokenBucketLimit(1, tokenlimit.MaxQuota+1, sec), "quota"},

		// period
		{"zero period", tokenlimit.FixedWindowLimit(1, 0), "period"},
		{"negative period", tokenlimit.TokenBucketLimit(1, 1, -sec), "period"},
		{"period below 1ms", tokenlimit.FixedWindowLimit(1, 999*time.Microsecond), "period"},
		{"period not whole ms", tokenlimit.FixedWindowLimit(1, 1500*time.Microsecond), "period"},
		{"period of 1s and 1ns", tokenlimit.TokenBucketLimit(1, 1, sec+1), "period"},
		{"period above MaxPeriod", tokenlimit.FixedWindowLimit(1, tokenlimit.MaxPeriod+ms), "period"},

		// the sliding counter's tighter bounds
		{"sliding counter quota above its bound", tokenlimit.SlidingCounterLimit(tokenlimit.MaxSlidingCounterQuota+1, sec), "quota"},
		{"sliding counter period above its bound", tokenlimit.SlidingCounterLimit(1, tokenlimit.MaxSlidingCounterPeriod+ms), "period"},
		{"sliding log may exceed the counter's quota bound", tokenlimit.SlidingLogLimit(tokenlimit.MaxSlidingCounterQuota+1, sec), ""},
		{"fixed window may exceed the counter's period bound", tokenlimit.FixedWindowLimit(1, tokenlimit.MaxSlidingCounterPeriod+ms), ""},

		// burst
		{"fixed window with a burst", tokenlimit.Limit{Algorithm: tokenlimit.FixedWindow, Quota: 5, Period: sec, Burst: 5}, "burst"},
		{"sliding log with a burst", tokenlimit.Limit{Algorithm: tokenlimit.SlidingLog, Quota: 5, Period: sec, Burst: 1}, "burst"},
		{"sliding counter with a burst", tokenlimit.Limit{Algorithm: tokenlimit.SlidingCounter, Quota: 5, Period: sec, Burst: 1}, "burst"},
		{"negative burst", tokenlimit.TokenBucketLimit(-1, 1, sec), "burst"},
		{"gcra max_burst -2", tokenlimit.GCRALimit(-2, 1, sec), "burst"},
		{"burst above MaxQuota", tokenlimit.TokenBucketLimit(tokenlimit.MaxQuota+1, 1000, ms), "burst"},

		// precision: capacity × interval beyond 2^51
		{"bucket past the precision bound", tokenlimit.TokenBucketLimit(maxBurst+1, 1, tokenlimit.MaxPeriod), "burst"},
		{"gcra past the precision bound", tokenlimit.GCRALimit(maxBurst, 1, tokenlimit.MaxPeriod), "burst"},
		{"implicit burst (quota) past the precision bound", tokenlimit.Limit{Algorithm: tb, Quota: tokenlimit.MaxQuota, Period: tokenlimit.MaxPeriod}, "burst"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.limit.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("%+v: %v, want valid", tt.limit, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("%+v: valid, want an error naming %q", tt.limit, tt.field)
			}
			if got := testkit.FieldOf(t, err); got != tt.field {
				t.Errorf("%+v: error names %q (%v), want %q", tt.limit, got, err, tt.field)
			}
			if !strings.HasPrefix(err.Error(), tt.field+": ") {
				t.Errorf("message %q does not start with %q", err.Error(), tt.field+": ")
			}
		})
	}
}

// TestPrecisionBoundKeepsLuaExact checks the promise behind the precision
// bound: the largest debt a valid bucket computes, capacity × num, plus a
// present-day time in µs, stays below 2^53 where Lua's doubles are exact.
func TestPrecisionBoundKeepsLuaExact(t *testing.T) {
	t.Parallel()
	now := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for _, l := range []tokenlimit.Limit{
		tokenlimit.TokenBucketLimit(1, 1, tokenlimit.MaxPeriod),
		tokenlimit.TokenBucketLimit(1, 3, time.Second),
		tokenlimit.TokenBucketLimit(1, 7, time.Minute),
		tokenlimit.TokenBucketLimit(1, 1, time.Millisecond),
	} {
		l.Burst = min(testkit.BucketBound(l), tokenlimit.MaxQuota)
		if err := l.Validate(); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		num, _ := l.Interval()
		if span := l.Capacity()*num + now; span >= storekit.MaxExact {
			t.Errorf("%s: capacity × num + now = %d, not below 2^53", l, span)
		}
	}
}

func TestParseAlgorithm(t *testing.T) {
	t.Parallel()
	want := map[tokenlimit.Algorithm]string{
		tokenlimit.FixedWindow:    "fixed_window",
		tokenlimit.SlidingLog:     "sliding_log",
		tokenlimit.SlidingCounter: "sliding_counter",
		tokenlimit.TokenBucket:    "token_bucket",
		tokenlimit.GCRA:           "gcra",
	}
	for a, name := range want {
		if !a.Valid() {
			t.Errorf("%v.Valid() is false", a)
		}
		if a.String() != name {
			t.Errorf("Algorithm(%d).String() = %q, want %q", uint8(a), a.String(), name)
		}
		for _, s := range []string{name, strings.ToUpper(name), strings.ReplaceAll(name, "_", "-"), " " + name + "\t"} {
			got, err := tokenlimit.ParseAlgorithm(s)
			if err != nil || got != a {
				t.Errorf("ParseAlgorithm(%q) = %v, %v; want %v", s, got, err, a)
			}
		}
	}
	for _, s := range []string{"", "leaky_bucket", "fixed window", "Algorithm(1)", "1", "gcra2", "token_bucket_"} {
		got, err := tokenlimit.ParseAlgorithm(s)
		if err == nil {
			t.Errorf("ParseAlgorithm(%q) = %v, want an error", s, got)
			continue
		}
		if got != 0 {
			t.Errorf("ParseAlgorithm(%q) returned %v with its error, want the zero Algorithm", s, got)
		}
		if !strings.Contains(err.Error(), "token_bucket") {
			t.Errorf("ParseAlgorithm(%q): %q does not list the valid names", s, err)
		}
	}
	for _, a := range []tokenlimit.Algorithm{0, tokenlimit.GCRA + 1, 255} {
		if a.Valid() {
			t.Errorf("Algorithm(%d).Valid() is true", uint8(a))
		}
		if got, want := a.String(), "Algorithm("; !strings.HasPrefix(got, want) {
			t.Errorf("Algorithm(%d).String() = %q, want %q...", uint8(a), got, want)
		}
	}
}

func TestCapacity(t *testing.T) {
	t.Parallel()
	tests := []struct {
		limit tokenlimit.Limit
		want  int64
	}{
		{tokenlimit.FixedWindowLimit(5, time.Second), 5},
		{tokenlimit.SlidingLogLimit(6, time.Second), 6},
		{tokenlimit.SlidingCounterLimit(7, time.Second), 7},
		{tokenlimit.TokenBucketLimit(10, 2, time.Second), 10},
		{tokenlimit.GCRALimit(10, 5, time.Minute), 11}, // CL.THROTTLE k 10 5 60: max_burst+1
		{tokenlimit.GCRALimit(0, 1, time.Second), 1},
		{tokenlimit.Limit{Algorithm: tokenlimit.TokenBucket, Quota: 4, Period: time.Second}, 4},
		{tokenlimit.Limit{Algorithm: tokenlimit.GCRA, Quota: 9, Period: time.Second}, 9},
	}
	for _, tt := range tests {
		if got := tt.limit.Capacity(); got != tt.want {
			t.Errorf("%+v.Capacity() = %d, want %d", tt.limit, got, tt.want)
		}
	}
	if got, want := tokenlimit.TokenBucketLimit(10, 2, time.Second).String(), "token_bucket 2/1s burst 10"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestInterval(t *testing.T) {
	t.Parallel()
	tests := []struct {
		limit    tokenlimit.Limit
		num, den int64
	}{
		{tokenlimit.TokenBucketLimit(10, 2, time.Second), 500000, 1},
		{tokenlimit.TokenBucketLimit(10, 3, time.Second), 1000000, 3},
		{tokenlimit.TokenBucketLimit(10, 10000, time.Minute), 6000, 1},
		{tokenlimit.TokenBucketLimit(10, 7, time.Minute), 60000000, 7},
		{tokenlimit.TokenBucketLimit(10, 90000, time.Minute), 2000, 3},
		{tokenlimit.GCRALimit(10, 5, time.Minute), 12000000, 1},
		{tokenlimit.TokenBucketLimit(10, 1000, time.Millisecond), 1, 1},
		{tokenlimit.TokenBucketLimit(10, 3000, time.Millisecond), 1, 3},
		{tokenlimit.TokenBucketLimit(10, 1, tokenlimit.MaxPeriod), tokenlimit.MaxPeriod.Microseconds(), 1},
	}
	for _, tt := range tests {
		num, den := tt.limit.Interval()
		if num != tt.num || den != tt.den {
			t.Errorf("%s: Interval() = %d/%d, want %d/%d", tt.limit, num, den, tt.num, tt.den)
		}
	}
}

func TestFieldErrorMatchesErrInvalidOnly(t *testing.T) {
	t.Parallel()
	var err error = &tokenlimit.FieldError{Field: "quota", Reason: "must be positive, got 0"}
	if !errors.Is(err, tokenlimit.ErrInvalid) {
		t.Error("errors.Is(*FieldError, ErrInvalid) is false")
	}
	for _, other := range []error{tokenlimit.ErrStoreFull, errors.New("invalid input")} {
		if errors.Is(err, other) {
			t.Errorf("errors.Is(*FieldError, %v) is true", other)
		}
	}
	if got, want := err.Error(), "quota: must be positive, got 0"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestLimitWindow(t *testing.T) {
	t.Parallel()
	cases := []struct {
		limit tokenlimit.Limit
		want  time.Duration
	}{
		{tokenlimit.TokenBucketLimit(10, 2, time.Second), 5 * time.Second},
		{tokenlimit.TokenBucketLimit(10, 3, time.Second), 3333333 * time.Microsecond},
		{tokenlimit.TokenBucketLimit(1, 1000, time.Second), time.Millisecond},
		{tokenlimit.GCRALimit(9, 60, time.Minute), 10 * time.Second},
		{tokenlimit.TokenBucketLimit(10000, 1, 24*time.Hour), 10000 * 24 * time.Hour},
		{tokenlimit.SlidingLogLimit(5, 5*time.Second), 5 * time.Second},
		{tokenlimit.FixedWindowLimit(5, 1500*time.Millisecond), 1500 * time.Millisecond},
		{tokenlimit.SlidingCounterLimit(5, time.Millisecond), time.Millisecond},
	}
	for _, c := range cases {
		if err := c.limit.Validate(); err != nil {
			t.Fatalf("%s: %v", c.limit, err)
		}
		if got := c.limit.Window(); got != c.want {
			t.Errorf("%s: Window() = %s, want %s", c.limit, got, c.want)
		}
	}
}

// TestREADMEIsAnExample checks that the README's engine example is the body
// of readme in example_test.go, which Example runs.
func TestREADMEIsAnExample(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, _ := strings.Cut(string(readme), "## The engine in one example")
	_, block, _ := strings.Cut(after, "```go\n")
	block, _, _ = strings.Cut(block, "```\n")
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var indented strings.Builder
	for line := range strings.Lines(block) {
		if line != "\n" {
			indented.WriteString("\t")
		}
		indented.WriteString(line)
	}
	if block == "" || !strings.Contains(string(example), "func readme(ctx context.Context) error {\n"+indented.String()+"}\n") {
		t.Errorf("the README's engine example is not the body of readme in example_test.go:\n%s", block)
	}
}

func TestSettleRequestMeasures(t *testing.T) {
	t.Parallel()
	base := tokenlimit.SettleRequest{ID: "r", TTL: time.Hour}
	for _, tc := range []struct {
		measures []int64
		field    string
	}{
		{make([]int64, tokenlimit.MaxMeasures+1), "measures"},
		{[]int64{1, -1}, "measures[1]"},
		{[]int64{tokenlimit.MaxCost + 1}, "measures[0]"},
	} {
		req := base
		req.Measures = tc.measures
		if got := testkit.FieldOf(t, req.Validate()); got != tc.field {
			t.Errorf("Validate with measures %v names %q, want %q", tc.measures, got, tc.field)
		}
	}
}
