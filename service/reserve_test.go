package service_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/service"
)

func TestReserveSettle(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: tokens
    key: [user]
    algorithm: fixed_window
    limit: 1000/d
    cost: request
  - name: requests
    key: [user]
    algorithm: token_bucket
    capacity: 100
    refill: 1/d
    cost: 1
  - name: weighted
    key: [user]
    algorithm: sliding_log
    limit: 1000/d
    cost: {by: model, weights: {big: 4}}
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, yml, t0, func(o *service.Options) { o.ReservationTTL = 10 * time.Minute })
		ctx := context.Background()
		u := D{"user": "u", "model": "big"}
		req := func(cost int64) service.Request { return service.Request{Descriptors: u, Cost: cost} }
		state := func() [3]int64 {
			d := e.inspect(u)
			return [3]int64{mustOutcome(t, d, "tokens").Remaining, mustOutcome(t, d, "requests").Remaining, mustOutcome(t, d, "weighted").Remaining}
		}
		expect := func(step string, want [3]int64) {
			t.Helper()
			if got := state(); got != want {
				t.Fatalf("%s: remaining (tokens, requests, weighted) = %v, want %v", step, got, want)
			}
		}
		reserve := func(id string, cost int64) service.Decision {
			t.Helper()
			d, err := e.svc.Reserve(ctx, id, req(cost))
			if err != nil {
				t.Fatalf("Reserve(%q, %d): %v", id, cost, err)
			}
			return d
		}
		settle := func(id string, actual int64) bool {
			t.Helper()
			st, err := e.svc.Settle(ctx, id, actual)
			if err != nil || st == tokenlimit.UnknownReservation {
				t.Fatalf("Settle(%q, %d): %s, %v", id, actual, st, err)
			}
			return st == tokenlimit.AlreadySettled
		}

		// Reserve the estimate; a retried Reserve with the same id charges
		// nothing and returns the first decision.
		d := reserve("r1", 100)
		if !d.Allowed || d.ReservationID != "r1" {
			t.Fatalf("Reserve(r1, 100) = %s id %q", describe(d), d.ReservationID)
		}
		expect("reserved 100", [3]int64{900, 99, 996})
		if again := reserve("r1", 100); again.ReservationID != "r1" || !again.Allowed || !again.Replayed || describe(again) != describe(d) {
			t.Errorf("retried Reserve(r1) = %s, want the first decision %s", describe(again), describe(d))
		}
		expect("retried reserve", [3]int64{900, 99, 996})

		// Settle refunds exactly what the request's own cost did not use;
		// constant and weighted costs do not depend on it.
		if settle("r1", 30) {
			t.Error("first Settle(r1) reported already settled")
		}
		expect("settled 30 of 100", [3]int64{970, 99, 996})
		if !settle("r1", 30) || !settle("r1", 500) {
			t.Error("a second Settle(r1) did not report already settled")
		}
		expect("settled again", [3]int64{970, 99, 996})

		// An actual cost above the estimate charges the difference.
		reserve("r2", 100)
		settle("r2", 250)
		expect("reserved 100, used 250", [3]int64{720, 98, 992})

		// An empty id gets a fresh random one.
		d1, d2 := reserve("", 10), reserve("", 10)
		if len(d1.ReservationID) < 16 || d1.ReservationID == d2.ReservationID {
			t.Errorf("generated ids %q and %q: want distinct random ids", d1.ReservationID, d2.ReservationID)
		}
		settle(d1.ReservationID, 10)
		settle(d2.ReservationID, 0)
		expect("two reservations of 10, one used, one cancelled", [3]int64{710, 96, 984})

		// A reservation not settled within its TTL simply stands.
		reserve("r3", 50)
		e.clock.Advance(10*time.Minute + time.Millisecond)
		if st, err := e.svc.Settle(ctx, "r3", 0); err != nil || st != tokenlimit.UnknownReservation {
			t.Fatalf("Settle after the TTL: %s, %v; want unknown reservation", st, err)
		}
		expect("expired reservation", [3]int64{660, 95, 980})
		// Its id is free again once the tombstone that settle left expires.
		e.clock.Advance(10*time.Minute + time.Millisecond)
		if d := reserve("r3", 10); !d.Allowed {
			t.Fatalf("Reserve(r3) after expiry: %s", describe(d))
		}
		expect("r3 reused", [3]int64{650, 94, 976})
		settle("r3", 10)

		// A denied reservation charges nothing and is not held: settling it
		// finds nothing, and its id can be tried again.
		if d := reserve("r4", 5000); d.Allowed {
			t.Fatalf("Reserve(r4, 5000) = %s, want denied", describe(d))
		}
		if st, err := e.svc.Settle(ctx, "r4", 10); err != nil || st != tokenlimit.UnknownReservation {
			t.Errorf("Settle of a denied reservation = %s, %v; want unknown reservation", st, err)
		}
		expect("denied reservation", [3]int64{650, 94, 976})

		// Errors.
		if st, err := e.svc.Settle(ctx, "no-such-id", 1); err != nil || st != tokenlimit.UnknownReservation {
			t.Errorf("Settle(no-such-id): %s, %v; want unknown reservation", st, err)
		}
		// The same id with another request: a conflict that charges nothing.
		reserve("r5", 10)
		if _, err := e.svc.Reserve(ctx, "r5", req(11)); !errors.Is(err, service.ErrReservationConflict) || !strings.Contains(err.Error(), "r5") {
			t.Errorf("Reserve(r5) with another cost: %v, want ErrReservationConflict naming the id", err)
		}
		if _, err := e.svc.Reserve(ctx, "r5", service.Request{Descriptors: D{"user": "v", "model": "big"}, Cost: 10}); !errors.Is(err, service.ErrReservationConflict) {
			t.Errorf("Reserve(r5) for another user: %v, want ErrReservationConflict", err)
		}
		settle("r5", 10)
		if _, err := e.svc.Settle(ctx, "r3", -1); !errors.Is(err, service.ErrInvalidRequest) || !strings.Contains(err.Error(), "actual") {
			t.Errorf("Settle(r3, -1): %v, want ErrInvalidRequest naming actual", err)
		}
		if _, err := e.svc.Reserve(ctx, strings.Repeat("i", 129), req(1)); !errors.Is(err, service.ErrInvalidRequest) || !strings.Contains(err.Error(), "id") {
			t.Errorf("Reserve with a 129-byte id: %v, want ErrInvalidRequest naming id", err)
		}
		expect("errors", [3]int64{640, 93, 972})
	})
}

