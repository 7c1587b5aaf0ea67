package resilient_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/resilient"
)

// failoverAt is a Failover over a memstore that fails on demand, at a
// clock the test moves, with its breaker opening on the first failure.
func failoverAt(t *testing.T) (*resilient.Failover, *testkit.FaultStore, *testkit.Clock) {
	t.Helper()
	clock := testkit.NewClock(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	store := &testkit.FaultStore{Store: testkit.MemStore(t), Info: testkit.Remote}
	f, err := resilient.NewFailover(store, resilient.FailoverOptions{
		Options: resilient.Options{BreakerThreshold: 1, BreakerCooldown: time.Second, Clock: clock.Now},
		Logger:  testkit.Quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return f, store, clock
}

var (
	perMinute10 = tokenlimit.FixedWindowLimit(10, time.Minute)
	openHalf    = resilient.Policy{Open: true, Share: 0.5, Limit: "open"}
	closed      = resilient.Policy{Limit: "closed"}
)

func decide(t *testing.T, f *resilient.Failover, items []tokenlimit.Item, policies []resilient.Policy) (resilient.Answer, []tokenlimit.Result) {
	t.Helper()
	results := make([]tokenlimit.Result, len(items))
	a, err := f.Decide(context.Background(), items, policies, results)
	if err != nil {
		t.Fatal(err)
	}
	return a, results
}

// TestFailoverAnswersBySource walks one call of each source: the store's
// answer, a failover on local budgets at their shares, a fail-closed item
// making the request unavailable (nothing charged locally), and the
// write-back of what was admitted locally once the store answers.
func TestFailoverAnswersBySource(t *testing.T) {
	f, store, clock := failoverAt(t)
	open := tokenlimit.Item{Key: "open", Limit: perMinute10, Cost: 2}
	shut := tokenlimit.Item{Key: "shut", Limit: perMinute10, Cost: 1}

	a, res := decide(t, f, []tokenlimit.Item{open}, []resilient.Policy{openHalf})
	if a.Source != resilient.FromStore || !a.Allowed || a.Items != nil || res[0].Remaining != 8 {
		t.Fatalf("healthy store: got %+v, %+v; want FromStore, allowed, 8 left", a, res[0])
	}

	store.Set(testkit.Down)
	a, res = decide(t, f, []tokenlimit.Item{open}, []resilient.Policy{openHalf})
	// The local budget is half the limit (5), seeded from the store's 8
	// left of 10: 4 left of 5, then charged 2.
	if a.Source != resilient.FromLocal || !a.Allowed || res[0].Limit != 5 || res[0].Remaining != 2 {
		t.Fatalf("failing store, open item: got %+v, %+v; want FromLocal, allowed, 2 left of 5", a, res[0])
	}

	a, res = decide(t, f, []tokenlimit.Item{open, shut}, []resilient.Policy{openHalf, closed})
	if a.Source != resilient.Unavailable || a.Allowed || !slices.Equal(a.Items, []int{1}) || res[1].Limit != 10 {
		t.Fatalf("failing store, a closed item: got %+v, %+v; want Unavailable naming item 1 with its capacity", a, res)
	}
	if keys, _ := f.LocalKeys(); keys != 1 {
		t.Fatalf("local keys after an unavailable answer: %d, want the open item's only (nothing charged for the refused request)", keys)
	}

	store.Set(testkit.Healthy)
	clock.Advance(time.Second) // the breaker's cooldown: the next call is its trial
	a, res = decide(t, f, []tokenlimit.Item{shut}, []resilient.Policy{closed})
	if a.Source != resilient.FromStore || res[0].Remaining != 9 {
		t.Fatalf("store back: got %+v, %+v; want FromStore, 9 left", a, res[0])
	}
	// The open budget's next call writes back the 2 admitted locally.
	a, res = decide(t, f, []tokenlimit.Item{open}, []resilient.Policy{openHalf})
	if a.Source != resilient.FromStore || res[0].Remaining != 4 {
		t.Fatalf("after the outage: got %+v, %+v; want FromStore, 10 - 2 - 2 written back - 2 = 4 left", a, res[0])
	}
}

// TestFailoverShadowItemsAreNotDecidedLocally: a shadow item is only
// reported, so a failing store leaves it undecided rather than charging a
// local budget.
func TestFailoverShadowItemsAreNotDecidedLocally(t *testing.T) {
	f, store, _ := failoverAt(t)
	store.Set(testkit.Down)
	shadow := resilient.Policy{Open: true, Share: 1, Limit: "shadow", Shadow: true}
	a, _ := decide(t, f, []tokenlimit.Item{{Key: "s", Limit: perMinute10, Cost: 1}}, []resilient.Policy{shadow})
	if a.Source != resilient.Unavailable {
		t.Fatalf("shadow item, failing store: got %v, want unavailable", a.Source)
	}
	if keys, _ := f.LocalKeys(); keys != 0 {
		t.Fatalf("local keys: %d, want 0", keys)
	}
}

// TestFailoverHoldsRecoveringBudgets: a budget decided locally keeps to its
// local budget once the store is back; a request its local budget denies
// is answered HeldLocal without the store charging it.
func TestFailoverHoldsRecoveringBudgets(t *testing.T) {
	f, store, clock := failoverAt(t)
	item := tokenlimit.Item{Key: "k", Limit: perMinute10, Cost: 5}
	store.Set(testkit.Down)
	if a, _ := decide(t, f, []tokenlimit.Item{item}, []resilient.Policy{openHalf}); a.Source != resilient.FromLocal || !a.Allowed {
		t.Fatalf("outage: got %+v, want admitted locally (5 of a local 5)", a)
	}
	store.Set(testkit.Healthy)
	clock.Advance(time.Second)
	checksBefore := store.Checks()
	a, res := decide(t, f, []tokenlimit.Item{item}, []resilient.Policy{openHalf})
	if a.Source != resilient.HeldLocal || a.Allowed || !slices.Equal(a.Items, []int{0}) || res[0].Remaining != 0 {
		t.Fatalf("recovering: got %+v, %+v; want HeldLocal, denied by the spent local budget", a, res[0])
	}
	// The store was asked to peek (cost 0) and took the write-back: it
	// counts the 5 admitted locally, not the held request.
	if store.Checks() != checksBefore+1 {
		t.Fatalf("store checks during the hold: %d, want one peek", store.Checks()-checksBefore)
	}
	peek := []tokenlimit.Item{{Key: "k", Limit: perMinute10}}
	if _, res := decide(t, f, peek, []resilient.Policy{closed}); res[0].Remaining != 5 {
		t.Fatalf("store's count after the hold: %d left, want 5 (the write-back alone)", res[0].Remaining)
	}
}

// TestFailoverReservesLocallyAndReconciles: a reservation taken on the
// local budget while the store fails is settled there, and both are told
// to the store once it answers, by id: charged there once, at the settled
// cost.
func TestFailoverReservesLocallyAndReconciles(t *testing.T) {
	f, store, clock := failoverAt(t)
	item := tokenlimit.Item{Key: "r", Limit: perMinute10, Cost: 4}
	store.Set(testkit.Down)
	req := tokenlimit.ReserveRequest{ID: "res-1", Items: []tokenlimit.Item{item}, TTL: time.Minute}
	results := make([]tokenlimit.Result, 1)
	res, a, err := f.DecideReservation(context.Background(), req, []resilient.Policy{openHalf}, results)
	if err != nil || res == nil || a.Source != resilient.FromLocal || res.Status() != tokenlimit.Reserved {
		t.Fatalf("reserve while failing: %v, %+v, %v; want reserved locally", res, a, err)
	}
	st, err := f.Settle(context.Background(), time.Time{}, tokenlimit.SettleRequest{ID: "res-1", Actual: 3})
	if err != nil || st != tokenlimit.Settled {
		t.Fatalf("settle while failing: %v, %v; want settled locally", st, err)
	}
	if f.PendingReservations() != 1 {
		t.Fatalf("pending: %d, want 1", f.PendingReservations())
	}
	store.Set(testkit.Healthy)
	clock.Advance(time.Second)
	peek := []tokenlimit.Item{{Key: "r", Limit: perMinute10}}
	decide(t, f, peek, []resilient.Policy{closed}) // the store answers: reconciling starts
	testkit.Eventually(t, 10*time.Second, "the local reservation reconciled", func() bool { return f.PendingReservations() == 0 })
	if _, res := decide(t, f, peek, []resilient.Policy{closed}); res[0].Remaining != 7 {
		t.Fatalf("store's count: %d left, want 10 - 3 settled = 7", res[0].Remaining)
	}
	st, err = f.Settle(context.Background(), time.Time{}, tokenlimit.SettleRequest{ID: "res-1", Actual: 3})
	if err != nil || st != tokenlimit.AlreadySettled {
		t.Fatalf("settling again: %v, %v; want AlreadySettled", st, err)
	}
}

// TestFailoverSettleOfAnUnknownReservationWhileFailing fails with
// ErrUnavailable: nothing local to settle, nothing changed.
func TestFailoverSettleOfAnUnknownReservationWhileFailing(t *testing.T) {
	f, store, _ := failoverAt(t)
	store.Set(testkit.Down)
	_, err := f.Settle(context.Background(), time.Time{}, tokenlimit.SettleRequest{ID: "nowhere", Actual: 1})
	if !errors.Is(err, resilient.ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
}

// TestFailoverIsAStoreForALimiter: a Limiter over a Failover gets the fault
// layer under one policy: fail-open decides locally while the store fails
// (and reserves there, settled once the store is back), fail-closed
// answers ErrUnavailable.
func TestFailoverIsAStoreForALimiter(t *testing.T) {
	clock := testkit.NewClock(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	for _, tt := range []struct {
		name   string
		policy resilient.Policy
	}{{"open", resilient.Policy{Open: true, Share: 0.5, Limit: "l"}}, {"closed", resilient.Policy{}}} {
		t.Run(tt.name, func(t *testing.T) {
			store := &testkit.FaultStore{Store: testkit.MemStore(t), Info: testkit.Remote}
			f, err := resilient.NewFailover(store, resilient.FailoverOptions{
				Options: resilient.Options{BreakerThreshold: 1, Clock: clock.Now}, Logger: testkit.Quiet(), Policy: tt.policy,
			})
			if err != nil {
				t.Fatal(err)
			}
			lim, err := tokenlimit.NewLimiter(f, tokenlimit.WithClock(clock.Now))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if r, err := lim.AllowN(ctx, "k", perMinute10, 2); err != nil || !r.Allowed {
				t.Fatalf("healthy store: %+v, %v; want allowed", r, err)
			}
			store.Set(testkit.Down)
			d, err := lim.Check(ctx, tokenlimit.Item{Key: "k", Limit: perMinute10, Cost: 1})
			if tt.policy.Open {
				// The local half (5) seeded from the store's 8 left: 4, less 1.
				if err != nil || !d.Allowed || d.Results[0].Remaining != 3 {
					t.Fatalf("open, store down: %+v, %v; want allowed locally, 3 left of 5", d, err)
				}
				res, err := lim.Reserve(ctx, tokenlimit.Item{Key: "k", Limit: perMinute10, Cost: 2})
				if err != nil || !res.OK() {
					t.Fatalf("open, store down: reserve %v, %v; want reserved locally", res.Status(), err)
				}
				return
			}
			if !errors.Is(err, resilient.ErrUnavailable) {
				t.Fatalf("closed, store down: %+v, %v; want ErrUnavailable", d, err)
			}
		})
	}
	if _, err := resilient.NewFailover(testkit.MemStore(t), resilient.FailoverOptions{Policy: resilient.Policy{Open: true}}); err == nil {
		t.Error("an open policy without a share was accepted")
	}
}
