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

// threeStores is a Stores over three Failovers, each on a memstore that
// fails on demand: main, "home" and "far", at one clock.
type threeStores struct {
	stores          *resilient.Stores
	main, home, far *testkit.FaultStore
	clock           *testkit.Clock
}

func newThreeStores(t *testing.T) *threeStores {
	t.Helper()
	ts := &threeStores{clock: testkit.NewClock(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))}
	for _, st := range []**testkit.FaultStore{&ts.main, &ts.home, &ts.far} {
		*st = &testkit.FaultStore{Store: testkit.MemStore(t), Info: testkit.Remote}
	}
	ts.stores = ts.replica(t)
	return ts
}

// replica is another replica's Stores over ts's three stores: fault
// layers of its own, at ts's clock.
func (ts *threeStores) replica(t *testing.T) *resilient.Stores {
	t.Helper()
	layer := func(name string, st *testkit.FaultStore) resilient.NamedLayer {
		f, err := resilient.NewFailover(st, resilient.FailoverOptions{
			Options: resilient.Options{BreakerThreshold: 1, BreakerCooldown: time.Second, Clock: ts.clock.Now},
			Logger:  testkit.Quiet(),
		})
		if err != nil {
			t.Fatal(err)
		}
		return resilient.NamedLayer{Name: name, Layer: f}
	}
	stores, err := resilient.NewStores(layer("default", ts.main), layer("home", ts.home), layer("far", ts.far))
	if err != nil {
		t.Fatal(err)
	}
	return stores
}

// settles are the Settle calls each store has had so far: main's, home's
// and far's.
func (ts *threeStores) settles() [3]int64 {
	return [3]int64{ts.main.Settles(), ts.home.Settles(), ts.far.Settles()}
}

// left peeks at key's budget under l in st (the store itself, past its
// fault layer).
func (ts *threeStores) left(t *testing.T, st tokenlimit.Store, key string, l tokenlimit.Limit) int64 {
	t.Helper()
	res := make([]tokenlimit.Result, 1)
	if _, err := st.Check(context.Background(), ts.clock.Now(), []tokenlimit.Item{{Key: key, Limit: l}}, res); err != nil {
		t.Fatal(err)
	}
	return res[0].Remaining
}

func (ts *threeStores) decide(t *testing.T, items []tokenlimit.Item, policies []resilient.Policy) (resilient.Answer, []tokenlimit.Result) {
	t.Helper()
	results := make([]tokenlimit.Result, len(items))
	a, err := ts.stores.Decide(context.Background(), items, policies, results)
	if err != nil {
		t.Fatal(err)
	}
	return a, results
}

