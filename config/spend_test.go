package config_test

import (
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
)

func TestUSDAmounts(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]int64{"5": 5_000_000, "5.00": 5_000_000, "0.000125": 125, ".5": 500_000, "1099511.627776": tokenlimit.MaxCost} {
		if got, err := config.ParseUSD(s, tokenlimit.MaxCost); err != nil || got != want {
			t.Errorf("ParseUSD(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", ".", "-1", "+1", "1.0000001", "1e3", "five", "1099511.627777", "1.-5"} {
		if got, err := config.ParseUSD(s, tokenlimit.MaxCost); err == nil {
			t.Errorf("ParseUSD(%q) = %d, want an error", s, got)
		}
	}
	for micro, want := range map[int64]string{5_000_000: "5.00", 4_999_845: "4.999845", 1_500_000: "1.50", 0: "0.00", 10_000: "0.01", -1_500: "-0.0015"} {
		if got := config.FormatUSD(micro); got != want {
			t.Errorf("FormatUSD(%d) = %q, want %q", micro, got, want)
		}
	}
}

// TestPriceOf: whole micro-dollars rounded up, exact far beyond float64's
// precision, saturating above the cost bound.
func TestPriceOf(t *testing.T) {
	t.Parallel()
	// $2.50, $1.25, $3.125 and $10 per M
	p := config.Price{Input: 2_500_000, CachedInput: 1_250_000, CacheWrite: 3_125_000, Output: 10_000_000}
	for _, tt := range []struct{ in, cached, written, out, want int64 }{
		{21, 10, 0, 9, 155}, // 52.5 + 12.5 + 90
		{21, 10, 4, 9, 168}, // 52.5 + 12.5 + 12.5 + 90
		{1, 0, 0, 0, 3},     // 2.5, rounded up
		{0, 0, 0, 0, 0},
		{-5, 0, -1, 0, 0},
		{1 << 40, 0, 0, 0, tokenlimit.MaxCost + 1},
		{400_000, 0, 0, 0, 1_000_000},
	} {
		if got := p.Of(tt.in, tt.cached, tt.written, tt.out); got != tt.want {
			t.Errorf("Of(%d, %d, %d, %d) = %d, want %d", tt.in, tt.cached, tt.written, tt.out, got, tt.want)
		}
	}
	// 2^40 - 1 tokens at the largest price: a product above 2^64.
	huge := config.Price{Input: config.MaxPrice}
	if got := huge.Of(3, 0, 0, 0); got != 3*config.MaxPrice/1_000_000 {
		t.Errorf("huge price: %d", got)
	}
}

func TestSpendConfig(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`
prices:
  gpt-4o: {input: 2.50, output: 10}
  gpt-4o*: {input: 5, output: 15}
  "*": {input: 1, output: 1, cached_input: 0.1, cache_write: 1.25}
limits:
  - {name: day, key: [api_key], unit: usd, algorithm: fixed_window, limit: 5.00/day}
  - {name: bucket, key: [api_key], unit: usd, algorithm: token_bucket, capacity: 1.5, refill: 0.25/h}
api_keys:
  k: {overrides: {day: {limit: 20/day}}}
`), "spend.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if l := cfg.Limits[0]; !l.Cost.Spend || l.Limit.Quota != 5_000_000 || l.Limit.Period != 24*time.Hour {
		t.Errorf("day: %+v, want 5,000,000 µ$ a day charged the spend", l)
	}
	if l := cfg.Limits[1].Limit; l.Burst != 1_500_000 || l.Quota != 250_000 || l.Period != time.Hour {
		t.Errorf("bucket: %+v", l)
	}
	if o := cfg.APIKeys["k"].Overrides["day"]; o.Quota != 20_000_000 {
		t.Errorf("override: %+v, want 20,000,000 µ$", o)
	}
	for model, want := range map[string]string{"gpt-4o": "gpt-4o", "gpt-4o-mini": "gpt-4o*", "claude": "*"} {
		if entry, _, ok := cfg.PriceOf(model); !ok || string(entry) != want {
			t.Errorf("PriceOf(%s) = %s, %v; want %s", model, entry, ok, want)
		}
	}
	if _, p, _ := cfg.PriceOf("claude"); p.CachedInput != 100_000 {
		t.Errorf("cached_input %d, want 100,000", p.CachedInput)
	}
	if _, p, _ := cfg.PriceOf("claude"); p.CacheWrite != 1_250_000 {
		t.Errorf("cache_write %d, want 1,250,000", p.CacheWrite)
	}
	if _, p, _ := cfg.PriceOf("gpt-4o"); p.CachedInput != p.Input || p.CacheWrite != p.Input {
		t.Errorf("no cached_input nor cache_write: %d, %d; want the input price %d", p.CachedInput, p.CacheWrite, p.Input)
	}
}