// Reservations are idempotent under concurrency: many goroutines reserving
// and settling the same id charge once.
func TestReserveConcurrentRetries(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: tokens
    key: [user]
    algorithm: token_bucket
    capacity: 1000
    refill: 1/d
    cost: request
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, yml, t0)
		ctx := context.Background()
		u := D{"user": "u"}
		errs := make(chan error, 16)
		for range 8 {
			go func() {
				_, err := e.svc.Reserve(ctx, "same", service.Request{Descriptors: u, Cost: 100})
				errs <- err
			}()
		}
		for range 8 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if got := e.remaining(u, "tokens"); got != 900 {
			t.Fatalf("8 concurrent Reserve(same, 100): remaining %d, want 900", got)
		}
		var already [8]bool
		for i := range 8 {
			go func() {
				st, err := e.svc.Settle(ctx, "same", 40)
				already[i] = st == tokenlimit.AlreadySettled
				errs <- err
			}()
		}
		for range 8 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		first := 0
		for _, a := range already {
			if !a {
				first++
			}
		}
		if first != 1 {
			t.Errorf("%d of 8 concurrent Settle calls settled, want exactly 1", first)
		}
		if got := e.remaining(u, "tokens"); got != 960 {
			t.Fatalf("after settling 40: remaining %d, want 960", got)
		}
	})
}

