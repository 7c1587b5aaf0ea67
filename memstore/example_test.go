package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/memstore"
)

// The embedded store, bounded to 100,000 live keys: past the bound, checks
// that would create a key fail with tokenlimit.ErrStoreFull.
func ExampleNew() {
	store, err := memstore.New(memstore.Options{MaxKeys: 100_000})
	if err != nil {
		panic(err)
	}
	stopped := func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }
	limiter, err := tokenlimit.NewLimiter(store, tokenlimit.WithClock(stopped))
	if err != nil {
		panic(err)
	}
	limit := tokenlimit.SlidingLogLimit(2, time.Minute)
	for range 3 {
		r, err := limiter.Allow(context.Background(), "ip=192.0.2.7", limit)
		if err != nil {
			panic(err)
		}
		fmt.Println(r.Allowed, r.Remaining, r.RetryAfter)
	}
	fmt.Println(store.Len(), "key")
	// Output:
	// true 1 0s
	// true 0 0s
	// false 0 1m0s
	// 1 key
}
