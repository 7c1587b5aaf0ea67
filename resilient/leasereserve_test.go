package resilient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/resilient"
)

// These tests reserve on a leased limit through ReserveHeld and settle
// through the handle (leasereserve.go), on both stores, at fixed instants
// of the test's clock. The budget is a fixed window of 100 a minute with
// leases of 10 for 1s (leased): the store's count is what was really used
// (a reservation unsettled at its estimate) plus what the outstanding
// leases hold unused.

var perMinute100 = tokenlimit.FixedWindowLimit(100, time.Minute)

// hot is the item of the leased budget, at cost.
func hot(cost int64) tokenlimit.Item {
	return tokenlimit.Item{Key: "hot", Limit: perMinute100, Cost: cost}
}

// reserveHeld reserves items under id through ReserveHeld and wants it
// admitted.
func (e *leaseEnv) reserveHeld(t *testing.T, id string, items []tokenlimit.Item, policies []resilient.Policy) (*resilient.Held, resilient.Answer) {
	t.Helper()
	results := make([]tokenlimit.Result, len(items))
	h, a, err := e.f.ReserveHeld(context.Background(), tokenlimit.ReserveRequest{ID: id, Items: items, TTL: time.Minute}, policies, results)
	if err != nil || h == nil || !h.OK() || !a.Allowed {
		t.Fatalf("reserve %s: got %+v, %+v, %v; want it reserved", id, h, a, err)
	}
	e.idle(t)
	return h, a
}

// settle settles h to actual (cancels it when actual < 0) and wants st.
func (e *leaseEnv) settle(t *testing.T, h *resilient.Held, actual int64, want tokenlimit.SettleStatus) {
	t.Helper()
	req := tokenlimit.SettleRequest{ID: h.ID(), Actual: max(0, actual), Cancel: actual < 0}
	st, err := e.f.SettleHeld(context.Background(), h, req)
	if err != nil || st != want {
		t.Fatalf("settle %s to %d: got %v, %v; want %v", h.ID(), actual, st, err, want)
	}
	e.idle(t)
}

// idle waits until no take or return is in flight.
func (e *leaseEnv) idle(t *testing.T) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, "the leases at rest", func() bool { return resilient.LeasesIdle(e.f) })
}

// wantCount checks the store's count: used really, plus what the leases
// hold unused.
func (e *leaseEnv) wantCount(t *testing.T, used int64) {
	t.Helper()
	unused := e.stats().Unused
	if got := 100 - e.remaining(t, "hot", perMinute100); got != used+unused {
		t.Fatalf("the store counts %d; want %d used and %d unused in leases", got, used, unused)
	}
}

// TestHeldReservationRefundsIntoItsLease: a reservation paid from a live
// lease makes no store call of its own; settling it below its estimate
// gives the difference back to the lease, once, and the lease's return
// leaves the store counting exactly what was used.
func TestHeldReservationRefundsIntoItsLease(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newLeaseEnvOn(t, store)
		h, a := e.reserveHeld(t, "r1", []tokenlimit.Item{hot(4)}, []resilient.Policy{leased})
		if a.Source != resilient.FromLease || h.Status() != tokenlimit.Reserved {
			t.Fatalf("got %+v, %v; want reserved from the lease", a, h.Status())
		}
		e.settle(t, h, 1, tokenlimit.Settled)
		e.settle(t, h, 1, tokenlimit.AlreadySettled)
		e.settle(t, h, 9, tokenlimit.AlreadySettled)
		if s := e.stats(); s.Unused != 9 {
			t.Fatalf("stats %+v: want 9 unused (10 - 4 + 3)", s)
		}
		if r, s, ad := e.store.Reserves(), e.store.Settles(), e.store.Adjusts(); r != 1 || s != 0 || ad != 0 {
			t.Fatalf("store calls: %d reserves, %d settles, %d adjusts; want the lease's take alone", r, s, ad)
		}
		e.wantCount(t, 1)
		e.clock.Advance(time.Second) // the lease ends and is returned
		e.idle(t)
		e.wantCount(t, 1)
		if e.stats().Outstanding != 0 {
			t.Fatal("a lease is still held after its TTL")
		}
	})
}

