package resilient

import (
	"strconv"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// BenchmarkFailOpenRemember is the fail-open memory's cost on the hot
// path: a healthy store's answer remembered for one fail-open item, over
// 1,024 budgets.
func BenchmarkFailOpenRemember(b *testing.B) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f := NewFailOpen(4096, time.Minute, func(string, string, int64) {})
	p := Policy{Open: true, Share: 0.5, Limit: "rpm"}
	items := make([]tokenlimit.Item, 1024)
	for i := range items {
		items[i] = tokenlimit.Item{Key: "user=" + strconv.Itoa(i), Limit: tokenlimit.FixedWindowLimit(100, time.Minute), Cost: 1}
	}
	r := tokenlimit.Result{Allowed: true, Limit: 100, Remaining: 50, ResetAfter: time.Minute}
	clock := func() time.Time { return now }
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		f.Remember(items[i%len(items)], p, r, now, clock)
	}
}
