package resilient_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/resilient"
)

// A Limiter over a Failover whose policy takes leases decides a hot key
// in process: the first call takes a lease of 100 from the store (charged
// whole), the next are paid from it without a store call, and Close
// returns what is unused. Use a Redis store, shared by every replica, in
// place of memstore.
func ExampleFailover_lease() {
	ctx := context.Background()
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		panic(err)
	}
	f, err := resilient.NewFailover(store, resilient.FailoverOptions{
		Policy: resilient.Policy{Limit: "org", Lease: tokenlimit.Lease{Size: 100, TTL: time.Hour}},
	})
	if err != nil {
		panic(err)
	}
	lim, err := tokenlimit.NewLimiter(f)
	if err != nil {
		panic(err)
	}
	limit := tokenlimit.TokenBucketLimit(10_000, 1, time.Hour) // refills nothing while the example runs
	for range 50 {
		if r, err := lim.AllowN(ctx, "org=acme", limit, 1); err != nil || !r.Allowed {
			panic(fmt.Sprint(r, err))
		}
	}
	s := f.LeaseStats()["org"]
	fmt.Printf("%d lease of %d, %d used\n", s.Outstanding, s.Leased, s.Leased-s.Unused)
	peek, _ := lim.AllowN(ctx, "org=acme", limit, 0) // a peek asks the store
	fmt.Println("the store has", peek.Remaining, "left")
	if err := f.Close(ctx); err != nil {
		panic(err)
	}
	peek, _ = lim.AllowN(ctx, "org=acme", limit, 0)
	fmt.Println("after Close, the store has", peek.Remaining, "left")
	// Output:
	// 1 lease of 100, 50 used
	// the store has 9900 left
	// after Close, the store has 9950 left
}

// A reservation that this process settles itself, through its handle
// (an LLM call reserved at its estimate and settled to its usage), is
// paid from the leases too: ReserveHeld pays the estimate of 40 from the
// lease, SettleHeld gives the 28 not used back to it, and the store, once
// the lease is returned, holds exactly the 12 used. A reservation that
// another replica may settle by id goes through DecideReservation (or a
// Limiter's Reserve) to the store instead.
func ExampleFailover_ReserveHeld() {
	ctx := context.Background()
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		panic(err)
	}
	policy := resilient.Policy{Limit: "org", Lease: tokenlimit.Lease{Size: 100, TTL: time.Hour}}
	f, err := resilient.NewFailover(store, resilient.FailoverOptions{})
	if err != nil {
		panic(err)
	}
	limit := tokenlimit.FixedWindowLimit(1_000, 24*time.Hour)
	items := []tokenlimit.Item{{Key: "org=acme", Limit: limit, Cost: 40}}
	results := make([]tokenlimit.Result, 1)
	held, a, err := f.ReserveHeld(ctx, tokenlimit.ReserveRequest{ID: tokenlimit.NewID(), Items: items, TTL: time.Minute}, []resilient.Policy{policy}, results)
	if err != nil || !held.OK() {
		panic(fmt.Sprint(a, err))
	}
	fmt.Println("reserved from the", a.Source)
	st, err := f.SettleHeld(ctx, held, tokenlimit.SettleRequest{ID: held.ID(), Actual: 12})
	if err != nil {
		panic(err)
	}
	s := f.LeaseStats()["org"]
	fmt.Printf("%s: the lease has %d unused\n", st, s.Unused)
	if err := f.Close(ctx); err != nil {
		panic(err)
	}
	lim, err := tokenlimit.NewLimiter(store)
	if err != nil {
		panic(err)
	}
	peek, _ := lim.AllowN(ctx, "org=acme", limit, 0)
	fmt.Println("after Close, the store counts", limit.Capacity()-peek.Remaining)
	// Output:
	// reserved from the lease
	// settled: the lease has 88 unused
	// after Close, the store counts 12
}
