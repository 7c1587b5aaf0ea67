package tokenlimit_test

// Benchmarks of the Limiter's own cost over the in-memory store, serial so
// that allocs/op and ns/op are one decision's: AllowN (one item, pooled
// slices), Check of three items, and a reservation settled at once.
//
//	go test -run '^$' -bench . -benchmem .

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/memstore"
)

func newBenchLimiter(b *testing.B) *tokenlimit.Limiter {
	b.Helper()
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	lim, err := tokenlimit.NewLimiter(st)
	if err != nil {
		b.Fatal(err)
	}
	return lim
}

// benchLimit admits every decision of a benchmark: a huge bucket that
// refills fast.
var benchLimit = tokenlimit.TokenBucketLimit(1<<40, 1<<30, 1024*time.Millisecond)

func BenchmarkLimiterAllowN(b *testing.B) {
	ctx, lim := context.Background(), newBenchLimiter(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := lim.AllowN(ctx, "user=12345", benchLimit, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLimiterCheck(b *testing.B) {
	ctx, lim := context.Background(), newBenchLimiter(b)
	items := make([]tokenlimit.Item, 3)
	for i := range items {
		items[i] = tokenlimit.Item{Key: "user=12345:" + strconv.Itoa(i), Limit: benchLimit, Cost: 1}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := lim.Check(ctx, items...); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLimiterReserveSettle(b *testing.B) {
	ctx, lim := context.Background(), newBenchLimiter(b)
	item := tokenlimit.Item{Key: "user=12345", Limit: benchLimit, Cost: 100}
	b.ReportAllocs()
	for b.Loop() {
		res, err := lim.Reserve(ctx, item)
		if err != nil || !res.OK() {
			b.Fatal(res.Status(), err)
		}
		if _, err := res.Settle(ctx, 60); err != nil {
			b.Fatal(err)
		}
	}
}
