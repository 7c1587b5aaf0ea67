// Package storetest is the conformance suite that every tokenlimit.Store
// must pass: the behaviour of every algorithm, as tables of steps at fixed
// times, plus all-or-nothing checks, reservations, bad input and
// concurrency. The in-memory and the Redis store both run it, so a behaviour
// that differs between them fails here. On a store that is not a
// tokenlimit.Reserver, each reservation case checks that its first
// reservation step answers an error matching tokenlimit.ErrUnsupported and
// ends there.
//
// Usage, in a store's tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storetest.Env {
//			return storetest.Env{Replica: func() tokenlimit.Store { return newStore(t) }}
//		})
//	}
package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// Env is one test's view of a store under test.
type Env struct {
	// Replica opens a client onto the test's own, initially empty key space:
	// each call returns an independent client ("a gateway replica"), all
	// seeing the same budgets and deciding at the time they are passed.
	Replica func() tokenlimit.Store
	// CheckKeys, if set, runs after every step to assert invariants of the
	// stored keys, such as "every key has a TTL".
	CheckKeys func(t *testing.T)
	// FlushScripts, if set, makes the store lose its cached scripts (Redis:
	// SCRIPT FLUSH) so that the suite can check the store recovers.
	FlushScripts func(t *testing.T)
}

// Open returns a fresh Env for one (sub)test; it must register its own
// cleanup with t.Cleanup.
type Open func(t *testing.T) Env

// Base is the instant every case's step times are offsets from. It is
// aligned to every window the cases use (whole days).
var Base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Run runs the whole suite against the store that open provides.
func Run(t *testing.T, open Open) {
	t.Run("cases", func(t *testing.T) { runCases(t, open) })
	t.Run("invalid", func(t *testing.T) { runInvalid(t, open) })
	t.Run("concurrency", func(t *testing.T) { runConcurrency(t, open) })
	t.Run("script-cache", func(t *testing.T) { runScriptFlush(t, open) })
	t.Run("script-cache-under-load", func(t *testing.T) { runScriptFlushUnderLoad(t, open) })
	t.Run("reset", func(t *testing.T) { runReset(t, open) })
	t.Run("log-entries", func(t *testing.T) { runLogEntries(t, open) })
	t.Run("notes", func(t *testing.T) { runNotes(t, open) })
}

// Case is one behaviour: steps applied in order to a fresh key space.
type Case struct {
	Name  string
	Limit tokenlimit.Limit // the limit of steps that name none
	// TTL is the reservations' (and tombstones') TTL; zero means an hour.
	TTL   time.Duration
	Steps []Step
}

// Step is one operation at Base+At: a check of one or more probes (the
// default), a reservation (Reserve is its id) or a settlement (Settle is
// the id, Actual the real cost, or Cancel).
type Step struct {
	At      time.Duration
	Probes  []Probe
	Reserve string
	Rules   []tokenlimit.SettleRule // of a reservation; none means SettleActual
	Settle  string
	Actual  int64
	// Spend and Measures are the settlement's other measures, for items
	// under SettleSpend and MeasureRule(k).
	Spend    *int64
	Measures []int64
	Cancel   bool
	// Undo undoes the reservation (SettleRequest.Undo).
	Undo bool
	// Reset, if true, resets the case's limit's budget of key "k" (Store.Reset).
	Reset bool
	// Other runs the step on a second replica (another client of the same
	// key space), as a gateway behind a load balancer would.
	Other bool
	// WantReserve is the status a reservation must get; zero means
	// Reserved when every probe wants allowed, else Denied.
	WantReserve tokenlimit.ReserveStatus
	// WantSettle is the status a settlement must get; zero means Settled.
	WantSettle tokenlimit.SettleStatus
}

// Probe is one item of a check and the result it must get.
type Probe struct {
	Key   string           // "k" if empty
	Limit tokenlimit.Limit // the case's limit if zero
	Cost  int64
	Want  tokenlimit.Result // Limit is filled in from the limit's capacity
}

// runner applies a case's steps through a Limiter with a fake clock.
type runner struct {
	t       *testing.T
	env     Env
	c       Case
	now     time.Time
	store   tokenlimit.Store
	limiter *tokenlimit.Limiter
	other   *tokenlimit.Limiter // on a second replica, opened when a step needs it
	// reservedAt is when each reservation id was first charged: a replay
	// answers with that time.
	reservedAt map[string]time.Time
	// stopped is set at a case's first reservation step on a store that
	// keeps none: the steps after it assume the reservation.
	stopped bool
}

