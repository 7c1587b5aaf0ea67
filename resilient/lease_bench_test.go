package resilient_test

import (
	"context"
	"strconv"
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

// BenchmarkLeaseStats is the listing of leased limits (what /v1/limits
// and the dashboard's Limits page read every 2 s while a leased limit is
// shown): a Failover holding a lease of each of 100,000 budgets of one
// limit, listed by Failover.LeaseStats.
//
//	go test -run '^$' -bench BenchmarkLeaseStats -benchmem ./resilient/
func BenchmarkLeaseStats(b *testing.B) {
	const holders = 100_000
	limit := tokenlimit.TokenBucketLimit(1<<40, 1<<30, 1024*time.Millisecond)
	policy := resilient.Policy{Limit: "hot", Lease: tokenlimit.Lease{Size: 100, TTL: time.Minute}}
	f, err := resilient.NewFailover(testkit.MemStore(b), resilient.FailoverOptions{Logger: testkit.Quiet(), Policy: policy, LeaseKeys: holders})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = f.Close(context.Background()) })
	items, policies, results := make([]tokenlimit.Item, 1), []resilient.Policy{policy}, make([]tokenlimit.Result, 1)
	for i := range holders {
		items[0] = tokenlimit.Item{Key: "k" + strconv.Itoa(i), Limit: limit, Cost: 1}
		if a, err := f.Decide(context.Background(), items, policies, results); err != nil || a.Source != resilient.FromLease {
			b.Fatalf("call %d: %+v %v, want paid from a lease", i, a, err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if st := f.LeaseStats()["hot"]; st.Outstanding < holders {
			b.Fatalf("%+v: want %d leases or more", st, holders)
		}
	}
}
