// Package storetest is the conformance suite that every tokenlimit.Store
// must pass: the behaviour of every algorithm, as tables of steps at fixed
// times, plus all-or-nothing checks, reservations, bad input and
// concurrency. The in-memory and the Redis store both run it, so a behaviour
// that differs between them fails here.
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
	t.Run("reset", func(t *testing.T) { runReset(t, open) })
	t.Run("log-entries", func(t *testing.T) { runLogEntries(t, open) })
}

// Case is one behaviour: steps applied in order to a fresh key space.
type Case struct {
	Name  string
	Limit tokenlimit.Limit // the limit of steps that name none
	Steps []Step
}

// Step is one operation at Base+At: a check of one or more probes (the
// default), a reservation (Reserve names it) or a settlement (Settle names
// the reservation, Actual is the real cost).
type Step struct {
	At      time.Duration
	Probes  []Probe
	Reserve string
	Settle  string
	Actual  int64
	// Reset, if true, resets the case's limit's budget of key "k" (Store.Reset).
	Reset bool
	// WantErr, for a settlement, is the error it must match.
	WantErr error
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
	t            *testing.T
	env          Env
	c            Case
	now          time.Time
	store        tokenlimit.Store
	limiter      *tokenlimit.Limiter
	reservations map[string]*tokenlimit.Reservation
}

func runCase(t *testing.T, env Env, c Case) {
	r := &runner{t: t, env: env, c: c, store: env.Replica(), reservations: map[string]*tokenlimit.Reservation{}}
	lim, err := tokenlimit.NewLimiter(r.store, tokenlimit.WithClock(func() time.Time { return r.now }))
	if err != nil {
		t.Fatal(err)
	}
	r.limiter = lim
	for i, s := range c.Steps {
		r.now = Base.Add(s.At)
		r.step(i, s)
		if env.CheckKeys != nil {
			env.CheckKeys(t)
		}
	}
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
	if s.Settle != "" {
		res := r.reservations[s.Settle]
		if res == nil {
			t.Fatalf("%s: no reservation %q (a bug in the case)", where, s.Settle)
		}
		if err := res.Settle(ctx, s.Actual); !errors.Is(err, s.WantErr) {
			t.Fatalf("%s: settle %q at %d: error %v, want %v", where, s.Settle, s.Actual, err, s.WantErr)
		}
		return
	}
	items := r.items(s.Probes)
	var d tokenlimit.Decision
	var err error
	if s.Reserve != "" {
		var res *tokenlimit.Reservation
		d, res, err = r.limiter.Reserve(ctx, items...)
		if res != nil {
			r.reservations[s.Reserve] = res
		}
	} else {
		d, err = r.limiter.Check(ctx, items...)
	}
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	r.compare(where, items, s.Probes, d)
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

func (r *runner) compare(where string, items []tokenlimit.Item, probes []Probe, d tokenlimit.Decision) {
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
	if !d.At.Equal(r.now) {
		t.Errorf("%s: decided at %s, want the caller's time %s", where, d.At, r.now)
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
