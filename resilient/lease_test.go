package resilient_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/resilient"
)

// leaseEnv is a Failover taking leases from a memstore that fails on
// demand, at a clock the test moves, with its breaker opening on the
// first failure; events counts the lease events by kind.
type leaseEnv struct {
	f      *resilient.Failover
	store  *testkit.FaultStore
	clock  *testkit.Clock
	mu     sync.Mutex
	events map[resilient.LeaseEvent]int64 // amounts
}

func newLeaseEnv(t *testing.T) *leaseEnv { return newLeaseEnvOn(t, testkit.Memory) }

// newLeaseEnvOn is newLeaseEnv on store (testkit.Memory or Redis).
func newLeaseEnvOn(t *testing.T, store string) *leaseEnv {
	t.Helper()
	e := &leaseEnv{clock: testkit.NewClock(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)), events: map[resilient.LeaseEvent]int64{}}
	e.store = &testkit.FaultStore{Store: leaseStore(t, store), Info: testkit.Remote}
	var err error
	e.f, err = resilient.NewFailover(e.store, resilient.FailoverOptions{
		// A first Redis call that loads its scripts is not a failure on a loaded machine.
		Options:   resilient.Options{BreakerThreshold: 1, BreakerCooldown: time.Second, Clock: e.clock.Now, Timeout: 10 * time.Second},
		Logger:    testkit.Quiet(),
		AfterFunc: e.clock.AfterFunc,
		Observer: resilient.Observer{Lease: func(_ string, ev resilient.LeaseEvent, amount int64) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.events[ev] += amount
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.f.Close(context.Background()) })
	return e
}

func (e *leaseEnv) event(ev resilient.LeaseEvent) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.events[ev]
}

// stats returns the leases held for limit "leased".
func (e *leaseEnv) stats() resilient.LeaseStats { return e.f.LeaseStats()["leased"] }

// remaining peeks at key's budget on the store itself.
func (e *leaseEnv) remaining(t *testing.T, key string, limit tokenlimit.Limit) int64 {
	t.Helper()
	res := make([]tokenlimit.Result, 1)
	if _, err := e.store.Store.Check(context.Background(), e.clock.Now(), []tokenlimit.Item{{Key: key, Limit: limit}}, res); err != nil {
		t.Fatal(err)
	}
	return res[0].Remaining
}

var leased = resilient.Policy{Limit: "leased", Lease: tokenlimit.Lease{Size: 10, TTL: time.Second}}

// TestLeaseDecidesCallsInProcess: a budget's first call takes a lease
// (one reserve, no check), the next calls are paid from it without a
// store call, the next lease is taken ahead of time once less than half
// a lease is left, and the store's budget is charged exactly the leases.
func TestLeaseDecidesCallsInProcess(t *testing.T) {
	e := newLeaseEnv(t)
	limit := tokenlimit.FixedWindowLimit(100, time.Minute)
	item := tokenlimit.Item{Key: "hot", Limit: limit, Cost: 1}
	for i := range 6 {
		a, res := decide(t, e.f, []tokenlimit.Item{item}, []resilient.Policy{leased})
		if a.Source != resilient.FromLease || !a.Allowed || !res[0].Allowed || res[0].Limit != 100 {
			t.Fatalf("call %d: got %+v, %+v; want allowed from the lease", i, a, res[0])
		}
	}
	testkit.Eventually(t, 10*time.Second, "the next lease taken", func() bool { return e.stats().Outstanding == 2 })
	if s := e.stats(); s.Leased != 20 || s.Unused != 14 {
		t.Fatalf("stats %+v: want 2 leases of 10, 14 unused", s)
	}
	if c, r := e.store.Checks(), e.store.Reserves(); c != 0 || r != 2 {
		t.Fatalf("store calls: %d checks, %d reserves; want 0 and 2", c, r)
	}
	if got := e.remaining(t, "hot", limit); got != 80 {
		t.Fatalf("store's budget has %d left; want 80 (two leases charged)", got)
	}
	if got := e.event(resilient.LeaseTaken); got != 20 {
		t.Fatalf("taken %d; want 20", got)
	}
	if s := e.stats(); s.Taken != 2 || s.Denied != 0 || s.Failed != 0 || s.Returned != 0 || s.Stood != 0 {
		t.Fatalf("stats %+v: want 2 taken, nothing else", s)
	}
}

