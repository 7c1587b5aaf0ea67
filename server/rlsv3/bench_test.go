package rlsv3_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/service"
)

// BenchmarkShouldRateLimit measures ShouldRateLimit over loopback gRPC on
// the embedded store with the quickstart limits and the real clock. Each
// call is one descriptor {user, route: /v1/chat} of one of 10,000 users, so
// nearly every call is admitted; client and server share the machine.
//
//   - serial: one call at a time, the latency of a lone caller (p50, p99);
//   - parallel: 16 calls per core in flight on one connection, the
//     throughput (calls/s) and the latency under that load;
//   - parallel-workers: the same with grpc.NumStreamWorkers(GOMAXPROCS),
//     which serves calls on long-lived goroutines instead of one new
//     goroutine (and stack) per call;
//   - half-peak: calls issued at a steady rate, half the peak that 1s of
//     64 concurrent callers reaches, by a pacer that hands each to an idle
//     caller and times it from then (waiting for a free caller counts): the
//     latency at 50% load.
func BenchmarkShouldRateLimit(b *testing.B) {
	for _, v := range []struct {
		name     string
		parallel bool
		opts     []grpc.ServerOption
	}{
		{"serial", false, nil},
		{"parallel", true, nil},
		{"parallel-workers", true, []grpc.ServerOption{grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0)))}},
		{"half-peak", false, nil},
	} {
		b.Run(v.name, func(b *testing.B) {
			if v.name == "half-peak" {
				benchPaced(b)
				return
			}
			call := benchClient(b, v.opts...)
			if !v.parallel {
				lat := make([]time.Duration, 0, b.N)
				for i := 0; b.Loop(); i++ {
					lat = append(lat, call(b, i))
				}
				reportLatency(b, lat, b.Elapsed())
				return
			}
			var (
				mu  sync.Mutex
				lat []time.Duration
				seq int
			)
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				mu.Lock()
				seq++
				i := seq * 7919 // goroutines start on different users
				mu.Unlock()
				var mine []time.Duration
				for ; pb.Next(); i++ {
					mine = append(mine, call(b, i))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			})
			b.StopTimer()
			reportLatency(b, lat, b.Elapsed())
		})
	}
}

// benchPaced measures the peak throughput for a second, then sends b.N
// calls at half that rate from a pool of callers.
func benchPaced(b *testing.B) {
	call := benchClient(b)
	const callers = 64
	var n atomic.Int64
	deadline := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				call(b, int(n.Add(1)))
			}
		})
	}
	wg.Wait()
	rate := float64(n.Load()) / 2 // calls per second
	interval := time.Duration(float64(time.Second) / rate)

	// One pacer hands each call, at its due time, to an idle caller. A
	// call is timed from when the pacer issues it, so waiting for a free
	// caller counts; the pacer's own lateness (timers wake up to ~1ms late,
	// and late calls then go out together) does not.
	due := make(chan time.Time)
	lat := make([]time.Duration, 0, b.N)
	var mu sync.Mutex
	b.ResetTimer()
	for range callers {
		wg.Go(func() {
			var mine []time.Duration
			for at := range due {
				call(b, int(n.Add(1)))
				mine = append(mine, time.Since(at))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	start := time.Now()
	for i := range b.N {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		due <- time.Now()
	}
	close(due)
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(2*rate, "peak-calls/s")
	reportLatency(b, lat, b.Elapsed())
}

// benchClient serves the quickstart limits on the embedded store and
// returns a function making call i, warmed up on every user.
func benchClient(b *testing.B, opts ...grpc.ServerOption) func(b *testing.B, i int) time.Duration {
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	svc, err := service.New(loadConfig(b, "../../examples/quickstart.yaml"), service.Options{Store: st, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	client := serve(b, svc, opts...)
	const users = 10_000
	reqs := make([]*rlspb.RateLimitRequest, users)
	for i := range reqs {
		reqs[i] = request("llm", desc("user", fmt.Sprintf("user-%d", i), "route", "/v1/chat"))
	}
	ctx := context.Background()
	call := func(b *testing.B, i int) time.Duration {
		start := time.Now()
		resp, err := client.ShouldRateLimit(ctx, reqs[i%users])
		took := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if len(resp.Statuses) != 1 {
			b.Fatalf("%d statuses", len(resp.Statuses))
		}
		return took
	}
	for i := range users {
		call(b, i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	return call
}

// reportLatency reports calls/s and the p50 and p99 latencies.
func reportLatency(b *testing.B, lat []time.Duration, elapsed time.Duration) {
	if len(lat) == 0 || elapsed <= 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "calls/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}
