package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/service"
)

const recoveryConfig = `
limits:
  - name: open
    key: [user]
    algorithm: fixed_window
    limit: 100/h
    fail_open_share: 0.5
`

// replica is one service sharing the store with the others, with a fault
// store of its own in front of it (taken for a remote store).
type replica struct {
	svc   *service.Service
	reg   *prometheus.Registry
	store *testkit.FaultStore
}

// recoveryEnv is two replicas of a service on one store (memory or Redis),
// at one fake clock.
type recoveryEnv struct {
	t     *testing.T
	clock *testkit.Clock
	store tokenlimit.Store
	a, b  *replica
}

func newRecoveryEnv(t *testing.T, store string, edit ...func(*service.Options)) *recoveryEnv {
	t.Helper()
	e := &recoveryEnv{t: t, clock: testkit.NewClock(t0)}
	switch store {
	case testkit.Memory:
		e.store = testkit.MemStore(t)
	case testkit.Redis:
		e.store = testkit.RedisStore(t, redistest.Start(t).Addr(), testkit.GoRedis)
	}
	e.a, e.b = e.replica(edit), e.replica(edit)
	return e
}

func (e *recoveryEnv) replica(edit []func(*service.Options)) *replica {
	r := &replica{reg: prometheus.NewRegistry(), store: &testkit.FaultStore{Store: e.store, Info: testkit.Remote}}
	opts := service.Options{
		Store: r.store, Clock: e.clock.Now, Registerer: r.reg, Logger: testkit.Quiet(),
		StoreTimeout: 10 * time.Second, BreakerThreshold: 1, BreakerCooldown: time.Second,
	}
	for _, f := range edit {
		f(&opts)
	}
	svc, err := service.New(testkit.ParseConfig(e.t, recoveryConfig), opts)
	if err != nil {
		e.t.Fatal(err)
	}
	r.svc = svc
	return r
}

// run sends n requests of user u to r and returns how many were allowed,
// failing the test if any was not decided as fromLocal says (on the local
// budget, or by the store).
func (e *recoveryEnv) run(r *replica, n int, fromLocal bool) int {
	e.t.Helper()
	allowed := 0
	for range n {
		d, err := r.svc.Check(context.Background(), service.Request{Descriptors: D{"user": "u"}})
		if err != nil || len(d.Limits) != 1 || d.Limits[0].FailOpen != fromLocal || d.Unavailable {
			e.t.Fatalf("check: %s, %v; want decided locally: %v", describe(d), err, fromLocal)
		}
		if d.Allowed {
			allowed++
		}
	}
	return allowed
}

// outage spends 40 of the 100 on the store, 20 per replica in turn, then
// fails the store for both and has each replica decide requests locally
// until its local share is spent, at most perReplica of them allowed.
// It returns what each admitted locally.
func (e *recoveryEnv) outage(perReplica [2]int) [2]int {
	e.t.Helper()
	for range 20 {
		if e.run(e.a, 1, false)+e.run(e.b, 1, false) != 2 {
			e.t.Fatal("a request denied by the store with budget left")
		}
	}
	e.a.store.Set(testkit.Down)
	e.b.store.Set(testkit.Down)
	var local [2]int
	for i, r := range []*replica{e.a, e.b} {
		// The store had 61 and 60 left at the replicas' last answers: the
		// local share of 50 starts at 30 left on each.
		local[i] = e.run(r, perReplica[i], true)
		if want := min(perReplica[i], 30); local[i] != want {
			e.t.Fatalf("replica %d admitted %d locally, want %d", i, local[i], want)
		}
	}
	return local
}