// TestStoresRefundWhatTheOthersAdmitted: a call spanning three stores is
// refused by the last; the first store's charge is refunded on the store,
// the second's (decided on its local budget while it fails) on the local
// budget, and nothing of it is written back once that store answers again.
func TestStoresRefundWhatTheOthersAdmitted(t *testing.T) {
	ts := newThreeStores(t)
	ts.home.Set(testkit.Down)
	items := []tokenlimit.Item{
		{Key: "far", Limit: perMinute10, Cost: 4},  // in far, listed first: decided last
		{Key: "main", Limit: perMinute10, Cost: 3}, // in the main store
		{Key: "home", Limit: perMinute10, Cost: 2}, // in home, which fails: its local budget
	}
	policies := []resilient.Policy{{Store: "far", Limit: "far"}, {Limit: "main"}, {Store: "home", Open: true, Share: 1, Limit: "home"}}

	// far has 3 left: it refuses the cost of 4.
	if a, _ := ts.decide(t, []tokenlimit.Item{{Key: "far", Limit: perMinute10, Cost: 7}}, policies[:1]); !a.Allowed {
		t.Fatalf("charging far: %+v", a)
	}
	// Admitted by all three first (far has room for 1): home's item alone
	// is marked as decided locally.
	if a, _ := ts.decide(t, []tokenlimit.Item{{Key: "main", Limit: perMinute10}, {Key: "home", Limit: perMinute10}, {Key: "far", Limit: perMinute10}},
		[]resilient.Policy{policies[1], policies[2], policies[0]}); !a.Allowed || a.Source != resilient.FromLocal || len(a.Local) != 1 || a.Local[0] != 1 {
		t.Fatalf("admitted by all, home failing: %+v; want FromLocal with Local [1]", a)
	}
	a, res := ts.decide(t, items, policies)
	if a.Allowed || a.Source != resilient.FromStore || len(a.Items) != 1 || a.Items[0] != 0 || res[0].Allowed || res[0].Remaining != 3 {
		t.Fatalf("refused by far: %+v %+v; want far's denial, item 0 answered", a, res)
	}
	if got := ts.left(t, ts.main, "main", perMinute10); got != 10 {
		t.Errorf("main after the refusal: %d left, want 10 (refunded)", got)
	}
	// home's local budget was charged and refunded: it still admits its
	// whole share, and nothing is written back to home once it answers.
	for i := range 4 {
		a, res := ts.decide(t, items[2:], policies[2:])
		if want := int64(10 - 2*(i+1)); !a.Allowed || a.Source != resilient.FromLocal || res[0].Remaining != want {
			t.Fatalf("home's local budget, call %d: %+v %+v; want admitted locally, %d left (whole after the refund)", i, a, res[0], want)
		}
	}
	ts.home.Set(testkit.Healthy)
	ts.clock.Advance(time.Second) // the breaker's cooldown
	if a, _ := ts.decide(t, []tokenlimit.Item{{Key: "home", Limit: perMinute10}}, policies[2:]); a.Source != resilient.FromStore {
		t.Fatalf("home back: %+v", a)
	}
	if got := ts.left(t, ts.home, "home", perMinute10); got != 2 {
		t.Errorf("home after the write-back: %d left, want 2 (the 8 admitted locally, not the refunded 2)", got)
	}
}

// TestStoresOneStoreCallsOnlyIt: a call whose items all live in one store
// goes to that store alone.
func TestStoresOneStoreCallsOnlyIt(t *testing.T) {
	ts := newThreeStores(t)
	items := []tokenlimit.Item{{Key: "a", Limit: perMinute10, Cost: 1}, {Key: "b", Limit: perMinute10, Cost: 1}}
	a, _ := ts.decide(t, items, []resilient.Policy{{Store: "home"}, {Store: "home"}})
	if !a.Allowed || ts.home.Checks() != 1 || ts.main.Checks() != 0 || ts.far.Checks() != 0 {
		t.Errorf("answer %+v; checks main %d, home %d, far %d; want one call on home", a, ts.main.Checks(), ts.home.Checks(), ts.far.Checks())
	}
	results := make([]tokenlimit.Result, 1)
	if _, err := ts.stores.Decide(context.Background(), items[:1], []resilient.Policy{{Store: "nowhere"}}, results); err == nil {
		t.Error("a store no layer has: nil error")
	}
}

