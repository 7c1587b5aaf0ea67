package redisstore_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
)

// BenchmarkCheck is a check of one limit and of three (token bucket,
// sliding counter, fixed window) over 10k keys through the Redis store
// (rueidis), by 1, 16, 64 and 256 callers. Besides ns/op it reports
// client-ns/op, this process's CPU time per check (the store and rueidis;
// redis-server runs in its own process), and calls/op, the store's calls
// per check. docs/benchmarks.md has the figures.
func BenchmarkCheck(b *testing.B) {
	srv := redistest.Start(b)
	st := newStore(b, rueidisclient.New(rueidisClient(b, srv.Addr())), redisstore.Options{Prefix: newPrefix()})
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	shapes := []struct {
		name   string
		limits []tokenlimit.Limit
	}{
		{"limits=1", []tokenlimit.Limit{tokenlimit.TokenBucketLimit(1_000_000_000, 1_000_000_000, time.Second)}},
		{"limits=3", []tokenlimit.Limit{
			tokenlimit.TokenBucketLimit(1_000_000_000, 1_000_000_000, time.Second),
			tokenlimit.SlidingCounterLimit(1_000_000_000, time.Second),
			tokenlimit.FixedWindowLimit(1_000_000_000, time.Second),
		}},
	}
	for _, sh := range shapes {
		var next atomic.Uint64
		op := func(b *testing.B, items []tokenlimit.Item, results []tokenlimit.Result) {
			key := keys[next.Add(1)%uint64(len(keys))]
			for i, l := range sh.limits {
				items[i] = tokenlimit.Item{Key: key, Limit: l, Cost: 1}
			}
			if _, err := st.Check(context.Background(), time.Now(), items, results); err != nil || !results[0].Allowed {
				b.Fatal(err)
			}
		}
		for _, callers := range []int{1, 16, 64, 256} {
			b.Run(sh.name+"/callers="+strconv.Itoa(callers), func(b *testing.B) {
				b.ReportAllocs()
				calls, _ := storeCalls(commandCalls(b, srv))
				cpu := processCPU(b)
				if callers == 1 {
					items := make([]tokenlimit.Item, len(sh.limits))
					results := make([]tokenlimit.Result, len(sh.limits))
					for b.Loop() {
						op(b, items, results)
					}
				} else {
					b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
					b.RunParallel(func(pb *testing.PB) {
						items := make([]tokenlimit.Item, len(sh.limits))
						results := make([]tokenlimit.Result, len(sh.limits))
						for pb.Next() {
							op(b, items, results)
						}
					})
				}
				b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "client-ns/op")
				after, _ := storeCalls(commandCalls(b, srv))
				b.ReportMetric(float64(after-calls)/float64(b.N), "calls/op")
			})
		}
	}
}

// processCPU is the CPU time this process has used, user and system, in ns.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
