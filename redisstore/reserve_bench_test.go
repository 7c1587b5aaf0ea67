package redisstore_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
)

// BenchmarkReserveSettle is one reservation of a token budget and its
// settlement through the Redis store (rueidis), by 1 and 64 callers: two
// round trips per operation. docs/benchmarks.md has the figures.
func BenchmarkReserveSettle(b *testing.B) {
	srv := redistest.Start(b)
	st := newStore(b, rueidisclient.New(rueidisClient(b, srv.Addr())), redisstore.Options{Prefix: newPrefix()})
	lim, err := tokenlimit.NewLimiter(st)
	if err != nil {
		b.Fatal(err)
	}
	l := tokenlimit.TokenBucketLimit(1_000_000_000, 1_000_000, time.Millisecond)
	op := func(b *testing.B) {
		ctx := context.Background()
		res, err := lim.Reserve(ctx, tokenlimit.Item{Key: "bench", Limit: l, Cost: 100})
		if err != nil || !res.OK() {
			b.Fatal(err)
		}
		if _, err := res.Settle(ctx, 40); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("callers=1", func(b *testing.B) {
		for b.Loop() {
			op(b)
		}
	})
	b.Run("callers=64", func(b *testing.B) {
		b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				op(b)
			}
		})
	})
}

// BenchmarkRecordCall is one reservation (reserve) or one reservation and
// its settlement (settle: the settlement's own share is settle minus
// reserve) as the calls make them: a lone caller's (lone: Store.Reserve
// and Store.Settle with nothing queued, the common case) or one of a batch
// call of 16 that queued together. Shapes: one token bucket, and three
// limits (bucket, sliding counter, daily window), each reserved at 10 and
// settled at 4 on keys that cycle over 10k, so every one is admitted.
// Besides ns/op and allocs/op (the store's and rueidis') it reports
// redis-us/op as BenchmarkBatchCall does, and runs against
// TOKENLIMIT_BENCH_REDIS when set, so that bench/redis-instructions.sh
// counts redis-server's instructions per operation.
func BenchmarkRecordCall(b *testing.B) {
	addr, stats := benchRedis(b)
	st := newStore(b, rueidisclient.New(rueidisClient(b, addr)), redisstore.Options{Prefix: "bench:"})
	bucket := tokenlimit.TokenBucketLimit(100, 100, time.Second)
	shapes := []struct {
		name   string
		limits []tokenlimit.Limit
	}{
		{"token_bucket", []tokenlimit.Limit{bucket}},
		{"limits=3", []tokenlimit.Limit{bucket, tokenlimit.SlidingCounterLimit(100, time.Second), tokenlimit.FixedWindowLimit(1_000_000, 24*time.Hour)}},
	}
	ctx := context.Background()
	for _, sh := range shapes {
		for _, op := range []string{"reserve", "settle"} {
			// Request n of a run: ids that no other run uses.
			request := func(run string, n int) tokenlimit.ReserveRequest {
				items := make([]tokenlimit.Item, len(sh.limits))
				for l, lim := range sh.limits {
					items[l] = tokenlimit.Item{Key: "user-" + strconv.Itoa(n%10_000), Limit: lim, Cost: 10}
				}
				return tokenlimit.ReserveRequest{ID: run + "-" + strconv.Itoa(n), Items: items, TTL: time.Minute}
			}
			b.Run(sh.name+"/"+op+"/lone", func(b *testing.B) {
				b.ReportAllocs()
				results := make([]tokenlimit.Result, len(sh.limits))
				run, before, next := tokenlimit.NewID(), stats(), 0
				for b.Loop() {
					req := request(run, next)
					if out, err := st.Reserve(ctx, time.Now(), req, results); err != nil || out.Status != tokenlimit.Reserved {
						b.Fatal(out, err)
					}
					if op == "settle" {
						if s, err := st.Settle(ctx, time.Now(), tokenlimit.SettleRequest{ID: req.ID, Actual: 4, TTL: time.Minute}); err != nil || s != tokenlimit.Settled {
							b.Fatal(s, err)
						}
					}
					next++
				}
				b.ReportMetric((stats()-before)/float64(b.N), "redis-us/op")
			})
			b.Run(sh.name+"/"+op+"/batch=16", func(b *testing.B) {
				const size = 16
				reqs, settles, results := make([]tokenlimit.ReserveRequest, size), make([]tokenlimit.SettleRequest, size), make([][]tokenlimit.Result, size)
				for i := range results {
					results[i] = make([]tokenlimit.Result, len(sh.limits))
				}
				run, before, next := tokenlimit.NewID(), stats(), 0
				for b.Loop() {
					if next%size == 0 {
						for i := range reqs {
							reqs[i] = request(run, next+i)
							settles[i] = tokenlimit.SettleRequest{ID: reqs[i].ID, Actual: 4, TTL: time.Minute}
						}
						if outs, err := redisstore.ReserveInOneCall(st, time.Now(), reqs, results); err != nil || outs[0].Status != tokenlimit.Reserved {
							b.Fatal(outs, err)
						}
						if op == "settle" {
							if ss, err := redisstore.SettleInOneCall(st, time.Now(), settles); err != nil || ss[0] != tokenlimit.Settled {
								b.Fatal(ss, err)
							}
						}
					}
					next++
				}
				b.ReportMetric((stats()-before)/float64(b.N), "redis-us/op")
			})
		}
	}
}