// While the store is down, a fail-open concurrency limit counts requests in
// flight locally, and settling them releases their slots there: fail-open
// must not turn into fail-closed for the length of a lease. Token estimates
// are refunded locally too.
func TestFailOpenReservationsSettleOnTheLocalBudget(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: in-flight
    key: [api_key]
    algorithm: concurrency
    limit: 3
  - name: tokens
    key: [api_key]
    algorithm: token_bucket
    capacity: 100
    refill: 1/h
`
	e := newEnv(t, "redis", yml, t0, func(o *service.Options) {
		o.BreakerThreshold, o.BreakerCooldown, o.StoreTimeout = 1, time.Hour, 50*time.Millisecond
	})
	e.redis.Stop()
	ctx := context.Background()
	req := service.Request{Descriptors: map[string]string{"api_key": "k"}, Cost: 30}
	for i := range 6 {
		d, err := e.svc.Reserve(ctx, "", req)
		if err != nil || !d.Allowed || !d.Reserved {
			t.Fatalf("request %d with Redis down: %s, err %v; want admitted on the local budget", i, describe(d), err)
		}
		for _, o := range d.Limits {
			if !o.FailOpen {
				t.Fatalf("request %d: %s decided on the store, want fail-open", i, o.Name)
			}
		}
		if st, err := e.svc.Settle(ctx, d.ReservationID, 10); err != nil || st != tokenlimit.Settled { // 10 of the 30 reserved
			t.Fatalf("settle %d: %s, %v", i, st, err)
		}
	}
	// 6 × 10 tokens charged locally: 40 of 100 left, all 3 slots free.
	d, err := e.svc.Reserve(ctx, "", service.Request{Descriptors: map[string]string{"api_key": "k"}, Cost: 40})
	if err != nil || !d.Allowed {
		t.Fatalf("after 6 settled requests: %s, %v; want 40 tokens and a slot left", describe(d), err)
	}
	if o := mustOutcome(t, d, "tokens"); o.Remaining != 0 {
		t.Errorf("tokens left %d, want 0 (100 - 6×10 - 40)", o.Remaining)
	}
}

// A fail-open reservation is recorded in the store by its id once the store
// answers again (it is not written back as a plain fail-open charge), so
// that settling it there is exact.
func TestFailOpenReservationsAreReconciledByID(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: tokens
    key: [user]
    algorithm: token_bucket
    capacity: 1000
    refill: 1/d
    cost: request
    fail_open_share: 0.5
`
	const cooldown = time.Second
	e := newEnv(t, testkit.Redis, yml, t0, func(o *service.Options) {
		o.BreakerThreshold, o.BreakerCooldown, o.StoreTimeout = 1, cooldown, 2*time.Second
	})
	ctx := context.Background()
	u := D{"user": "u"}
	e.redis.Stop()
	d, err := e.svc.Reserve(ctx, "r1", service.Request{Descriptors: u, Cost: 100})
	if err != nil || !d.Allowed || !mustOutcome(t, d, "tokens").FailOpen {
		t.Fatalf("reserve with Redis down: %s, %v; want allowed on the local budget", describe(d), err)
	}
	// Redis comes back empty; the breaker lets a call through once its
	// cooldown has passed (a call on a connection that died with the old
	// server may fail, and reopen it for another cooldown).
	e.redis.Restart()
	testkit.Eventually(t, 20*time.Second, "a check decided by Redis", func() bool {
		e.clock.Advance(cooldown)
		return !mustOutcome(t, e.check(D{"user": "probe"}, 1), "tokens").FailOpen
	})
	// Each call that succeeds starts sending what waits, until one of those
	// sends fails (a dead connection again) or nothing is left.
	testkit.Eventually(t, 20*time.Second, "the reservation recorded in Redis", func() bool {
		e.check(D{"user": "probe"}, 1)
		return e.remaining(u, "tokens") == 900
	})
	if st, err := e.svc.Settle(ctx, "r1", 60); err != nil || st != tokenlimit.Settled {
		t.Fatalf("settle: %s, %v", st, err)
	}
	if got := e.remaining(u, "tokens"); got != 940 {
		t.Errorf("after settling at 60: %d left in Redis, want 940", got)
	}
	if st, err := e.svc.Settle(ctx, "r1", 60); err != nil || st != tokenlimit.AlreadySettled {
		t.Errorf("retried settle: %s, %v; want already settled", st, err)
	}
	// Nothing of the local admission is written back on top.
	if o := mustOutcome(t, e.check(u, 1), "tokens"); o.FailOpen || o.Remaining != 939 {
		t.Errorf("a check of 1 after settling: %+v; want decided by Redis, 939 left", o)
	}
}

// A reserve that selects no limit is admitted, as a check would be, and
// records nothing: settling it finds no reservation.
func TestReserveOfNoLimitRecordsNothing(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: tokens
    key: [user]
    algorithm: token_bucket
    capacity: 1000
    refill: 1/s
`
	e := newEnv(t, "memory", yml, t0)
	ctx := context.Background()
	nothing := service.Request{Descriptors: D{"route": "/selects-nothing"}}
	d, err := e.svc.Reserve(ctx, "no-limit", nothing)
	if err != nil || !d.Allowed || d.Reserved {
		t.Fatalf("a reserve selecting no limit: %v %s, want admitted with nothing reserved", err, describe(d))
	}
	if st, err := e.svc.Settle(ctx, "no-limit", 0); err != nil || st != tokenlimit.UnknownReservation {
		t.Errorf("settling it: %s, %v; want unknown", st, err)
	}
}
