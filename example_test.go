package tokenlimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/memstore"
)

// stopped is a clock that never moves, so that the examples' outputs are
// exact; leave tokenlimit.WithClock out to use time.Now.
func stopped() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }

// readme is the README's engine example, verbatim (TestREADMEIsAnExample
// checks): a token bucket, several limits at once, and an LLM call reserved
// at an estimate and settled at its real usage.
func readme(ctx context.Context) error {
	store, _ := memstore.New(memstore.Options{}) // or redisstore.New(rueidisclient.New(client), redisstore.Options{})
	limiter, _ := tokenlimit.NewLimiter(store)

	bucket := tokenlimit.TokenBucketLimit(10, 2, time.Second) // capacity 10, refills 2 per second
	res, err := limiter.AllowN(ctx, "user=alice", bucket, 3)  // an embedding costs 3
	if err != nil {
		return err // the store failed or the input was invalid
	}
	if !res.Allowed {
		return fmt.Errorf("429, Retry-After: %s", res.RetryAfter)
	}

	// Several limits at once, all or nothing: if any denies, none is charged.
	d, err := limiter.Check(ctx,
		tokenlimit.Item{Key: "{key=k1}", Limit: bucket, Cost: 3},
		tokenlimit.Item{Key: "{key=k1}:daily", Limit: tokenlimit.FixedWindowLimit(100_000, 24*time.Hour), Cost: 3},
	)
	if err != nil || !d.Allowed {
		return fmt.Errorf("denied or failed: %v", err)
	}

	// LLM calls: reserve an estimate, settle the real usage later. The
	// reservation is recorded in the store, so any replica can settle it by
	// its ID and a retried settle applies once; a denied one is not OK.
	tokens := tokenlimit.TokenBucketLimit(40_000, 1_000, time.Second)
	reservation, err := limiter.Reserve(ctx, tokenlimit.Item{Key: "{key=k1}:tokens", Limit: tokens, Cost: 2_000})
	if err != nil || !reservation.OK() {
		return fmt.Errorf("denied or failed: %v", err)
	}
	_, err = reservation.Settle(ctx, 1_234) // refunds the difference atomically
	return err
}

func Example() {
	if err := readme(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("ok")
	// Output:
	// ok
}

func ExampleLimiter_AllowN() {
	store, _ := memstore.New(memstore.Options{})
	limiter, _ := tokenlimit.NewLimiter(store, tokenlimit.WithClock(stopped))
	limit := tokenlimit.TokenBucketLimit(10, 2, time.Second)
	for range 4 {
		r, err := limiter.AllowN(context.Background(), "user=alice", limit, 3)
		if err != nil {
			panic(err)
		}
		fmt.Println(r.Allowed, r.Remaining, r.RetryAfter)
	}
	// Output:
	// true 7 0s
	// true 4 0s
	// true 1 0s
	// false 1 1s
}

// Wait holds a request until its budget admits it, instead of refusing it.
// Here the limiter's timer moves a fake clock, so the example waits no real
// time; leave WithClock and WithTimer out to sleep on real time.
func ExampleLimiter_WaitN() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	timer := func(d time.Duration) (<-chan time.Time, func() bool) {
		now = now.Add(d) // the wait passes at once
		c := make(chan time.Time, 1)
		c <- now
		return c, func() bool { return false }
	}
	store, _ := memstore.New(memstore.Options{})
	limiter, _ := tokenlimit.NewLimiter(store, tokenlimit.WithClock(clock), tokenlimit.WithTimer(timer))
	limit := tokenlimit.TokenBucketLimit(10, 2, time.Second)
	start := now
	for range 4 {
		r, err := limiter.WaitN(context.Background(), "user=alice", limit, 3)
		if err != nil {
			panic(err)
		}
		fmt.Println(r.Allowed, r.Remaining, "after", now.Sub(start))
	}
	// Output:
	// true 7 after 0s
	// true 4 after 0s
	// true 1 after 0s
	// true 0 after 1s
}

// A single-item call's errors name the argument at fault.
func ExampleLimiter_AllowN_invalid() {
	store, _ := memstore.New(memstore.Options{})
	limiter, _ := tokenlimit.NewLimiter(store)
	_, err := limiter.AllowN(context.Background(), "user=alice", tokenlimit.FixedWindowLimit(5, time.Second), -1)
	fmt.Println(err)
	// Output:
	// tokenlimit: check: cost: must be at least 0, got -1
}

func ExampleLimiter_Check() {
	store, _ := memstore.New(memstore.Options{})
	limiter, _ := tokenlimit.NewLimiter(store, tokenlimit.WithClock(stopped))
	d, err := limiter.Check(context.Background(), tokenlimit.Item{Key: "user=alice", Limit: tokenlimit.FixedWindowLimit(100, time.Minute), Cost: 1})
	if err != nil {
		panic(err)
	}
	r := d.Results[0]
	fmt.Println(r.Remaining, "left, decided at", d.At.Format(time.RFC3339), "resets at", d.At.Add(r.ResetAfter).Format(time.RFC3339))
	// Output:
	// 99 left, decided at 2026-03-01T12:00:00Z resets at 2026-03-01T12:01:00Z
}

func ExampleLimit_Window() {
	fmt.Println(tokenlimit.TokenBucketLimit(10, 2, time.Second).Window())
	fmt.Println(tokenlimit.GCRALimit(9, 60, time.Minute).Window())
	fmt.Println(tokenlimit.SlidingLogLimit(5, 5*time.Second).Window())
	// Output:
	// 5s
	// 10s
	// 5s
}