// TestHeldReservationRefundAfterItsLeaseEnded: once the lease that paid a
// reservation has ended (its return settled it to what it paid, the
// estimate included), the reservation's refund lands on the store, at the
// lease's charge time, exactly once.
func TestHeldReservationRefundAfterItsLeaseEnded(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newLeaseEnvOn(t, store)
		h, _ := e.reserveHeld(t, "r1", []tokenlimit.Item{hot(4)}, []resilient.Policy{leased})
		e.clock.Advance(time.Second)
		e.idle(t)
		e.wantCount(t, 4) // returned at the estimate
		e.settle(t, h, 1, tokenlimit.Settled)
		e.wantCount(t, 1)
		e.settle(t, h, 1, tokenlimit.AlreadySettled)
		e.wantCount(t, 1)
		if ad := e.store.Adjusts(); ad != 1 {
			t.Fatalf("%d adjusts; want the one refund", ad)
		}
	})
}

// TestHeldReservationRefundAfterItsWindow: a fixed window's refund after
// the window the lease was charged in has ended changes nothing, as a
// store settlement's would.
func TestHeldReservationRefundAfterItsWindow(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newLeaseEnvOn(t, store)
		h, _ := e.reserveHeld(t, "r1", []tokenlimit.Item{hot(4)}, []resilient.Policy{leased})
		e.clock.Advance(time.Minute)
		e.idle(t)
		e.settle(t, h, 0, tokenlimit.Settled)
		e.wantCount(t, 0) // the new window is whole
	})
}

// TestHeldReservationExtraCharge: settled above its estimate, a
// reservation pays the difference from its budget's live lease when that
// holds it, and on the store (past what the leases hold) otherwise.
func TestHeldReservationExtraCharge(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newLeaseEnvOn(t, store)
		h1, _ := e.reserveHeld(t, "r1", []tokenlimit.Item{hot(2)}, []resilient.Policy{leased})
		e.settle(t, h1, 4, tokenlimit.Settled) // 2 more from the lease: 6 left
		if s := e.stats(); s.Unused != 6 || e.store.Adjusts() != 0 {
			t.Fatalf("stats %+v, %d adjusts: want the extra 2 paid from the lease", s, e.store.Adjusts())
		}
		e.wantCount(t, 4)
		h2, _ := e.reserveHeld(t, "r2", []tokenlimit.Item{hot(1)}, []resilient.Policy{leased})
		e.settle(t, h2, 31, tokenlimit.Settled) // 30 more: above a lease, on the store
		if ad := e.store.Adjusts(); ad != 1 {
			t.Fatalf("%d adjusts; want the extra charge", ad)
		}
		e.wantCount(t, 35)
		e.clock.Advance(time.Second)
		e.idle(t)
		e.wantCount(t, 35)
	})
}

// TestHeldReservationExtraChargeOwedWhileTheStoreFails: an extra charge
// the store cannot take fails the settle; a retry charges it once, and
// what the lease paid is not settled twice.
func TestHeldReservationExtraChargeOwedWhileTheStoreFails(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newLeaseEnvOn(t, store)
		h, _ := e.reserveHeld(t, "r1", []tokenlimit.Item{hot(2)}, []resilient.Policy{leased})
		e.store.Set(testkit.Down)
		_, err := e.f.SettleHeld(context.Background(), h, tokenlimit.SettleRequest{ID: "r1", Actual: 22})
		if !errors.Is(err, resilient.ErrUnavailable) {
			t.Fatalf("settle in an outage: got %v; want ErrUnavailable", err)
		}
		e.store.Set(testkit.Healthy)
		e.clock.Advance(time.Second) // the breaker's cooldown; the lease ends
		e.idle(t)
		e.settle(t, h, 22, tokenlimit.Settled)
		e.settle(t, h, 22, tokenlimit.AlreadySettled)
		e.wantCount(t, 22)
	})
}

// TestHeldReservationCancel: a cancelled reservation gives its whole
// estimate back to its lease.
func TestHeldReservationCancel(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newLeaseEnvOn(t, store)
		h, _ := e.reserveHeld(t, "r1", []tokenlimit.Item{hot(4)}, []resilient.Policy{leased})
		e.settle(t, h, -1, tokenlimit.Settled)
		e.settle(t, h, 3, tokenlimit.AlreadySettled)
		if s := e.stats(); s.Unused != 10 {
			t.Fatalf("stats %+v: want the lease whole", s)
		}
		e.wantCount(t, 0)
	})
}

