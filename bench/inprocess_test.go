package bench

// In-process decisions side by side in one run: the in-memory store
// (memstore.Store.Check, and tokenlimit.Limiter.AllowN over it) and the
// reference golang.org/x/time/rate, a single Limiter and a mutex-guarded map
// of 10k limiters (the usual per-key wrapper around it). Run from bench/:
//
//	go test -run '^$' -bench . -benchmem -cpu 1,2 -count 3 .
//
// Every benchmark runs under b.RunParallel, so ns/op is wall time per
// decision across all goroutines; with -cpu 2 it should drop where nothing is
// shared. The same memstore benchmarks live in memstore/bench_test.go for
// runs without this module; these are here so that the comparison with
// x/time/rate comes from one run on one machine.

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/memstore"
)

// nKeys is the number of keys of the distinct-keys benchmarks.
const nKeys = 10_000

// Limits that admit every decision and keep every key live (see
// memstore/bench_test.go): the allow-and-store path in a steady state.
var (
	tbLimit   = tokenlimit.TokenBucketLimit(1<<40, 1000, time.Second)
	gcraLimit = tokenlimit.GCRALimit(1<<40-1, 1000, time.Second)
)

func keyNames(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user=" + strconv.Itoa(100000+i)
	}
	return keys
}

type keyWalk struct{ i, n int }

var walkers atomic.Int64

func newKeyWalk(n int) keyWalk { return keyWalk{i: int(walkers.Add(7717)) % n, n: n} }

func (w *keyWalk) next() int {
	w.i += 7919
	if w.i >= w.n {
		w.i -= w.n
	}
	return w.i
}

func newStore(b *testing.B) *memstore.Store {
	b.Helper()
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return st
}

// BenchmarkMemstore is Store.Check with one item at time.Now and reused
// items/results slices.
func BenchmarkMemstore(b *testing.B) {
	ctx := context.Background()
	keys := keyNames(nKeys)
	for _, c := range []struct {
		name  string
		limit tokenlimit.Limit
	}{{"token_bucket", tbLimit}, {"gcra", gcraLimit}} {
		b.Run(c.name+"/hot", func(b *testing.B) {
			st := newStore(b)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				items := []tokenlimit.Item{{Key: "user=12345", Limit: c.limit, Cost: 1}}
				results := make([]tokenlimit.Result, 1)
				for pb.Next() {
					if _, err := st.Check(ctx, time.Now(), items, results); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		b.Run(c.name+"/distinct", func(b *testing.B) {
			st := newStore(b)
			results := make([]tokenlimit.Result, 1)
			for _, k := range keys { // create every key first: steady state
				if _, err := st.Check(ctx, time.Now(), []tokenlimit.Item{{Key: k, Limit: c.limit, Cost: 1}}, results); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				items := []tokenlimit.Item{{Limit: c.limit, Cost: 1}}
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

// BenchmarkLimiterAllowN is tokenlimit.Limiter.AllowN over the in-memory
// store with a token bucket: the public entry point.
func BenchmarkLimiterAllowN(b *testing.B) {
	ctx := context.Background()
	keys := keyNames(nKeys)
	lim, err := tokenlimit.NewLimiter(newStore(b))
	if err != nil {
		b.Fatal(err)
	}
	for _, k := range keys {
		if _, err := lim.AllowN(ctx, k, tbLimit, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("distinct", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			w := newKeyWalk(len(keys))
			for pb.Next() {
				if _, err := lim.AllowN(ctx, keys[w.next()], tbLimit, 1); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkXRate is golang.org/x/time/rate: one Limiter shared by every
// goroutine ("hot"), and a mutex-guarded map of 10k limiters looked up by key
// on every decision ("map10k"), each allowing every call.
func BenchmarkXRate(b *testing.B) {
	const r, burst = rate.Limit(1e9), 1 << 30
	b.Run("hot", func(b *testing.B) {
		lim := rate.NewLimiter(r, burst)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !lim.Allow() {
					b.Error("denied")
					return
				}
			}
		})
	})
	b.Run("map10k", func(b *testing.B) {
		keys := keyNames(nKeys)
		var mu sync.Mutex
		limiters := make(map[string]*rate.Limiter, len(keys))
		for _, k := range keys {
			limiters[k] = rate.NewLimiter(r, burst)
		}
		get := func(k string) *rate.Limiter {
			mu.Lock()
			defer mu.Unlock()
			l, ok := limiters[k]
			if !ok {
				l = rate.NewLimiter(r, burst)
				limiters[k] = l
			}
			return l
		}
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			w := newKeyWalk(len(keys))
			for pb.Next() {
				if !get(keys[w.next()]).Allow() {
					b.Error("denied")
					return
				}
			}
		})
	})
}