// TestLeaseReturnsItsUnusedPartWhenItExpires: at its TTL a lease settles
// to what it paid for, so the store gets the rest back, once.
func TestLeaseReturnsItsUnusedPartWhenItExpires(t *testing.T) {
	e := newLeaseEnv(t)
	limit := tokenlimit.TokenBucketLimit(100, 1, time.Hour) // refills nothing within the test
	item := tokenlimit.Item{Key: "hot", Limit: limit, Cost: 3}
	decide(t, e.f, []tokenlimit.Item{item}, []resilient.Policy{leased})
	if got := e.remaining(t, "hot", limit); got != 90 {
		t.Fatalf("store's budget has %d left; want 90", got)
	}
	e.clock.Advance(time.Second)
	testkit.Eventually(t, 10*time.Second, "the lease returned", func() bool { return e.event(resilient.LeaseReturned) == 7 })
	if got := e.remaining(t, "hot", limit); got != 97 {
		t.Fatalf("store's budget has %d left after the return; want 97", got)
	}
	if s := e.stats(); s.Outstanding != 0 || s.Unused != 0 || s.Taken != 1 || s.Returned != 7 {
		t.Fatalf("stats %+v: want no lease held, 1 taken and 7 returned", s)
	}
}

// TestLeaseOfAFixedWindowEndsWithItsWindow: a lease taken 10s before its
// window ends decides nothing after it, and the next window's first call
// takes a lease in that window.
func TestLeaseOfAFixedWindowEndsWithItsWindow(t *testing.T) {
	e := newLeaseEnv(t)
	long := resilient.Policy{Limit: "leased", Lease: tokenlimit.Lease{Size: 10, TTL: time.Minute}}
	limit := tokenlimit.FixedWindowLimit(100, time.Minute)
	e.clock.Set(time.Date(2026, 12, 2, 10, 0, 50, 0, time.UTC))
	item := tokenlimit.Item{Key: "hot", Limit: limit, Cost: 1}
	decide(t, e.f, []tokenlimit.Item{item}, []resilient.Policy{long})
	e.clock.Set(time.Date(2026, 12, 2, 10, 1, 0, 0, time.UTC))
	// The old window's tokens are gone with it: nothing to return.
	testkit.Eventually(t, 10*time.Second, "the lease ended", func() bool { return e.stats().Outstanding == 0 })
	a, _ := decide(t, e.f, []tokenlimit.Item{item}, []resilient.Policy{long})
	if a.Source != resilient.FromLease || !a.Allowed {
		t.Fatalf("next window: got %+v; want allowed from a new lease", a)
	}
	if got := e.remaining(t, "hot", limit); got != 90 {
		t.Fatalf("new window's budget has %d left; want 90 (one lease)", got)
	}
}

// TestLeaseMixedCallIsAllOrNothing: a call with a leased item and an
// unleased one that the store denies is denied, and the lease gets its
// payment back.
func TestLeaseMixedCallIsAllOrNothing(t *testing.T) {
	e := newLeaseEnv(t)
	limit := tokenlimit.FixedWindowLimit(100, time.Minute)
	hot := tokenlimit.Item{Key: "hot", Limit: limit, Cost: 4}
	tight := tokenlimit.Item{Key: "tight", Limit: tokenlimit.FixedWindowLimit(1, time.Minute), Cost: 1}
	items, policies := []tokenlimit.Item{hot, tight}, []resilient.Policy{leased, closed}
	if a, _ := decide(t, e.f, items, policies); a.Source != resilient.FromStore || !a.Allowed {
		t.Fatalf("first call: got %+v; want allowed by the store", a)
	}
	if s := e.stats(); s.Unused != 6 {
		t.Fatalf("after an admitted call: %+v; want 6 unused", s)
	}
	a, res := decide(t, e.f, items, policies)
	if a.Allowed || res[1].Allowed {
		t.Fatalf("second call: got %+v, %+v; want denied by the tight limit", a, res)
	}
	// Paying the 4 left 2, below half a lease: the next lease is taken in
	// the background meanwhile.
	testkit.Eventually(t, 10*time.Second, "the next lease taken", func() bool { return e.stats().Leased == 20 })
	if s := e.stats(); s.Unused != 16 {
		t.Fatalf("after a denied call: %+v; want the 4 paid given back (6 of the first lease unused, and the next lease's 10)", s)
	}
}