// TestStoresReservationUndone: a reservation spanning stores that the
// second refuses is undone in the first, so that its id reserves afresh;
// a settlement reaches the stores holding it.
func TestStoresReservationUndone(t *testing.T) {
	ts := newThreeStores(t)
	ctx := context.Background()
	policies := []resilient.Policy{{}, {Store: "home"}}
	req := tokenlimit.ReserveRequest{ID: "r", TTL: time.Hour, Items: []tokenlimit.Item{{Key: "m", Limit: perMinute10, Cost: 3}, {Key: "h", Limit: perMinute10, Cost: 5}}}
	if a, _ := ts.decide(t, []tokenlimit.Item{{Key: "h", Limit: perMinute10, Cost: 6}}, policies[1:]); !a.Allowed {
		t.Fatal("charging home")
	}
	res, a, err := ts.stores.DecideReservation(ctx, req, policies, make([]tokenlimit.Result, 2))
	if err != nil || a.Allowed || (res != nil && res.OK()) {
		t.Fatalf("home has 4 of 5: %v %+v %v, want refused", res, a, err)
	}
	if got := ts.left(t, ts.main, "m", perMinute10); got != 10 {
		t.Fatalf("main after the refusal: %d left, want 10", got)
	}
	ts.clock.Advance(time.Minute) // the next window
	res, a, err = ts.stores.DecideReservation(ctx, req, policies, make([]tokenlimit.Result, 2))
	if err != nil || !a.Allowed || res.Status() != tokenlimit.Reserved {
		t.Fatalf("the next window: %v %+v %v, want reserved afresh", res, a, err)
	}
	st, err := ts.stores.Settle(ctx, time.Time{}, tokenlimit.SettleRequest{ID: "r", Actual: 1, TTL: time.Hour})
	if err != nil || st != tokenlimit.Settled {
		t.Fatalf("Settle: %v %v", st, err)
	}
	if m, h := ts.left(t, ts.main, "m", perMinute10), ts.left(t, ts.home, "h", perMinute10); m != 9 || h != 9 {
		t.Errorf("after settling to 1: main %d, home %d left; want 9 and 9", m, h)
	}
	// Settled, it is forgotten: a retry goes to every store (a tombstone
	// in far, which never held it), and the status is the others'.
	if st, err := ts.stores.Settle(ctx, time.Time{}, tokenlimit.SettleRequest{ID: "r", Actual: 1, TTL: time.Hour}); err != nil || st != tokenlimit.AlreadySettled {
		t.Errorf("second Settle: %v %v, want already settled", st, err)
	}
}

// TestStoresSettleGoesWhereTheReservationIs: a settle by id on the replica
// that reserved calls only the stores the reservation used (main alone,
// or main and home), through its handle too; from another replica, which
// does not know where it is, it goes to every store and still settles
// once, and a settle back on the first replica then changes nothing.
func TestStoresSettleGoesWhereTheReservationIs(t *testing.T) {
	ts := newThreeStores(t)
	other := ts.replica(t)
	ctx := context.Background()
	mainOnly, spanning := []resilient.Policy{{}}, []resilient.Policy{{}, {Store: "home"}}
	items := func(cost int64) []tokenlimit.Item {
		return []tokenlimit.Item{{Key: "m", Limit: perMinute10, Cost: cost}, {Key: "h", Limit: perMinute10, Cost: cost}}
	}
	reserve := func(id string, policies []resilient.Policy) {
		t.Helper()
		req := tokenlimit.ReserveRequest{ID: id, TTL: time.Hour, Items: items(3)[:len(policies)]}
		res, a, err := ts.stores.DecideReservation(ctx, req, policies, make([]tokenlimit.Result, len(policies)))
		if err != nil || !a.Allowed || res.Status() != tokenlimit.Reserved {
			t.Fatalf("reserve %s: %v %+v %v", id, res, a, err)
		}
	}
	settle := func(on *resilient.Stores, id string, want tokenlimit.SettleStatus, calls [3]int64) {
		t.Helper()
		before := ts.settles()
		st, err := on.Settle(ctx, time.Time{}, tokenlimit.SettleRequest{ID: id, Actual: 1, TTL: time.Hour})
		after := ts.settles()
		if got := [3]int64{after[0] - before[0], after[1] - before[1], after[2] - before[2]}; err != nil || st != want || got != calls {
			t.Fatalf("settle %s: %v %v, settle calls (main, home, far) %v; want %v, %v", id, st, err, got, want, calls)
		}
	}
	wantLeft := func(m, h int64) {
		t.Helper()
		if gm, gh := ts.left(t, ts.main, "m", perMinute10), ts.left(t, ts.home, "h", perMinute10); gm != m || gh != h {
			t.Fatalf("main has %d left, home %d; want %d and %d", gm, gh, m, h)
		}
	}

	reserve("main-only", mainOnly)
	settle(ts.stores, "main-only", tokenlimit.Settled, [3]int64{1, 0, 0})
	wantLeft(9, 10)

	reserve("spanning", spanning)
	settle(ts.stores, "spanning", tokenlimit.Settled, [3]int64{1, 1, 0})
	wantLeft(8, 9)

	// Settled on another replica: every store, once.
	reserve("elsewhere", spanning)
	wantLeft(5, 6)
	settle(other, "elsewhere", tokenlimit.Settled, [3]int64{1, 1, 1})
	wantLeft(7, 8)
	settle(ts.stores, "elsewhere", tokenlimit.AlreadySettled, [3]int64{1, 1, 0})
	wantLeft(7, 8)

	// Through its handle: the stores holding it, though nothing was
	// remembered by id.
	req := tokenlimit.ReserveRequest{ID: "held", TTL: time.Hour, Items: items(3)}
	h, a, err := ts.stores.ReserveHeld(ctx, req, spanning, make([]tokenlimit.Result, 2))
	if err != nil || !a.Allowed || !h.OK() {
		t.Fatalf("reserve held: %v %+v %v", h, a, err)
	}
	before := ts.settles()
	if st, err := ts.stores.SettleHeld(ctx, h, tokenlimit.SettleRequest{ID: "held", Actual: 1, TTL: time.Hour}); err != nil || st != tokenlimit.Settled {
		t.Fatalf("settle held: %v %v", st, err)
	}
	if after := ts.settles(); after != [3]int64{before[0] + 1, before[1] + 1, before[2]} {
		t.Fatalf("settle held: settle calls %v after %v; want one more on main and home", after, before)
	}
	wantLeft(6, 7)
}

