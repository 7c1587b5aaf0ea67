package storekit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/storekit"
)

func TestValidateItemsNamesTheItem(t *testing.T) {
	t.Parallel()
	good := tokenlimit.Item{Key: "k", Limit: tokenlimit.TokenBucketLimit(10, 2, time.Second), Cost: 1}
	with := func(f func(*tokenlimit.Item)) tokenlimit.Item {
		it := good
		f(&it)
		return it
	}
	many := make([]tokenlimit.Item, tokenlimit.MaxItems+1)
	for i := range many {
		many[i] = with(func(it *tokenlimit.Item) { it.Key = strings.Repeat("k", i+1) })
	}
	tests := []struct {
		name    string
		items   []tokenlimit.Item
		results int // -1: len(items)
		field   string
	}{
		{"valid", []tokenlimit.Item{good}, -1, ""},
		{"cost 0 peeks", []tokenlimit.Item{with(func(it *tokenlimit.Item) { it.Cost = 0 })}, -1, ""},
		{"cost MaxCost", []tokenlimit.Item{with(func(it *tokenlimit.Item) { it.Cost = tokenlimit.MaxCost })}, -1, ""},
		{"key of MaxKeyLength", []tokenlimit.Item{with(func(it *tokenlimit.Item) { it.Key = strings.Repeat("x", tokenlimit.MaxKeyLength) })}, -1, ""},
		{"same key, other algorithm", []tokenlimit.Item{good, with(func(it *tokenlimit.Item) { it.Limit = tokenlimit.FixedWindowLimit(5, time.Second) })}, -1, ""},
		{"MaxItems items", many[:tokenlimit.MaxItems], -1, ""},
		{"no items", nil, -1, "items"},
		{"too many items", many, -1, "items"},
		{"fewer results", []tokenlimit.Item{good, with(func(it *tokenlimit.Item) { it.Key = "j" })}, 1, "results"},
		{"more results", []tokenlimit.Item{good}, 2, "results"},
		{"empty key", []tokenlimit.Item{with(func(it *tokenlimit.Item) { it.Key = "" })}, -1, "items[0].key"},
		{"key too long", []tokenlimit.Item{good, with(func(it *tokenlimit.Item) { it.Key = strings.Repeat("x", tokenlimit.MaxKeyLength+1) })}, -1, "items[1].key"},
		{"negative cost", []tokenlimit.Item{good, with(func(it *tokenlimit.Item) { it.Key, it.Cost = "j", -1 })}, -1, "items[1].cost"},
		{"cost above MaxCost", []tokenlimit.Item{with(func(it *tokenlimit.Item) { it.Cost = tokenlimit.MaxCost + 1 })}, -1, "items[0].cost"},
		{"bad quota in item 2", []tokenlimit.Item{good, with(func(it *tokenlimit.Item) { it.Key = "j" }), with(func(it *tokenlimit.Item) { it.Key, it.Limit.Quota = "i", 0 })}, -1, "items[2].quota"},
		{"bad period", []tokenlimit.Item{with(func(it *tokenlimit.Item) { it.Limit.Period = 1500 * time.Microsecond })}, -1, "items[0].period"},
		{"bad algorithm", []tokenlimit.Item{with(func(it *tokenlimit.Item) { it.Limit.Algorithm = 0 })}, -1, "items[0].algorithm"},
		{"repeated budget", []tokenlimit.Item{good, with(func(it *tokenlimit.Item) { it.Key = "j" }), with(func(it *tokenlimit.Item) { it.Limit.Quota = 3 })}, -1, "items[2].key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := tt.results
			if n < 0 {
				n = len(tt.items)
			}
			err := storekit.ValidateItems(tt.items, make([]tokenlimit.Result, n))
			if tt.field == "" {
				if err != nil {
					t.Fatalf("%v, want valid", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("valid, want an error naming %q", tt.field)
			}
			if got := testkit.FieldOf(t, err); got != tt.field {
				t.Errorf("error names %q (%v), want %q", got, err, tt.field)
			}
		})
	}
}

func TestValidateAdjustmentsNamesTheAdjustment(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	good := tokenlimit.Adjustment{Key: "k", Limit: tokenlimit.TokenBucketLimit(10, 2, time.Second), Delta: -3, ChargedAt: at}
	with := func(f func(*tokenlimit.Adjustment)) tokenlimit.Adjustment {
		a := good
		f(&a)
		return a
	}
	slow := tokenlimit.TokenBucketLimit(10, 1, tokenlimit.MaxPeriod)
	bound := testkit.BucketBound(slow)
	many := make([]tokenlimit.Adjustment, tokenlimit.MaxItems+1)
	for i := range many {
		many[i] = with(func(a *tokenlimit.Adjustment) { a.Key = strings.Repeat("k", i+1) })
	}
	tests := []struct {
		name  string
		adj   []tokenlimit.Adjustment
		field string
	}{
		{"none", nil, ""},
		{"refund", []tokenlimit.Adjustment{good}, ""},
		{"extra charge", []tokenlimit.Adjustment{with(func(a *tokenlimit.Adjustment) { a.Delta = 5 })}, ""},
		{"-MaxCost on a window", []tokenlimit.Adjustment{with(func(a *tokenlimit.Adjustment) {
			a.Limit, a.Delta = tokenlimit.FixedWindowLimit(5, time.Second), -tokenlimit.MaxCost
		})}, ""},
		{"MaxItems", many[:tokenlimit.MaxItems], ""},
		{"slow bucket at its delta bound", []tokenlimit.Adjustment{with(func(a *tokenlimit.Adjustment) { a.Limit, a.Delta = slow, bound })}, ""},
		{"slow bucket at its refund bound", []tokenlimit.Adjustment{with(func(a *tokenlimit.Adjustment) { a.Limit, a.Delta = slow, -bound })}, ""},
		{"too many", many, "adjustments"},
		{"delta below -MaxCost", []tokenlimit.Adjustment{good, with(func(a *tokenlimit.Adjustment) {
			a.Key, a.Limit, a.Delta = "j", tokenlimit.FixedWindowLimit(5, time.Second), -tokenlimit.MaxCost-1
		})}, "adjustments[1].delta"},
		{"delta above MaxCost", []tokenlimit.Adjustment{with(func(a *tokenlimit.Adjustment) {
			a.Limit, a.Delta = tokenlimit.SlidingLogLimit(5, time.Second), tokenlimit.MaxCost+1
		})}, "adjustments[0].delta"},
		{"slow bucket past its delta bound", []tokenlimit.Adjustment{with(func(a *tokenlimit.Adjustment) { a.Limit, a.Delta = slow, bound+1 })}, "adjustments[0].delta"},
		{"slow bucket past its refund bound", []tokenlimit.Adjustment{with(func(a *tokenlimit.Adjustment) { a.Limit, a.Delta = slow, -bound-1 })}, "adjustments[0].delta"},
		{"empty key", []tokenlimit.Adjustment{with(func(a *tokenlimit.Adjustment) { a.Key = "" })}, "adjustments[0].key"},
		{"bad limit", []tokenlimit.Adjustment{good, with(func(a *tokenlimit.Adjustment) { a.Key, a.Limit.Period = "j", 0 })}, "adjustments[1].period"},
		{"repeated budget", []tokenlimit.Adjustment{good, with(func(a *tokenlimit.Adjustment) { a.Delta = 1 })}, "adjustments[1].key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := storekit.ValidateAdjustments(tt.adj)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("%v, want valid", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("valid, want an error naming %q", tt.field)
			}
			if got := testkit.FieldOf(t, err); got != tt.field {
				t.Errorf("error names %q (%v), want %q", got, err, tt.field)
			}
		})
	}
}