// TestLeaseOfAnEmptyBudgetDecidesOnTheStore: when less than a lease is
// left, the take is denied and each call is decided on the store, to the
// last unit, with the store's answer; no take is tried again until a
// lease could fit (the next window).
func TestLeaseOfAnEmptyBudgetDecidesOnTheStore(t *testing.T) {
	e := newLeaseEnv(t)
	limit := tokenlimit.FixedWindowLimit(14, time.Minute)
	item := tokenlimit.Item{Key: "small", Limit: limit, Cost: 1}
	for i := range 10 {
		if a, _ := decide(t, e.f, []tokenlimit.Item{item}, []resilient.Policy{leased}); a.Source != resilient.FromLease || !a.Allowed {
			t.Fatalf("call %d: got %+v; want allowed from the lease", i, a)
		}
		if i == 5 { // the next take (4 left) is denied
			testkit.Eventually(t, 10*time.Second, "the next take denied", func() bool { return e.event(resilient.LeaseDenied) == 10 })
		}
	}
	for i := range 5 {
		a, res := decide(t, e.f, []tokenlimit.Item{item}, []resilient.Policy{leased})
		if a.Source != resilient.FromStore || a.Allowed != (i < 4) || res[0].Remaining != int64(max(0, 3-i)) {
			t.Fatalf("store call %d: got %+v, %+v; want the store's answer, allowed for the first 4", i, a, res[0])
		}
	}
	if c, r := e.store.Checks(), e.store.Reserves(); c != 5 || r != 2 {
		t.Fatalf("%d checks, %d takes; want 5 and 2", c, r)
	}
	if s := e.stats(); s.Taken != 1 || s.Denied != 1 || s.Failed != 0 {
		t.Fatalf("stats %+v: want 1 take taken, 1 denied", s)
	}
}

// TestLeaseOutlivesAStoreOutage: while the store fails, calls are paid
// from the leases held; once they are spent, a fail-closed limit is
// unavailable.
func TestLeaseOutlivesAStoreOutage(t *testing.T) {
	e := newLeaseEnv(t)
	limit := tokenlimit.FixedWindowLimit(100, time.Minute)
	item := tokenlimit.Item{Key: "hot", Limit: limit, Cost: 1}
	four := resilient.Policy{Limit: "leased", Lease: tokenlimit.Lease{Size: 4, TTL: time.Minute}}
	for range 3 {
		decide(t, e.f, []tokenlimit.Item{item}, []resilient.Policy{four})
	}
	testkit.Eventually(t, 10*time.Second, "the next lease taken", func() bool { return e.stats().Unused == 5 })
	e.store.Set(testkit.Down)
	for i := range 5 {
		if a, _ := decide(t, e.f, []tokenlimit.Item{item}, []resilient.Policy{four}); a.Source != resilient.FromLease || !a.Allowed {
			t.Fatalf("call %d in the outage: got %+v; want allowed from the lease", i, a)
		}
	}
	if a, _ := decide(t, e.f, []tokenlimit.Item{item}, []resilient.Policy{four}); a.Source != resilient.Unavailable || a.Allowed {
		t.Fatalf("leases spent in the outage: got %+v; want unavailable (fail-closed)", a)
	}
}

// TestLeaseCloseReturnsEverything: closing the Failover returns every
// lease's unused part, and leased items go to the store afterwards.
func TestLeaseCloseReturnsEverything(t *testing.T) {
	e := newLeaseEnv(t)
	limit := tokenlimit.FixedWindowLimit(100, time.Minute)
	for _, key := range []string{"a", "b"} {
		decide(t, e.f, []tokenlimit.Item{{Key: key, Limit: limit, Cost: 2}}, []resilient.Policy{leased})
	}
	if err := e.f.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a", "b"} {
		if got := e.remaining(t, key, limit); got != 98 {
			t.Fatalf("%s: store's budget has %d left after close; want 98", key, got)
		}
	}
	a, _ := decide(t, e.f, []tokenlimit.Item{{Key: "a", Limit: limit, Cost: 1}}, []resilient.Policy{leased})
	if a.Source != resilient.FromStore || !a.Allowed {
		t.Fatalf("after close: got %+v; want decided by the store", a)
	}
}
