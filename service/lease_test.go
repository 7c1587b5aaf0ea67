package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/service"
)

const leaseYAML = `
limits:
  - name: hot
    key: [tenant]
    algorithm: token_bucket
    capacity: 1000
    refill: 100/s
    lease: {size: 50, ttl: 2s}
  - name: per-user
    key: [user]
    algorithm: fixed_window
    limit: 3/min
`

// TestLeasedLimitIsDecidedInProcess: calls of a leased limit are paid
// from the replica's leases (the store sees the takes, not the calls), a
// call with an unleased limit too goes to the store for that one and is
// refused whole when it denies, the listing and the metrics show the
// leases, and a reload and Close return them.
func TestLeasedLimitIsDecidedInProcess(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		var counted *testkit.FaultStore
		e := testkit.NewService(t, testkit.Setup{Store: store, Config: testkit.ParseConfig(t, leaseYAML), Metrics: true,
			Start: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC),
			WrapStore: func(st tokenlimit.Store) tokenlimit.Store {
				counted = &testkit.FaultStore{Store: st}
				return counted
			}})
		ctx := context.Background()
		acme := service.Request{Descriptors: map[string]string{"tenant": "acme"}}
		for i := range 40 {
			d, err := e.Service.Check(ctx, acme)
			if err != nil || !d.Allowed {
				t.Fatalf("call %d: %+v, %v; want allowed", i, d, err)
			}
		}
		testkit.Eventually(t, 10*time.Second, "the next lease taken", func() bool {
			return testkit.Metric(t, e.Registry, "tokenlimit_lease_takes_total", "limit", "hot", "outcome", "taken") == 2
		})
		if c, r := counted.Checks(), counted.Reserves(); c != 0 || r != 2 {
			t.Fatalf("store calls for 40 leased calls: %d checks, %d takes; want 0 and 2", c, r)
		}
		if got := testkit.Metric(t, e.Registry, "tokenlimit_lease_unused", "limit", "hot"); got != 60 {
			t.Errorf("tokenlimit_lease_unused = %v; want 60 (two leases of 50, 40 used)", got)
		}
		hot := leaseOf(e.Service, "hot")
		if want := (service.LeaseInfo{Size: 50, TTL: 2 * time.Second, Outstanding: 2, Leased: 100, Unused: 60, Taken: 2}); hot == nil || *hot != want {
			t.Errorf("listing of hot: lease %+v; want %+v", hot, want)
		}

		// A call under both limits: the store decides per-user; once it
		// denies, the lease is not charged.
		both := service.Request{Descriptors: map[string]string{"tenant": "acme", "user": "alice"}}
		for i := range 4 {
			d, err := e.Service.Check(ctx, both)
			if err != nil || d.Allowed != (i < 3) {
				t.Fatalf("call %d under both limits: %+v, %v; want allowed for the first 3", i, d, err)
			}
		}
		if got := testkit.Metric(t, e.Registry, "tokenlimit_lease_unused", "limit", "hot"); got != 57 {
			t.Errorf("tokenlimit_lease_unused = %v after 3 admitted and 1 denied; want 57", got)
		}

		// A reload returns the leases: the store gets the unused 57 back.
		e.Service.Reload(testkit.ParseConfig(t, leaseYAML))
		if got := testkit.Metric(t, e.Registry, "tokenlimit_lease_returned_total", "limit", "hot", "result", "returned"); got != 57 {
			t.Errorf("returned at reload: %v; want 57", got)
		}
		if got := testkit.Metric(t, e.Registry, "tokenlimit_lease_outstanding", "limit", "hot"); got != 0 {
			t.Errorf("tokenlimit_lease_outstanding = %v after the reload; want 0", got)
		}
		if _, err := e.Service.Check(ctx, acme); err != nil {
			t.Fatal(err)
		}
		e.Service.Close()
		if got := testkit.Metric(t, e.Registry, "tokenlimit_lease_returned_total", "limit", "hot", "result", "returned"); got != 57+49 {
			t.Errorf("returned after close: %v; want %d", got, 57+49)
		}
		if l := leaseOf(e.Service, "hot"); l == nil || l.Outstanding != 0 || l.Unused != 0 || l.Taken != 3 || l.Returned != 57+49 || l.Stood != 0 {
			t.Errorf("listing of hot after close: lease %+v; want none held, 3 taken, %d returned", l, 57+49)
		}
		d, err := e.Service.Inspect(ctx, acme)
		if err != nil || len(d.Limits) != 1 || d.Limits[0].Remaining != 1000-44 {
			t.Errorf("hot's budget after close: %+v, %v; want exactly the 44 admitted charged (956 left)", d, err)
		}
	})
}

