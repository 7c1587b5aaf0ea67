package redisstore_test

import (
	"context"
	"runtime"
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
