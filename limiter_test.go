package tokenlimit_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/memstore"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// countingStore is a memstore that counts Settle calls and can be told to
// fail them: a fake of our own Store interface around the real store.
type countingStore struct {
	*memstore.Store
	settles atomic.Int64
	failing atomic.Bool
}

var errStoreDown = errors.New("store down")

func (s *countingStore) Settle(ctx context.Context, now time.Time, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error) {
	s.settles.Add(1)
	if s.failing.Load() {
		return 0, errStoreDown
	}
	return s.Store.Settle(ctx, now, req)
}

func newTestLimiter(t *testing.T) (*tokenlimit.Limiter, *countingStore, *testkit.Clock) {
	t.Helper()
	ms, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := &countingStore{Store: ms}
	clock := testkit.NewClock(t0)
	lim, err := tokenlimit.NewLimiter(st, tokenlimit.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	return lim, st, clock
}

// remaining peeks key's budget under l.
func remaining(t *testing.T, lim *tokenlimit.Limiter, key string, l tokenlimit.Limit) int64 {
	t.Helper()
	r, err := lim.AllowN(context.Background(), key, l, 0)
	if err != nil {
		t.Fatal(err)
	}
	return r.Remaining
}

func TestNewLimiterRejectsNil(t *testing.T) {
	t.Parallel()
	if lim, err := tokenlimit.NewLimiter(nil); err == nil || lim != nil {
		t.Errorf("NewLimiter(nil) = %v, %v; want nil and an error", lim, err)
	}
	ms, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if lim, err := tokenlimit.NewLimiter(ms, tokenlimit.WithClock(nil)); err == nil || lim != nil {
		t.Errorf("NewLimiter(store, WithClock(nil)) = %v, %v; want nil and an error", lim, err)
	}
}

func TestLimiterUsesItsClock(t *testing.T) {
	t.Parallel()
	lim, _, clock := newTestLimiter(t)
	ctx := context.Background()
	l := tokenlimit.TokenBucketLimit(10, 2, time.Second)
	d, err := lim.Check(ctx, tokenlimit.Item{Key: "k", Limit: l, Cost: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !d.At.Equal(t0) || !d.Allowed || len(d.Results) != 1 {
		t.Fatalf("decision %+v, want allowed at %v with one result", d, t0)
	}
	clock.Advance(1500 * time.Millisecond) // 3 tokens back at 2/s
	r, err := lim.AllowN(ctx, "k", l, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Allowed || r.Remaining != 0 || r.ResetAfter != 5*time.Second {
		t.Errorf("after 1.5s: %+v, want allowed with 0 left and ResetAfter 5s", r)
	}
	r, err = lim.Allow(ctx, "k", l)
	if err != nil {
		t.Fatal(err)
	}
	if r.Allowed || r.RetryAfter != 500*time.Millisecond {
		t.Errorf("empty bucket: %+v, want denied with RetryAfter 500ms", r)
	}
}

func TestLimiterCheckWrapsInvalidInput(t *testing.T) {
	t.Parallel()
	lim, _, _ := newTestLimiter(t)
	_, err := lim.Check(context.Background(),
		tokenlimit.Item{Key: "a", Limit: tokenlimit.FixedWindowLimit(5, time.Second), Cost: 1},
		tokenlimit.Item{Key: "b", Limit: tokenlimit.FixedWindowLimit(0, time.Second), Cost: 1})
	if got := testkit.FieldOf(t, err); got != "items[1].quota" {
		t.Errorf("error names %q (%v), want items[1].quota", got, err)
	}
	// A single-item call names its own arguments, not items[0].
	for _, tt := range []struct {
		key   string
		limit tokenlimit.Limit
		cost  int64
		field string
	}{
		{"a", tokenlimit.FixedWindowLimit(5, time.Second), -1, "cost"},
		{"", tokenlimit.FixedWindowLimit(5, time.Second), 1, "key"},
		{"a", tokenlimit.FixedWindowLimit(0, time.Second), 1, "quota"},
	} {
		_, err := lim.AllowN(context.Background(), tt.key, tt.limit, tt.cost)
		if got := testkit.FieldOf(t, err); got != tt.field || !strings.HasPrefix(err.Error(), "tokenlimit: ") {
			t.Errorf("AllowN(%q, %s, %d): %v naming %q, want %q with the package prefix", tt.key, tt.limit, tt.cost, err, got, tt.field)
		}
	}
}

// TestCheckReportsTheDecisionTime: the time of a decision is its
// Decision's At (there is no separate DecideN); zero when the check fails.
func TestCheckReportsTheDecisionTime(t *testing.T) {
	t.Parallel()
	lim, _, clock := newTestLimiter(t)
	clock.Advance(1234 * time.Millisecond)
	d, err := lim.Check(context.Background(), tokenlimit.Item{Key: "k", Limit: tokenlimit.FixedWindowLimit(5, time.Second), Cost: 2})
	if err != nil || !d.Allowed || len(d.Results) != 1 || d.Results[0].Remaining != 3 || !d.At.Equal(t0.Add(1234*time.Millisecond)) {
		t.Errorf("Check = %+v, %v; want allowed with 3 left at t0+1.234s", d, err)
	}
	if d, err := lim.Check(context.Background(), tokenlimit.Item{Key: "", Limit: tokenlimit.FixedWindowLimit(5, time.Second), Cost: 2}); err == nil || !d.At.IsZero() {
		t.Errorf("Check with no key: at %v, %v; want the zero time and an error", d.At, err)
	}
}

func TestDecisionTightest(t *testing.T) {
	t.Parallel()
	ok := func(rem int64, reset time.Duration) tokenlimit.Result {
		return tokenlimit.Result{Allowed: true, Limit: 10, Remaining: rem, ResetAfter: reset}
	}
	deny := func(rem int64, retry time.Duration) tokenlimit.Result {
		return tokenlimit.Result{Limit: 10, Remaining: rem, RetryAfter: retry, ResetAfter: time.Minute}
	}
	never := tokenlimit.Result{Limit: 10, Remaining: 10, CostExceedsLimit: true}
	tests := []struct {
		name    string
		results []tokenlimit.Result
		want    int
	}{
		{"no results", nil, -1},
		{"one", []tokenlimit.Result{ok(5, time.Second)}, 0},
		{"allowed: least remaining", []tokenlimit.Result{ok(5, time.Second), ok(2, time.Second), ok(3, time.Hour)}, 1},
		{"allowed: tie broken by the longer reset", []tokenlimit.Result{ok(2, time.Second), ok(2, time.Hour), ok(2, time.Minute)}, 1},
		{"allowed: full tie keeps the first", []tokenlimit.Result{ok(2, time.Second), ok(2, time.Second)}, 0},
		{"a denial beats any allowed", []tokenlimit.Result{ok(0, time.Hour), deny(9, time.Millisecond)}, 1},
		{"denied: longest retry", []tokenlimit.Result{deny(0, time.Second), deny(5, time.Hour), deny(0, time.Minute)}, 1},
		{"denied: equal retry, least remaining", []tokenlimit.Result{deny(3, time.Second), deny(1, time.Second)}, 1},
		{"cost that can never fit beats a long retry", []tokenlimit.Result{deny(0, 24*time.Hour), never, ok(0, time.Hour)}, 1},
		{"allowed never beats a cost that can never fit", []tokenlimit.Result{never, ok(0, time.Hour)}, 0},
	}
	for _, tt := range tests {
		if got := (tokenlimit.Decision{Results: tt.results}).Tightest(); got != tt.want {
			t.Errorf("%s: Tightest() = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestReserveDeniedIsANonNilReservationThatSettlesToNothing(t *testing.T) {
	t.Parallel()
	lim, st, _ := newTestLimiter(t)
	ctx := context.Background()
	l := tokenlimit.FixedWindowLimit(5, time.Minute)
	res, err := lim.Reserve(ctx, tokenlimit.Item{Key: "k", Limit: l, Cost: 6})
	if err != nil || res == nil {
		t.Fatalf("Reserve(cost 6 of 5) = %v, %v; want a reservation", res, err)
	}
	if d := res.Decision(); res.OK() || d.Allowed || res.Status() != tokenlimit.Denied || !d.Results[0].CostExceedsLimit {
		t.Fatalf("Reserve(cost 6 of 5): OK %v, status %s, decision %+v; want denied, CostExceedsLimit", res.OK(), res.Status(), d)
	}
	for name, settle := range map[string]func() (tokenlimit.SettleStatus, error){
		"Settle": func() (tokenlimit.SettleStatus, error) { return res.Settle(ctx, 3) },
		"Cancel": func() (tokenlimit.SettleStatus, error) { return res.Cancel(ctx) },
	} {
		if got, err := settle(); err != nil || got != tokenlimit.UnknownReservation {
			t.Errorf("%s of a denied reservation = %s, %v; want unknown reservation", name, got, err)
		}
	}
	if got := remaining(t, lim, "k", l); got != 5 || st.settles.Load() != 0 {
		t.Errorf("remaining %d after a denied reservation and %d store settles, want 5 and none", got, st.settles.Load())
	}
}

func TestReserveFailedIsANonNilReservation(t *testing.T) {
	t.Parallel()
	lim, _, _ := newTestLimiter(t)
	res, err := lim.Reserve(context.Background(), tokenlimit.Item{Key: "", Limit: tokenlimit.FixedWindowLimit(5, time.Minute), Cost: 1})
	if !errors.Is(err, tokenlimit.ErrInvalid) || res == nil || res.OK() {
		t.Fatalf("Reserve with an empty key = %v, %v; want ErrInvalid and a reservation that is not OK", res, err)
	}
	if got, err := res.Settle(context.Background(), 1); err != nil || got != tokenlimit.UnknownReservation {
		t.Errorf("Settle of a failed reservation = %s, %v", got, err)
	}
}

func TestSettleTwiceIsAlreadySettled(t *testing.T) {
	t.Parallel()
	lim, _, clock := newTestLimiter(t)
	ctx := context.Background()
	l := tokenlimit.TokenBucketLimit(100, 1, time.Minute)
	res, err := lim.Reserve(ctx, tokenlimit.Item{Key: "k", Limit: l, Cost: 40})
	if err != nil || !res.OK() || res.Status() != tokenlimit.Reserved {
		t.Fatalf("reserve: %v, %v", res, err)
	}
	if d := res.Decision(); !d.At.Equal(clock.Now()) || !d.Allowed || len(res.Items()) != 1 || res.Items()[0].Cost != 40 || len(res.ID()) != 32 {
		t.Errorf("reservation %q at %v (allowed %v) with items %+v, want a 32-digit id, allowed at %v with the estimate 40",
			res.ID(), d.At, d.Allowed, res.Items(), clock.Now())
	}
	if got, err := res.Settle(ctx, 25); err != nil || got != tokenlimit.Settled {
		t.Fatal(got, err)
	}
	if got := remaining(t, lim, "k", l); got != 75 {
		t.Errorf("remaining %d after settling 40 at 25, want 75", got)
	}
	for name, again := range map[string]func() (tokenlimit.SettleStatus, error){
		"Settle": func() (tokenlimit.SettleStatus, error) { return res.Settle(ctx, 10) },
		"Cancel": func() (tokenlimit.SettleStatus, error) { return res.Cancel(ctx) },
		"Limiter.Settle": func() (tokenlimit.SettleStatus, error) {
			return lim.Settle(ctx, tokenlimit.SettleRequest{ID: res.ID(), Actual: 10})
		},
	} {
		if got, err := again(); err != nil || got != tokenlimit.AlreadySettled {
			t.Errorf("%s after Settle: %s, %v; want already settled", name, got, err)
		}
	}
	if got := remaining(t, lim, "k", l); got != 75 {
		t.Errorf("remaining %d, want 75", got)
	}
}

func TestSettleStoreFailureCanBeRetried(t *testing.T) {
	t.Parallel()
	lim, st, clock := newTestLimiter(t)
	ctx := context.Background()
	l := tokenlimit.TokenBucketLimit(100, 1, time.Minute)
	res, err := lim.Reserve(ctx, tokenlimit.Item{Key: "k", Limit: l, Cost: 60})
	if err != nil || !res.OK() {
		t.Fatal(err)
	}
	st.failing.Store(true)
	clock.Advance(time.Second)
	if _, err = res.Settle(ctx, 10); !errors.Is(err, errStoreDown) {
		t.Fatalf("Settle on a failing store: %v, want it to wrap %v", err, errStoreDown)
	}
	if got := remaining(t, lim, "k", l); got != 40 {
		t.Fatalf("remaining %d after a failed settlement, want 40 (unchanged)", got)
	}
	st.failing.Store(false)
	if got, err := res.Settle(ctx, 10); err != nil || got != tokenlimit.Settled {
		t.Fatalf("retried Settle: %s, %v", got, err)
	}
	if got := remaining(t, lim, "k", l); got != 90 {
		t.Errorf("remaining %d after settling 60 at 10, want 90", got)
	}
}

func TestSettleRejectsBadActual(t *testing.T) {
	t.Parallel()
	lim, _, _ := newTestLimiter(t)
	ctx := context.Background()
	res, err := lim.Reserve(ctx, tokenlimit.Item{Key: "k", Limit: tokenlimit.FixedWindowLimit(10, time.Minute), Cost: 5})
	if err != nil || !res.OK() {
		t.Fatal(err)
	}
	for _, actual := range []int64{-1, tokenlimit.MaxCost + 1} {
		if _, err := res.Settle(ctx, actual); testkit.FieldOf(t, err) != "actual" {
			t.Errorf("Settle(%d): %v, want an error naming actual", actual, err)
		}
	}
	if got, err := res.Settle(ctx, 1); err != nil || got != tokenlimit.Settled {
		t.Errorf("Settle(1) after rejected ones: %s, %v", got, err)
	}
}

func TestConcurrentSettleAppliesOnce(t *testing.T) {
	t.Parallel()
	lim, _, _ := newTestLimiter(t)
	ctx := context.Background()
	l := tokenlimit.FixedWindowLimit(1000, time.Hour)
	res, err := lim.Reserve(ctx, tokenlimit.Item{Key: "k", Limit: l, Cost: 100})
	if err != nil || !res.OK() {
		t.Fatal(err)
	}
	const goroutines = 8
	var (
		start   = make(chan struct{})
		wg      sync.WaitGroup
		settled atomic.Int64
		already atomic.Int64
	)
	for range goroutines {
		wg.Go(func() {
			<-start
			switch st, err := res.Settle(ctx, 30); {
			case err != nil:
				t.Error(err)
			case st == tokenlimit.Settled:
				settled.Add(1)
			case st == tokenlimit.AlreadySettled:
				already.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if settled.Load() != 1 || already.Load() != goroutines-1 {
		t.Errorf("%d settled, %d already; want 1 and %d", settled.Load(), already.Load(), goroutines-1)
	}
	if got := remaining(t, lim, "k", l); got != 970 {
		t.Errorf("remaining %d, want 970 (100 reserved, settled once at 30)", got)
	}
}

// checkOnly is a third party's store that keeps no reservations: only the
// methods of tokenlimit.Store are promoted from the memstore it wraps.
type checkOnly struct{ tokenlimit.Store }

// TestReserveOnAStoreWithoutReserverIsUnsupported: a store need not keep
// reservations; reserving or settling on one answers an error matching
// tokenlimit.ErrUnsupported (and errors.ErrUnsupported), charges nothing,
// and its checks work as before.
func TestReserveOnAStoreWithoutReserverIsUnsupported(t *testing.T) {
	t.Parallel()
	ms, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tokenlimit.Store(checkOnly{ms}).(tokenlimit.Reserver); ok {
		t.Fatal("checkOnly is a Reserver: the test would prove nothing")
	}
	clock := testkit.NewClock(t0)
	lim, err := tokenlimit.NewLimiter(checkOnly{ms}, tokenlimit.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := tokenlimit.FixedWindowLimit(5, time.Minute)
	res, err := lim.Reserve(ctx, tokenlimit.Item{Key: "k", Limit: l, Cost: 2})
	if !errors.Is(err, tokenlimit.ErrUnsupported) || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Reserve: %v, want an error matching ErrUnsupported", err)
	}
	if err == nil || !strings.Contains(err.Error(), "not a tokenlimit.Reserver") {
		t.Errorf("Reserve: %v, want it to say the store is not a Reserver", err)
	}
	if res == nil || res.OK() || res.Status() != 0 {
		t.Errorf("Reserve: %+v, want a non-nil reservation that holds nothing", res)
	}
	if _, err := lim.Settle(ctx, tokenlimit.SettleRequest{ID: "some-id", Actual: 1}); !errors.Is(err, tokenlimit.ErrUnsupported) {
		t.Errorf("Settle: %v, want an error matching ErrUnsupported", err)
	}
	if got := remaining(t, lim, "k", l); got != 5 {
		t.Errorf("%d left after an unsupported reserve, want 5: nothing charged", got)
	}
	if r, err := lim.AllowN(ctx, "k", l, 2); err != nil || !r.Allowed || r.Remaining != 3 {
		t.Errorf("AllowN = %+v, %v; want allowed with 3 left", r, err)
	}
}
