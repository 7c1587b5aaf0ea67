package redisstore_test

import (
	"context"
	"os"
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

// BenchmarkBatchCall is one decision of a batch call of a fixed size: the
// call of 1, 16 or 64 checks that many callers' queued checks make, without
// the callers, so that a batch's size is the same from run to run; and
// (lone) the call of a lone caller's check. Shapes:
// one token bucket or GCRA (loadcompare's 100 per second), one fixed window
// (envoycompare's a million per second), three limits (loadcompare's).
// Besides ns/op it reports redis-us/op, redis-server's CPU per decision as
// commandstats counts it. With TOKENLIMIT_BENCH_REDIS=host:port it runs
// against that server instead of one of its own: docs/benchmarks.md has the
// recipe that runs redis-server under callgrind for instructions per
// decision, which do not move with the machine's load.
func BenchmarkBatchCall(b *testing.B) {
	addr, stats := benchRedis(b)
	st := newStore(b, rueidisclient.New(rueidisClient(b, addr)), redisstore.Options{Prefix: "bench:"})
	bucket := tokenlimit.TokenBucketLimit(100, 100, time.Second)
	shapes := []struct {
		name   string
		limits []tokenlimit.Limit
	}{
		{"token_bucket", []tokenlimit.Limit{bucket}},
		{"fixed_window", []tokenlimit.Limit{tokenlimit.FixedWindowLimit(1_000_000, time.Second)}},
		{"limits=3", []tokenlimit.Limit{bucket, tokenlimit.SlidingCounterLimit(100, time.Second), tokenlimit.FixedWindowLimit(1_000_000, 24*time.Hour)}},
	}
	for _, sh := range shapes {
		b.Run(sh.name+"/lone", func(b *testing.B) {
			// The call a lone caller's check makes (Store.Check, nothing
			// queued): the common case.
			items, results := make([]tokenlimit.Item, len(sh.limits)), make([]tokenlimit.Result, len(sh.limits))
			before := stats()
			next := 0
			for b.Loop() {
				for l, lim := range sh.limits {
					items[l] = tokenlimit.Item{Key: "user-" + strconv.Itoa(next%10_000), Limit: lim, Cost: 1}
				}
				if _, err := st.Check(context.Background(), time.Now(), items, results); err != nil || !results[0].Allowed {
					b.Fatal(err, results[0])
				}
				next++
			}
			b.ReportMetric((stats()-before)/float64(b.N), "redis-us/op")
		})
		for _, size := range []int{1, 16, 64} {
			b.Run(sh.name+"/batch="+strconv.Itoa(size), func(b *testing.B) {
				items, results := make([][]tokenlimit.Item, size), make([][]tokenlimit.Result, size)
				for i := range items {
					items[i], results[i] = make([]tokenlimit.Item, len(sh.limits)), make([]tokenlimit.Result, len(sh.limits))
				}
				before := stats()
				next := 0
				for b.Loop() {
					// One decision per iteration, a call per size of them:
					// the keys cycle over 10k, so every check is admitted.
					if next%size == 0 {
						for j := range items {
							for l, lim := range sh.limits {
								items[j][l] = tokenlimit.Item{Key: "user-" + strconv.Itoa((next+j)%10_000), Limit: lim, Cost: 1}
							}
						}
						if err := redisstore.CheckInOneCall(st, time.Now(), items, results); err != nil || !results[0][0].Allowed {
							b.Fatal(err, results[0][0])
						}
					}
					next++
				}
				b.ReportMetric((stats()-before)/float64(b.N), "redis-us/op")
			})
		}
	}
}

// benchRedis is the Redis a benchmark runs against, TOKENLIMIT_BENCH_REDIS
// or its own, and a reading of that server's script CPU in µs.
func benchRedis(b *testing.B) (addr string, scriptUsec func() float64) {
	addr = os.Getenv("TOKENLIMIT_BENCH_REDIS")
	if addr == "" {
		addr = redistest.Start(b).Addr()
	}
	c := goRedisClient(b, addr)
	return addr, func() float64 {
		info, err := c.Info(context.Background(), "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		stats := commandStats(info)
		usec := stats["fcall"]["usec"] + stats["evalsha"]["usec"]
		return usec
	}
}