// leaseOf returns the lease of svc's limit name in its listing, nil if it
// has none.
func leaseOf(svc *service.Service, name string) *service.LeaseInfo {
	for _, l := range svc.Limits() {
		if l.Name == name {
			return l.Lease
		}
	}
	return nil
}

// TestReservationsSettledInProcessPayFromLeases: a reservation the caller
// settles through its decision (ReserveOptions.InProcess, as the LLM
// proxy's) is paid from the replica's lease, and so are its settlement
// and its cancellation, once each; InspectHere reads the leased budget
// from the lease; a reservation that may be settled by id goes to the
// store; once the leases are returned the store holds exactly what was
// used.
func TestReservationsSettledInProcessPayFromLeases(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		var counted *testkit.FaultStore
		e := testkit.NewService(t, testkit.Setup{Store: store, Config: testkit.ParseConfig(t, leaseYAML),
			Start: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC),
			WrapStore: func(st tokenlimit.Store) tokenlimit.Store {
				counted = &testkit.FaultStore{Store: st}
				return counted
			}})
		ctx := context.Background()
		acme := service.Request{Descriptors: map[string]string{"tenant": "acme"}, Cost: 20}
		inProcess := service.ReserveOptions{InProcess: true}
		d, err := e.Service.ReserveWith(ctx, inProcess, acme)
		if err != nil || !d.Allowed || !d.Reserved {
			t.Fatalf("reserve: %+v, %v; want reserved", d, err)
		}
		for _, want := range []tokenlimit.SettleStatus{tokenlimit.Settled, tokenlimit.AlreadySettled} {
			if st, _, err := e.Service.SettleUsage(ctx, d, 5, nil, config.Usage{}); err != nil || st != want {
				t.Fatalf("settle: %v, %v; want %v", st, err, want)
			}
		}
		cancelled, err := e.Service.ReserveWith(ctx, inProcess, acme)
		if err != nil || !cancelled.Reserved {
			t.Fatalf("second reserve: %+v, %v", cancelled, err)
		}
		if st, err := e.Service.CancelReserved(ctx, cancelled); err != nil || st != tokenlimit.Settled {
			t.Fatalf("cancel: %v, %v; want settled", st, err)
		}
		here, err := e.Service.InspectHere(ctx, acme)
		if err != nil || len(here.Limits) != 1 || here.Limits[0].Remaining != 1000-5 {
			t.Fatalf("InspectHere: %+v, %v; want 995 left as the lease sees it", here, err)
		}
		if c, r, s := counted.Checks(), counted.Reserves(), counted.Settles(); c != 0 || r != 1 || s != 0 {
			t.Fatalf("store calls: %d checks, %d reserves, %d settles; want the lease's take alone", c, r, s)
		}
		byID, err := e.Service.Reserve(ctx, "", acme)
		if err != nil || !byID.Reserved || counted.Reserves() != 2 {
			t.Fatalf("reserve to settle by id: %+v, %v, %d reserves; want it on the store", byID, err, counted.Reserves())
		}
		if st, err := e.Service.Settle(ctx, byID.ReservationID, 7); err != nil || st != tokenlimit.Settled {
			t.Fatalf("settle by id: %v, %v", st, err)
		}
		e.Service.Close()
		d, err = e.Service.Inspect(ctx, acme)
		if err != nil || d.Limits[0].Remaining != 1000-5-7 {
			t.Fatalf("after close: %+v, %v; want exactly the 12 used charged (988 left)", d, err)
		}
	})
}