// TestSettledMeasures: an item under MeasureRule(k) settles to the
// settlement's Measures[k], or keeps its charge when there are fewer; a rule
// past the last measure is refused.
func TestSettledMeasures(t *testing.T) {
	t.Parallel()
	req := tokenlimit.SettleRequest{ID: "r", TTL: time.Hour}
	req.Actual, req.Measures = 7, []int64{3}
	for _, tc := range []struct {
		rule tokenlimit.SettleRule
		want int64
	}{{tokenlimit.SettleActual, 7}, {tokenlimit.MeasureRule(0), 3}, {tokenlimit.MeasureRule(1), 5}} {
		if got := storekit.Settled(req, tc.rule, 5); got != tc.want {
			t.Errorf("Settled(rule %d, 5) = %d, want %d", tc.rule, got, tc.want)
		}
	}
	r := tokenlimit.ReserveRequest{ID: "r", TTL: time.Hour, Items: []tokenlimit.Item{{Key: "k", Limit: tokenlimit.FixedWindowLimit(10, time.Hour), Cost: 1}},
		Rules: []tokenlimit.SettleRule{tokenlimit.MeasureRule(tokenlimit.MaxMeasures)}}
	if got := testkit.FieldOf(t, storekit.ValidateReserve(r, make([]tokenlimit.Result, 1))); got != "rules[0]" {
		t.Errorf("a rule past the last measure: ValidateReserve names %q, want rules[0]", got)
	}
}
