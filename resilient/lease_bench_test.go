package resilient_test

import (
	"context"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/resilient"
)

// BenchmarkLeaseDecide is the hot path of a leased budget: one key,
// every call paid from the replica's leases (a lease of 10,000 on a
// bucket that always admits, over memstore), from parallel goroutines,
// through Failover.Decide and through a Limiter over the Failover.
//
//	go test -run '^$' -bench BenchmarkLeaseDecide -benchmem ./resilient/
func BenchmarkLeaseDecide(b *testing.B) {
	limit := tokenlimit.TokenBucketLimit(1<<40, 1<<30, 1024*time.Millisecond)
	policy := resilient.Policy{Limit: "hot", Lease: tokenlimit.Lease{Size: 10_000, TTL: time.Second}}
	f, err := resilient.NewFailover(testkit.MemStore(b), resilient.FailoverOptions{Logger: testkit.Quiet(), Policy: policy})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = f.Close(context.Background()) })
	b.Run("path=decide", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			items := []tokenlimit.Item{{Key: "hot", Limit: limit, Cost: 1}}
			policies := []resilient.Policy{policy}
			results := make([]tokenlimit.Result, 1)
			for pb.Next() {
				if a, err := f.Decide(context.Background(), items, policies, results); err != nil || !a.Allowed {
					b.Fatal(a, err)
				}
			}
		})
	})
	b.Run("path=limiter", func(b *testing.B) {
		lim, err := tokenlimit.NewLimiter(f)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if r, err := lim.AllowN(context.Background(), "hot", limit, 1); err != nil || !r.Allowed {
					b.Fatal(r, err)
				}
			}
		})
	})
}