// TestHeldReservationAcrossALeaseBoundary: a reservation paid partly from
// a lease that then ends and partly from the next one refunds what the
// live lease paid into it and the rest on the store, and an extra charge
// after its lease ended is paid from the live one; the store counts
// exactly what was used once the leases are returned.
func TestHeldReservationAcrossALeaseBoundary(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newLeaseEnvOn(t, store)
		p := []resilient.Policy{leased}
		h1, _ := e.reserveHeld(t, "r1", []tokenlimit.Item{hot(4)}, p) // lease A, taken at 0
		e.clock.Advance(500 * time.Millisecond)
		e.reserveHeld(t, "r2", []tokenlimit.Item{hot(5)}, p) // A has 1 left: lease B taken at 0.5s
		h3, _ := e.reserveHeld(t, "r3", []tokenlimit.Item{hot(4)}, p)
		if s := e.stats(); s.Outstanding != 1 || s.Unused != 7 {
			t.Fatalf("stats %+v: want A used up (1 paid to r3) and B holding 7 (3 paid to r3)", s)
		}
		e.clock.Advance(500 * time.Millisecond) // A ends, used up
		e.idle(t)
		e.wantCount(t, 13)
		e.settle(t, h3, 0, tokenlimit.Settled) // 3 back to B, 1 to the store
		if s := e.stats(); s.Unused != 10 {
			t.Fatalf("stats %+v: want B whole again", s)
		}
		e.wantCount(t, 9)
		e.settle(t, h1, 6, tokenlimit.Settled) // A ended: 2 more from B
		if s := e.stats(); s.Unused != 8 {
			t.Fatalf("stats %+v: want 2 paid from B", s)
		}
		e.wantCount(t, 11)
		e.clock.Advance(500 * time.Millisecond) // B ends
		e.idle(t)
		e.wantCount(t, 11)
		if s := e.stats(); s.Outstanding != 0 {
			t.Fatalf("stats %+v: want no lease", s)
		}
		if ad := e.store.Adjusts(); ad != 1 {
			t.Fatalf("%d adjusts; want r3's refund of what A paid", ad)
		}
	})
}

// TestHeldReservationWithTheRestOnTheStore: an item without a lease is
// reserved on the store under the id and settled there by it; when the
// store refuses it, what the lease paid goes back.
func TestHeldReservationWithTheRestOnTheStore(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newLeaseEnvOn(t, store)
		tight := tokenlimit.Item{Key: "tight", Limit: tokenlimit.FixedWindowLimit(5, time.Minute), Cost: 4}
		items, policies := []tokenlimit.Item{hot(4), tight}, []resilient.Policy{leased, closed}
		h, a := e.reserveHeld(t, "r1", items, policies)
		if a.Source != resilient.FromStore || h.Status() != tokenlimit.Reserved {
			t.Fatalf("got %+v, %v; want reserved by the store", a, h.Status())
		}
		results := make([]tokenlimit.Result, 2)
		refused, a, err := e.f.ReserveHeld(context.Background(), tokenlimit.ReserveRequest{ID: "r2", Items: items, TTL: time.Minute}, policies, results)
		if err != nil || a.Allowed || refused.OK() || results[1].Allowed {
			t.Fatalf("second reserve: got %+v, %+v, %v; want denied by the tight limit", refused, a, err)
		}
		e.idle(t)
		if s := e.stats(); s.Unused != 16 {
			t.Fatalf("stats %+v: want the 4 paid by the refused reserve given back (6 of the first lease, and the next one's 10)", s)
		}
		e.settle(t, h, 1, tokenlimit.Settled)
		e.settle(t, h, 1, tokenlimit.AlreadySettled)
		if got := e.remaining(t, "tight", tight.Limit); got != 4 {
			t.Fatalf("tight has %d left; want 4 (settled to 1 on the store)", got)
		}
		e.wantCount(t, 1)
	})
}

// TestHeldReservationRefundAcrossTwoEndedLeases: a reservation paid from
// two leases that have both ended is refunded on the store in one
// adjustment of its budget (a store refuses a call that adjusts a budget
// twice), exactly.
func TestHeldReservationRefundAcrossTwoEndedLeases(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newLeaseEnvOn(t, store)
		p := []resilient.Policy{leased}
		e.reserveHeld(t, "r1", []tokenlimit.Item{hot(8)}, p) // lease A; B taken (2 left)
		h2, _ := e.reserveHeld(t, "r2", []tokenlimit.Item{hot(4)}, p)
		if s := e.stats(); s.Outstanding != 1 || s.Unused != 8 {
			t.Fatalf("stats %+v: want A used up (2 paid to r2) and B holding 8 (2 paid to r2)", s)
		}
		e.clock.Advance(time.Second) // A and B end
		e.idle(t)
		e.wantCount(t, 12)
		e.settle(t, h2, 1, tokenlimit.Settled)
		e.wantCount(t, 9)
		if ad := e.store.Adjusts(); ad != 1 {
			t.Fatalf("%d adjusts; want one refund of 3", ad)
		}
	})
}