func runCase(t *testing.T, env Env, c Case) {
	if c.TTL == 0 {
		c.TTL = time.Hour
	}
	r := &runner{t: t, env: env, c: c, store: env.Replica(), reservedAt: map[string]time.Time{}}
	r.limiter = r.newLimiter(r.store)
	for i, s := range c.Steps {
		if r.stopped {
			return
		}
		r.now = Base.Add(s.At)
		r.step(i, s)
		if env.CheckKeys != nil {
			env.CheckKeys(t)
		}
	}
}

func (r *runner) newLimiter(st tokenlimit.Store) *tokenlimit.Limiter {
	lim, err := tokenlimit.NewLimiter(st, tokenlimit.WithClock(func() time.Time { return r.now }), tokenlimit.WithReservationTTL(r.c.TTL))
	if err != nil {
		r.t.Fatal(err)
	}
	return lim
}

// on returns the limiter a step runs on.
func (r *runner) on(s Step) *tokenlimit.Limiter {
	if !s.Other {
		return r.limiter
	}
	if r.other == nil {
		r.other = r.newLimiter(r.env.Replica())
	}
	return r.other
}

func (r *runner) step(i int, s Step) {
	t := r.t
	t.Helper()
	ctx := context.Background()
	where := fmt.Sprintf("step %d at +%s", i, s.At)
	if s.Reset {
		if err := r.store.Reset(ctx, "k", r.c.Limit.Algorithm); err != nil {
			t.Fatalf("%s: reset: %v", where, err)
		}
		return
	}
	items := r.items(s.Probes)
	if _, ok := r.store.(tokenlimit.Reserver); !ok && (s.Settle != "" || s.Reserve != "") {
		r.unsupported(where, s, items)
		return
	}
	if s.Settle != "" {
		r.settle(where, s)
		return
	}
	if s.Reserve != "" {
		r.reserve(where, s, items)
		return
	}
	d, err := r.on(s).Check(ctx, items...)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	r.compare(where, items, s.Probes, d, r.now)
}

func (r *runner) reserve(where string, s Step, items []tokenlimit.Item) {
	t := r.t
	t.Helper()
	res, err := r.on(s).ReserveWith(context.Background(), tokenlimit.ReserveRequest{ID: s.Reserve, Items: items, Rules: s.Rules})
	if err != nil {
		t.Fatalf("%s: reserve %q: %v", where, s.Reserve, err)
	}
	want := s.WantReserve
	if want == 0 {
		want = tokenlimit.Denied
		if allWant(s.Probes) {
			want = tokenlimit.Reserved
		}
	}
	if res.Status() != want {
		t.Errorf("%s: reserve %q: status %s, want %s", where, s.Reserve, res.Status(), want)
	}
	if res.OK() != want.Admitted() {
		t.Errorf("%s: reserve %q: OK() = %v with status %s", where, s.Reserve, res.OK(), res.Status())
	}
	wantAt := r.now
	switch res.Status() {
	case tokenlimit.Reserved:
		r.reservedAt[s.Reserve] = r.now
	case tokenlimit.Replayed:
		wantAt = r.reservedAt[s.Reserve]
	case tokenlimit.Conflict, tokenlimit.Closed:
		return // nothing decided: the time is the record's
	}
	r.compare(where, items, s.Probes, res.Decision(), wantAt)
}

// unsupported checks that a store that is not a tokenlimit.Reserver answers
// a reservation step with an error matching tokenlimit.ErrUnsupported, and
// stops the case.
func (r *runner) unsupported(where string, s Step, items []tokenlimit.Item) {
	t := r.t
	t.Helper()
	r.stopped = true
	var err error
	if s.Reserve != "" {
		var res *tokenlimit.Reservation
		res, err = r.on(s).Reserve(context.Background(), items...)
		if res == nil || res.OK() {
			t.Errorf("%s: reserve on a store that is not a Reserver: %+v, want a reservation that is not OK", where, res)
		}
	} else {
		_, err = r.on(s).Settle(context.Background(), tokenlimit.SettleRequest{ID: s.Settle, Actual: s.Actual})
	}
	if !errors.Is(err, tokenlimit.ErrUnsupported) {
		t.Errorf("%s: reservation step on a store that is not a Reserver: %v, want an error matching ErrUnsupported", where, err)
	}
}