// TestFailOpenRecoveryKeepsToTheLocalBudget: two replicas share a store;
// it fails and each admits its local share (together what the store had
// left); it comes back. The replica back first writes back what it
// admitted, but the store does not yet count what the other admitted
// locally: for the recovery period the first is kept to its spent local
// share (denied without asking the store to check anything but a peek
// once, which carries the write-back)
// instead of being granted the other's share again. Once both wrote back
// and the period is over, the store decides alone: exactly the limit was
// admitted. Both stores.
func TestFailOpenRecoveryKeepsToTheLocalBudget(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newRecoveryEnv(t, store)
		local := e.outage([2]int{40, 40})
		e.a.store.Set(testkit.Healthy)
		e.b.store.Set(testkit.Healthy)
		e.clock.Advance(time.Second) // the breakers' cooldown

		checksBefore := e.a.store.Checks()
		if got := e.run(e.a, 10, true); got != 0 {
			t.Errorf("replica a back first, in recovery, with its local share spent: %d of 10 allowed, want 0", got)
		}
		d, err := e.a.svc.Reserve(context.Background(), "r1", service.Request{Descriptors: D{"user": "u"}})
		if err != nil || d.Allowed || d.Reserved || len(d.Limits) != 1 || !d.Limits[0].FailOpen {
			t.Errorf("reserve on replica a in recovery: %s, %v; want denied by the spent local budget", describe(d), err)
		}
		// Of the store, the first request asked a peek (charging nothing),
		// with the write-back before it; the others nothing.
		if got := e.a.store.Checks() - checksBefore; got != 1 {
			t.Errorf("replica a asked the store %d checks in recovery with its local share spent, want 1 (the peek that writes back)", got)
		}
		if got := testkit.Metric(t, e.a.reg, "tokenlimit_fail_open_writeback_total", "limit", "open", "result", "ok"); got != float64(local[0]) {
			t.Errorf("replica a wrote back %v, want the %d it admitted locally", got, local[0])
		}
		if got := e.run(e.b, 10, true); got != 0 {
			t.Errorf("replica b in recovery: %d of 10 allowed, want 0", got)
		}

		e.clock.Advance(10 * time.Second) // the default FailOpenRecovery
		if got := e.run(e.a, 5, false) + e.run(e.b, 5, false); got != 0 {
			t.Errorf("after the recovery the store allowed %d more, want 0: 40 + %d + %d admitted of 100", got, local[0], local[1])
		}
	})
}

// TestFailOpenRecoveryAdmitsOnBoth: a replica whose local share still has
// room when the store comes back admits a request only if the store admits
// it too (charged on both), and no more in all than its local share, even
// while the store has room; a store denial refunds the local charge. Both
// stores.
func TestFailOpenRecoveryAdmitsOnBoth(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newRecoveryEnv(t, store)
		e.outage([2]int{10, 0}) // a keeps 20 of its 30; b sees no outage
		e.a.store.Set(testkit.Healthy)
		e.b.store.Set(testkit.Healthy)
		e.clock.Advance(time.Second)

		if got := e.run(e.a, 1, false); got != 1 {
			t.Fatal("replica a's first request back: denied, want allowed by the store and the local budget")
		}
		// The store has 100-40-10-1 = 49 left: b, which never failed over,
		// spends it on the store alone.
		if got := e.run(e.b, 50, false); got != 49 {
			t.Fatalf("replica b on the store: %d of 50 allowed, want 49", got)
		}
		d, err := e.a.svc.Check(context.Background(), service.Request{Descriptors: D{"user": "u"}})
		if err != nil || d.Allowed || d.Limits[0].FailOpen {
			t.Fatalf("replica a with the store spent: %s, %v; want denied by the store", describe(d), err)
		}
		// That denial refunded a's local charge: with room made in the
		// store, a admits exactly the 19 its local share still has, then
		// its local budget denies.
		if err := e.store.Reset(context.Background(), d.Limits[0].Key, tokenlimit.FixedWindow); err != nil {
			t.Fatal(err)
		}
		if got := e.run(e.a, 19, false); got != 19 {
			t.Errorf("replica a, in recovery with 19 left locally: %d of 19 allowed, want 19", got)
		}
		d, err = e.a.svc.Check(context.Background(), service.Request{Descriptors: D{"user": "u"}})
		if err != nil || d.Allowed || !d.Limits[0].FailOpen {
			t.Errorf("replica a past its local share, the store with room: %s, %v; want denied by the local budget", describe(d), err)
		}
	})
}

// TestFailOpenRecoveryEndsWithTheWindow: the recovery period ends early
// once the local budget would be whole again: here the window of the
// outage ends before a FailOpenRecovery of 2 hours. Both stores.
func TestFailOpenRecoveryEndsWithTheWindow(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newRecoveryEnv(t, store, func(o *service.Options) { o.FailOpenRecovery = 2 * time.Hour })
		e.outage([2]int{40, 40})
		e.a.store.Set(testkit.Healthy)
		e.clock.Advance(time.Second)
		e.run(e.a, 1, true)
		e.clock.Advance(time.Minute)
		if got := e.run(e.a, 1, true); got != 0 {
			t.Errorf("a minute into a recovery of 2 hours: allowed, want denied by the spent local budget")
		}
		e.clock.Set(t0.Truncate(time.Hour).Add(time.Hour)) // the next window
		if got := e.run(e.a, 5, false); got != 5 {
			t.Errorf("in the next window: %d of 5 allowed by the store, want 5", got)
		}
	})
}
