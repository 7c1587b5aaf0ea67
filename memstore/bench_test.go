package memstore_test

// Benchmarks of the in-memory store's decision path. Run them, with the
// scaling check, as (docs/benchmarks.md):
//
//	go test -run '^$' -bench . -benchmem -cpu 1,2 ./memstore/
//
// Every benchmark runs under b.RunParallel, so ns/op is wall time per
// decision across all goroutines: with -cpu 2 it should drop on distinct keys
// (no global lock) and may rise on one hot key (one shard mutex, contended).
// Items and results slices are reused, so allocs/op is the store's own.
//
// golang.org/x/time/rate, the in-process reference, is benchmarked beside
// these in the bench/ module (bench/inprocess_test.go), which repeats the
// token bucket and GCRA ones so that both come from one run: the main module
// does not depend on golang.org/x/time.

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/memstore"
)

// benchKeys is the number of keys of the distinct-keys benchmarks, like the
// 10k-limiter map that x/time/rate is measured with.
const benchKeys = 10_000

// benchLimits are limits that admit every decision of a benchmark and keep
// each key's state live (nothing expires between two visits), so the
// benchmarks measure the allow-and-store path in a steady state: huge
// capacities, slow refills, long windows. The sliding log cannot keep an
// unbounded log, so it runs at a short window: on the hot key it sits at its
// 10,000-entry cap (mostly denying), on distinct keys each log holds about a
// hundred entries.
var benchLimits = []struct {
	name  string
	limit tokenlimit.Limit
}{
	{"token_bucket", tokenlimit.TokenBucketLimit(1<<40, 1000, time.Second)},
	{"gcra", tokenlimit.GCRALimit(1<<40-1, 1000, time.Second)},
	{"fixed_window", tokenlimit.FixedWindowLimit(1<<40, time.Hour)},
	{"sliding_counter", tokenlimit.SlidingCounterLimit(1<<33, time.Hour)},
	{"sliding_log", tokenlimit.SlidingLogLimit(1<<40, 100*time.Millisecond)},
}

func newBenchStore(b *testing.B) *memstore.Store {
	b.Helper()
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return st
}

func benchKeyNames(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user=" + strconv.Itoa(100000+i)
	}
	return keys
}

// nextKey steps through n keys in a scattered order; each goroutine starts
// at its own offset.
type keyWalk struct{ i, n int }

var walkers atomic.Int64

func newKeyWalk(n int) keyWalk {
	return keyWalk{i: int(walkers.Add(7717)) % n, n: n}
}

func (w *keyWalk) next() int {
	w.i += 7919 // prime, coprime with n: visits every key
	if w.i >= w.n {
		w.i -= w.n
	}
	return w.i
}

// BenchmarkCheck measures Store.Check with one item at time.Now, per
// algorithm, on one hot key and on 10k distinct keys.
func BenchmarkCheck(b *testing.B) {
	ctx := context.Background()
	keys := benchKeyNames(benchKeys)
	for _, bl := range benchLimits {
		b.Run(bl.name+"/hot", func(b *testing.B) {
			st := newBenchStore(b)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				items := []tokenlimit.Item{{Key: "user=12345", Limit: bl.limit, Cost: 1}}
				results := make([]tokenlimit.Result, 1)
				for pb.Next() {
					if _, err := st.Check(ctx, time.Now(), items, results); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		b.Run(bl.name+"/distinct", func(b *testing.B) {
			st := newBenchStore(b)
			warm(b, st, keys, bl.limit)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				items := []tokenlimit.Item{{Limit: bl.limit, Cost: 1}}
				results := make([]tokenlimit.Result, 1)
				w := newKeyWalk(len(keys))
				for pb.Next() {
					items[0].Key = keys[w.next()]
					if _, err := st.Check(ctx, time.Now(), items, results); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// warm creates every key, so the distinct-keys benchmarks measure the
// steady state rather than the first insertion of each key.
func warm(b *testing.B, st *memstore.Store, keys []string, l tokenlimit.Limit) {
	b.Helper()
	results := make([]tokenlimit.Result, 1)
	for _, k := range keys {
		items := []tokenlimit.Item{{Key: k, Limit: l, Cost: 1}}
		if _, err := st.Check(context.Background(), time.Now(), items, results); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckMulti measures an all-or-nothing check of three limits on
// one request (a per-key token bucket, a per-user sliding counter cap and a
// daily fixed-window quota), on distinct keys.
func BenchmarkCheckMulti(b *testing.B) {
	ctx := context.Background()
	keys := benchKeyNames(benchKeys)
	st := newBenchStore(b)
	limits := [3]tokenlimit.Limit{benchLimits[0].limit, benchLimits[3].limit, tokenlimit.FixedWindowLimit(1<<40, 24*time.Hour)}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		items := make([]tokenlimit.Item, 3)
		for i := range items {
			items[i] = tokenlimit.Item{Limit: limits[i], Cost: 1}
		}
		results := make([]tokenlimit.Result, 3)
		w := newKeyWalk(len(keys))
		for pb.Next() {
			k := keys[w.next()]
			for i := range items {
				items[i].Key = k
			}
			if _, err := st.Check(ctx, time.Now(), items, results); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkLimiterAllowN measures the public entry point,
// tokenlimit.Limiter.AllowN, with a token bucket on the in-memory store:
// what a Go service pays per decision, clock read and result slice included.
func BenchmarkLimiterAllowN(b *testing.B) {
	ctx := context.Background()
	keys := benchKeyNames(benchKeys)
	limit := benchLimits[0].limit
	b.Run("hot", func(b *testing.B) {
		lim, err := tokenlimit.NewLimiter(newBenchStore(b))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := lim.AllowN(ctx, "user=12345", limit, 1); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("distinct", func(b *testing.B) {
		st := newBenchStore(b)
		warm(b, st, keys, limit)
		lim, err := tokenlimit.NewLimiter(st)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			w := newKeyWalk(len(keys))
			for pb.Next() {
				if _, err := lim.AllowN(ctx, keys[w.next()], limit, 1); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
