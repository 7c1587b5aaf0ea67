package service_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/service"
	"github.com/tokenlimit/tokenlimit/storekit"
)

// countingStore forwards to a real store and counts the checks it is asked.
type countingStore struct {
	tokenlimit.Store
	checks atomic.Int64
}

// Reserve and Settle forward to the store: an embedded tokenlimit.Store
// promotes only Check, Adjust and Reset.
func (c *countingStore) Reserve(ctx context.Context, now time.Time, req tokenlimit.ReserveRequest, results []tokenlimit.Result) (tokenlimit.ReserveOutcome, error) {
	return storekit.Reserve(ctx, c.Store, now, req, results)
}

func (c *countingStore) Settle(ctx context.Context, now time.Time, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error) {
	return storekit.Settle(ctx, c.Store, now, req)
}

func (c *countingStore) Check(ctx context.Context, now time.Time, items []tokenlimit.Item, results []tokenlimit.Result) (time.Time, error) {
	c.checks.Add(1)
	return c.Store.Check(ctx, now, items, results)
}

const localCacheConfig = `
limits:
  - name: hourly
    key: [user]
    algorithm: token_bucket
    capacity: 2
    refill: 1/h
    local_cache: true
`

// A budget the store denied is denied locally, for as long as its
// retry-after and for costs at least the denied one; a smaller cost, the
// end of the retry-after and this process's own refunds ask the store again.
func TestLocalCacheAnswersDenialsUntilRetryAfter(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, store string) {
		var counted *countingStore
		e := newEnv(t, store, localCacheConfig, t0, func(o *service.Options) {
			counted = &countingStore{Store: o.Store}
			o.Store = counted
		})
		alice := D{"user": "alice"}
		calls := func() int64 { return counted.checks.Load() }
		for range 2 {
			if d := e.check(alice, 1); !d.Allowed {
				t.Fatalf("first requests denied: %s", describe(d))
			}
		}
		denied := e.check(alice, 1) // asks the store: 3 calls
		if denied.Allowed || calls() != 3 {
			t.Fatalf("third request: %s after %d store calls; want denied by the store", describe(denied), calls())
		}
		retry := mustOutcome(t, denied, "hourly").RetryAfter
		e.clock.Advance(10 * time.Minute)
		for _, cost := range []int64{1, 2} {
			d := e.check(alice, cost)
			o := mustOutcome(t, d, "hourly")
			if d.Allowed || calls() != 3 {
				t.Fatalf("cost %d while cached: %s after %d store calls; want denied locally", cost, describe(d), calls())
			}
			if want := retry - 10*time.Minute; o.RetryAfter != want {
				t.Errorf("cached retry-after %s, want %s (counted down)", o.RetryAfter, want)
			}
		}
		if e.check(D{"user": "bob"}, 1); calls() != 4 {
			t.Errorf("another user's request made %d store calls in all, want 4: the cache is per key", calls())
		}
		e.clock.Advance(retry - 10*time.Minute)
		if d := e.check(alice, 1); !d.Allowed || calls() != 5 {
			t.Fatalf("after the retry-after: %s after %d store calls; want allowed by the store", describe(d), calls())
		}
		// Over again, and cached; then this process refunds: the budget
		// reopens and the next request asks the store.
		if d := e.check(alice, 1); d.Allowed || calls() != 6 {
			t.Fatalf("over again: %s after %d store calls", describe(d), calls())
		}
		e.clock.Advance(2 * time.Hour) // full again
		if d, err := e.svc.Reserve(context.Background(), "r1", service.Request{Descriptors: alice, Cost: 2}); err != nil || !d.Allowed {
			t.Fatalf("reserve: %v %s", err, describe(d))
		}
		// (A reservation is a store Reserve, not a Check: not counted.)
		if d := e.check(alice, 1); d.Allowed || calls() != 7 {
			t.Fatalf("after reserving the whole bucket: %s after %d store checks", describe(d), calls())
		}
		if _, err := e.svc.Settle(context.Background(), "r1", 1); err != nil { // refunds 1
			t.Fatal(err)
		}
		if d := e.check(alice, 1); !d.Allowed || calls() != 8 {
			t.Fatalf("after refunding part of the reservation: %s after %d store calls; want allowed by the store", describe(d), calls())
		}
	})
}