// TestStoresSettleNeedsOnlyItsStores: while far fails, a reservation of
// main's limits is settled on the replica that made it (far is not
// asked); from another replica, which must ask every store, the settle
// fails until far answers (main applied it meanwhile), and applies once.
func TestStoresSettleNeedsOnlyItsStores(t *testing.T) {
	ts := newThreeStores(t)
	other := ts.replica(t)
	ctx := context.Background()
	for _, id := range []string{"here", "there"} {
		req := tokenlimit.ReserveRequest{ID: id, TTL: time.Hour, Items: []tokenlimit.Item{{Key: "m", Limit: perMinute10, Cost: 3}}}
		if res, a, err := ts.stores.DecideReservation(ctx, req, []resilient.Policy{{}}, make([]tokenlimit.Result, 1)); err != nil || !a.Allowed || !res.OK() {
			t.Fatalf("reserve %s: %v %+v %v", id, res, a, err)
		}
	}
	ts.far.Set(testkit.Down)
	if st, err := ts.stores.Settle(ctx, time.Time{}, tokenlimit.SettleRequest{ID: "here", Actual: 1, TTL: time.Hour}); err != nil || st != tokenlimit.Settled {
		t.Fatalf("settle on the reserving replica, far down: %v %v; want settled", st, err)
	}
	if st, err := other.Settle(ctx, time.Time{}, tokenlimit.SettleRequest{ID: "there", Actual: 1, TTL: time.Hour}); !errors.Is(err, resilient.ErrUnavailable) {
		t.Fatalf("settle on another replica, far down: %v %v; want ErrUnavailable", st, err)
	}
	ts.far.Set(testkit.Healthy)
	ts.clock.Advance(time.Second) // far's breaker's cooldown
	if st, err := other.Settle(ctx, time.Time{}, tokenlimit.SettleRequest{ID: "there", Actual: 1, TTL: time.Hour}); err != nil || st != tokenlimit.AlreadySettled {
		t.Fatalf("settle on another replica, far back: %v %v; want already settled (by the call that failed on far)", st, err)
	}
	if got := ts.left(t, ts.main, "m", perMinute10); got != 8 {
		t.Errorf("main: %d left, want 8 (both settled to 1, once)", got)
	}
}