func (r *runner) settle(where string, s Step) {
	t := r.t
	t.Helper()
	want := s.WantSettle
	if want == 0 {
		want = tokenlimit.Settled
	}
	lim := r.on(s)
	var st tokenlimit.SettleStatus
	var err error
	switch {
	case s.Undo:
		st, err = lim.Settle(context.Background(), tokenlimit.SettleRequest{ID: s.Settle, Undo: true})
	case s.Cancel:
		st, err = lim.Settle(context.Background(), tokenlimit.SettleRequest{ID: s.Settle, Cancel: true})
	default:
		st, err = lim.Settle(context.Background(), tokenlimit.SettleRequest{ID: s.Settle, Actual: s.Actual, Spend: s.Spend, Measures: s.Measures})
	}
	if err != nil || st != want {
		t.Fatalf("%s: settle %q at %d (cancel %v, undo %v): %v, %v; want %v", where, s.Settle, s.Actual, s.Cancel, s.Undo, st, err, want)
	}
}

func allWant(probes []Probe) bool {
	for _, p := range probes {
		if !p.Want.Allowed {
			return false
		}
	}
	return true
}

func (r *runner) items(probes []Probe) []tokenlimit.Item {
	items := make([]tokenlimit.Item, len(probes))
	for i, p := range probes {
		items[i] = tokenlimit.Item{Key: p.Key, Limit: p.Limit, Cost: p.Cost}
		if items[i].Key == "" {
			items[i].Key = "k"
		}
		if items[i].Limit == (tokenlimit.Limit{}) {
			items[i].Limit = r.c.Limit
		}
	}
	return items
}

func (r *runner) compare(where string, items []tokenlimit.Item, probes []Probe, d tokenlimit.Decision, wantAt time.Time) {
	t := r.t
	t.Helper()
	wantAll := true
	for i, p := range probes {
		want := p.Want
		want.Limit = items[i].Limit.Capacity()
		wantAll = wantAll && want.Allowed
		if got := d.Results[i]; got != want {
			t.Errorf("%s: item %d (%s, key %q, cost %d):\n got %s\nwant %s", where, i, items[i].Limit, items[i].Key, items[i].Cost, show(got), show(want))
		}
	}
	if d.Allowed != wantAll {
		t.Errorf("%s: decision allowed=%v, want %v", where, d.Allowed, wantAll)
	}
	if !d.At.Equal(wantAt) {
		t.Errorf("%s: decided at %s, want %s", where, d.At, wantAt)
	}
}

func show(r tokenlimit.Result) string {
	return fmt.Sprintf("allowed=%v remaining=%d retry=%s reset=%s too-large=%v limit=%d",
		r.Allowed, r.Remaining, r.RetryAfter, r.ResetAfter, r.CostExceedsLimit, r.Limit)
}

func runCases(t *testing.T, open Open) {
	for _, c := range Cases() {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			runCase(t, open(t), c)
		})
	}
}

// Result constructors for the tables.

// Ok is an allowed result.
func Ok(remaining int64, reset time.Duration) tokenlimit.Result {
	return tokenlimit.Result{Allowed: true, Remaining: remaining, ResetAfter: reset}
}

// Deny is a denied result.
func Deny(remaining int64, retry, reset time.Duration) tokenlimit.Result {
	return tokenlimit.Result{Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// TooLarge is the result for a cost above the limit's capacity.
func TooLarge(remaining int64, reset time.Duration) tokenlimit.Result {
	return tokenlimit.Result{Remaining: remaining, ResetAfter: reset, CostExceedsLimit: true}
}

// at is a single-probe check step.
func at(d time.Duration, cost int64, want tokenlimit.Result) Step {
	return Step{At: d, Probes: []Probe{{Cost: cost, Want: want}}}
}

// atKey is a single-probe check step on another key.
func atKey(d time.Duration, key string, cost int64, want tokenlimit.Result) Step {
	return Step{At: d, Probes: []Probe{{Key: key, Cost: cost, Want: want}}}
}

// reserve is a single-probe reservation step.
func reserve(d time.Duration, name string, cost int64, want tokenlimit.Result) Step {
	return Step{At: d, Reserve: name, Probes: []Probe{{Cost: cost, Want: want}}}
}

// settle is a settlement step.
func settle(d time.Duration, name string, actual int64) Step {
	return Step{At: d, Settle: name, Actual: actual}
}

const (
	ms = time.Millisecond
	s  = time.Second
	us = time.Microsecond
)
