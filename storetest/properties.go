package storetest

// This file holds the properties that are not step tables (cases.go):
// exact admission under concurrency, the sliding counter's bound, refusal
// of invalid input and times, recovery from a script flush, Reset, and the
// entries of a sliding log.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/storekit"
)

// exactLimits are the limits the concurrency proof runs: each admits exactly
// 100 at one instant.
func exactLimits() []tokenlimit.Limit {
	return []tokenlimit.Limit{
		tokenlimit.FixedWindowLimit(100, time.Minute),
		tokenlimit.SlidingLogLimit(100, time.Minute),
		tokenlimit.SlidingCounterLimit(100, time.Minute),
		tokenlimit.TokenBucketLimit(100, 1, time.Minute),
		tokenlimit.GCRALimit(99, 1, time.Minute),
	}
}

// runConcurrency: two replicas × 64 goroutines hammer one key at one
// instant; exactly the capacity is admitted, and weighted costs never
// overshoot it.
func runConcurrency(t *testing.T, open Open) {
	t.Run("sliding_counter bound across windows", func(t *testing.T) {
		t.Parallel()
		runSlidingCounterBound(t, open)
	})
	for _, l := range exactLimits() {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			env := open(t)
			replicas := []tokenlimit.Store{env.Replica(), env.Replica()}
			admitted := hammer(t, replicas, l, "one", Base, func(int) int64 { return 1 })
			if admitted != l.Capacity() {
				t.Errorf("admitted %d, want exactly %d", admitted, l.Capacity())
			}
			weighted := hammer(t, replicas, l, "weighted", Base, func(i int) int64 { return int64(1 + i%3) })
			if left := peek(t, replicas[0], l, "weighted").Remaining; weighted > l.Capacity() || left != l.Capacity()-weighted {
				t.Errorf("weighted: admitted %d with %d left, want at most %d in all", weighted, left, l.Capacity())
			}
		})
	}
}

// hammer runs 64 goroutines per replica, 3 attempts each, at time now, and
// returns the total cost admitted.
func hammer(t *testing.T, replicas []tokenlimit.Store, l tokenlimit.Limit, key string, now time.Time, cost func(int) int64) int64 {
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for _, st := range replicas {
		for g := range 64 {
			wg.Go(func() {
				for a := range 3 {
					c := cost(g + a)
					items := []tokenlimit.Item{{Key: key, Limit: l, Cost: c}}
					results := make([]tokenlimit.Result, 1)
					if _, err := st.Check(context.Background(), now, items, results); err != nil {
						t.Error(err)
						return
					}
					if results[0].Allowed {
						admitted.Add(c)
					}
				}
			})
		}
	}
	wg.Wait()
	return admitted.Load()
}

func peek(t *testing.T, st tokenlimit.Store, l tokenlimit.Limit, key string) tokenlimit.Result {
	t.Helper()
	results := make([]tokenlimit.Result, 1)
	if _, err := st.Check(context.Background(), Base, []tokenlimit.Item{{Key: key, Limit: l}}, results); err != nil {
		t.Fatal(err)
	}
	return results[0]
}

// runSlidingCounterBound is part of the concurrency proof: the sliding
// counter's worst case (docs/algorithms.md) is traffic bunched at the end of
// two consecutive windows, one window apart; across it at most
// 2Q - ceil(Q × 1ms / P) is admitted, and exactly that many here.
func runSlidingCounterBound(t *testing.T, open Open) {
	env := open(t)
	replicas := []tokenlimit.Store{env.Replica(), env.Replica()}
	l := tokenlimit.SlidingCounterLimit(100, time.Minute)
	one := func(int) int64 { return 1 }
	first := hammer(t, replicas, l, "bound", Base.Add(l.Period-time.Millisecond), one)
	second := hammer(t, replicas, l, "bound", Base.Add(2*l.Period-time.Millisecond), one)
	perMs := (l.Quota*int64(time.Millisecond) + int64(l.Period) - 1) / int64(l.Period)
	if bound := 2*l.Quota - perMs; first != l.Quota || first+second != bound {
		t.Errorf("admitted %d then %d within one window, want %d then %d (the documented bound %d)", first, second, l.Quota, bound-l.Quota, bound)
	}
}

// runInvalid: every kind of bad input is refused with an error naming the
// field, and a check holding a bad item charges none of its good ones.
func runInvalid(t *testing.T, open Open) {
	good := tokenlimit.Item{Key: "good", Limit: tb10at2, Cost: 3}
	bad := []struct {
		name  string
		item  tokenlimit.Item
		field string
	}{
		{"no algorithm", tokenlimit.Item{Key: "x", Limit: tokenlimit.Limit{Quota: 1, Period: s}, Cost: 1}, "algorithm"},
		{"zero limit", tokenlimit.Item{Key: "x", Limit: tokenlimit.FixedWindowLimit(0, s), Cost: 1}, "quota"},
		{"negative limit", tokenlimit.Item{Key: "x", Limit: tokenlimit.SlidingLogLimit(-5, s), Cost: 1}, "quota"},
		{"zero window", tokenlimit.Item{Key: "x", Limit: tokenlimit.SlidingCounterLimit(5, 0), Cost: 1}, "period"},
		{"negative window", tokenlimit.Item{Key: "x", Limit: tokenlimit.FixedWindowLimit(5, -s), Cost: 1}, "period"},
		{"window not whole ms", tokenlimit.Item{Key: "x", Limit: tokenlimit.FixedWindowLimit(5, 1500*us), Cost: 1}, "period"},
		{"burst on a window", tokenlimit.Item{Key: "x", Limit: tokenlimit.Limit{Algorithm: tokenlimit.FixedWindow, Quota: 5, Period: s, Burst: 9}, Cost: 1}, "burst"},
		{"negative burst", tokenlimit.Item{Key: "x", Limit: tokenlimit.TokenBucketLimit(-1, 1, s), Cost: 1}, "burst"},
		{"negative cost", tokenlimit.Item{Key: "x", Limit: tb10at2, Cost: -1}, "cost"},
		{"huge cost", tokenlimit.Item{Key: "x", Limit: tb10at2, Cost: tokenlimit.MaxCost + 1}, "cost"},
		{"empty key", tokenlimit.Item{Key: "", Limit: tb10at2, Cost: 1}, "key"},
		{"over-long key", tokenlimit.Item{Key: strings.Repeat("k", tokenlimit.MaxKeyLength+1), Limit: tb10at2, Cost: 1}, "key"},
		{"repeated key", good, "key"},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			st := open(t).Replica()
			items := []tokenlimit.Item{good, b.item}
			_, err := st.Check(context.Background(), Base, items, make([]tokenlimit.Result, 2))
			var fe *tokenlimit.FieldError
			switch {
			case !errors.Is(err, tokenlimit.ErrInvalid) || !errors.As(err, &fe):
				t.Fatalf("error %v, want a *FieldError matching ErrInvalid", err)
			case fe.Field != "items[1]."+b.field:
				t.Errorf("field %q, want %q (error: %v)", fe.Field, "items[1]."+b.field, err)
			}
			if got := peek(t, st, tb10at2, "good"); got.Remaining != 10 {
				t.Errorf("after the refused check the good item has %d left, want 10 (nothing charged)", got.Remaining)
			}
		})
	}
	t.Run("results of the wrong length", func(t *testing.T) {
		st := open(t).Replica()
		_, err := st.Check(context.Background(), Base, []tokenlimit.Item{good}, nil)
		if !errors.Is(err, tokenlimit.ErrInvalid) {
			t.Fatalf("error %v, want ErrInvalid", err)
		}
	})
	t.Run("times out of range", func(t *testing.T) { runTimes(t, open) })
	t.Run("adjustment delta out of range", func(t *testing.T) {
		st := open(t).Replica()
		err := st.Adjust(context.Background(), Base, []tokenlimit.Adjustment{{Key: "good", Limit: tb10at2, Delta: -tokenlimit.MaxCost - 1, ChargedAt: Base}})
		var fe *tokenlimit.FieldError
		if !errors.As(err, &fe) || fe.Field != "adjustments[0].delta" {
			t.Fatalf("error %v, want a *FieldError for adjustments[0].delta", err)
		}
	})
}

// runTimes: a time before the Unix epoch, or at or after 2^53 µs, is
// refused with ErrInvalid naming "now" (Check, Adjust, LogEntries) or the
// adjustment's "charged_at", and changes nothing; the two ends of the range
// are accepted.
func runTimes(t *testing.T, open Open) {
	t.Parallel()
	ctx := context.Background()
	st := open(t).Replica()
	l := tokenlimit.FixedWindowLimit(5, s)
	last := time.UnixMicro(storekit.MaxExact - 1)
	bad := []time.Time{time.Unix(-1, 0), time.UnixMicro(-1), {}, time.UnixMicro(storekit.MaxExact), last.Add(time.Hour)}
	wantField := func(what string, err error, field string) {
		t.Helper()
		var fe *tokenlimit.FieldError
		if !errors.Is(err, tokenlimit.ErrInvalid) || !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: error %v, want a *FieldError for %s matching ErrInvalid", what, err, field)
		}
	}
	for _, now := range bad {
		_, err := st.Check(ctx, now, []tokenlimit.Item{{Key: "k", Limit: l, Cost: 1}}, make([]tokenlimit.Result, 1))
		wantField("Check at "+now.String(), err, "now")
		err = st.Adjust(ctx, now, []tokenlimit.Adjustment{{Key: "k", Limit: l, Delta: 1, ChargedAt: Base}})
		wantField("Adjust at "+now.String(), err, "now")
		err = st.Adjust(ctx, Base, []tokenlimit.Adjustment{{Key: "k", Limit: l, Delta: 1, ChargedAt: now}})
		wantField("Adjust charged at "+now.String(), err, "adjustments[0].charged_at")
		if lr, ok := st.(tokenlimit.LogReader); ok {
			_, err = lr.LogEntries(ctx, "k", tokenlimit.SlidingLogLimit(5, s), now)
			wantField("LogEntries at "+now.String(), err, "now")
		}
	}
	if r := peek(t, st, l, "k"); r.Remaining != 5 {
		t.Errorf("after the refused calls k has %d left, want 5 (nothing charged)", r.Remaining)
	}
	for _, now := range []time.Time{time.Unix(0, 0), last} {
		results := make([]tokenlimit.Result, 1)
		_, err := st.Check(ctx, now, []tokenlimit.Item{{Key: "edge", Limit: l, Cost: 1}}, results)
		if err != nil || !results[0].Allowed || results[0].Remaining != 4 {
			t.Errorf("Check at %s: %+v, %v; want allowed with 4 left", now.UTC().Format(time.RFC3339Nano), results[0], err)
		}
	}
}

// runScriptFlush: a store that loses its cached scripts recovers by itself,
// and the budgets are intact.
func runScriptFlush(t *testing.T, open Open) {
	env := open(t)
	if env.FlushScripts == nil {
		return // the store caches no scripts
	}
	st := env.Replica()
	ctx := context.Background()
	for _, l := range exactLimits() {
		items := []tokenlimit.Item{{Key: "flush", Limit: l, Cost: 60}}
		results := make([]tokenlimit.Result, 1)
		if _, err := st.Check(ctx, Base, items, results); err != nil || !results[0].Allowed {
			t.Fatalf("%s: first check: %v %+v", l, err, results[0])
		}
		env.FlushScripts(t)
		if _, err := st.Check(ctx, Base, items, results); err != nil || results[0].Allowed || results[0].Remaining != 40 {
			t.Fatalf("%s: check after SCRIPT FLUSH: err %v, result %+v, want denied with 40 left", l, err, results[0])
		}
		env.FlushScripts(t)
		adj := []tokenlimit.Adjustment{{Key: "flush", Limit: l, Delta: -10, ChargedAt: Base}}
		if err := st.Adjust(ctx, Base, adj); err != nil {
			t.Fatalf("%s: adjust after SCRIPT FLUSH: %v", l, err)
		}
		if got := peek(t, st, l, "flush").Remaining; got != 50 {
			t.Fatalf("%s: %d left after refunding 10, want 50", l, got)
		}
	}
}

// runScriptFlushUnderLoad: a store that loses its cached scripts while
// calls are in flight, several times, neither fails a call nor loses or
// doubles a charge: checks and reservations from 8 callers on two
// replicas, and then the budget holds exactly what was admitted.
func runScriptFlushUnderLoad(t *testing.T, open Open) {
	env := open(t)
	if env.FlushScripts == nil {
		return // the store caches no scripts
	}
	const callers, rounds, flushEvery = 8, 40, 50
	l := tokenlimit.FixedWindowLimit(1_000_000, time.Hour)
	replicas := []tokenlimit.Store{env.Replica(), env.Replica()}
	ctx := context.Background()
	var (
		admitted atomic.Int64
		done     = make(chan error, callers*rounds) // one per call
	)
	for c := range callers {
		go func() {
			st := replicas[c%len(replicas)]
			results := make([]tokenlimit.Result, 1)
			for r := range rounds {
				err := flushLoadStep(ctx, st, l, c, r, results)
				if err == nil && results[0].Allowed {
					admitted.Add(1)
				}
				done <- err
			}
		}()
	}
	for n := 1; n <= callers*rounds; n++ {
		if err := <-done; err != nil {
			t.Errorf("a call failed while the scripts were flushed: %v", err)
		}
		if n%flushEvery == 0 {
			env.FlushScripts(t) // while the other callers' calls are in flight
		}
	}
	if got, want := peek(t, replicas[0], l, "flush-load").Remaining, l.Quota-admitted.Load(); got != want {
		t.Errorf("%d left after %d admitted charges of 1, want %d: a charge was lost or doubled", got, admitted.Load(), want)
	}
}

// flushLoadStep is one call of runScriptFlushUnderLoad: a check of 1, or
// every fifth round on a store that keeps reservations, a reservation of 2
// settled at 1 (so 1 net, reported in results like a check).
func flushLoadStep(ctx context.Context, st tokenlimit.Store, l tokenlimit.Limit, caller, round int, results []tokenlimit.Result) error {
	item := tokenlimit.Item{Key: "flush-load", Limit: l, Cost: 1}
	rs, ok := st.(tokenlimit.Reserver)
	if !ok || round%5 != 0 {
		_, err := st.Check(ctx, Base, []tokenlimit.Item{item}, results)
		return err
	}
	item.Cost = 2
	id := fmt.Sprintf("flush-%d-%d", caller, round)
	out, err := rs.Reserve(ctx, Base, tokenlimit.ReserveRequest{ID: id, Items: []tokenlimit.Item{item}, TTL: time.Hour}, results)
	if err != nil {
		return err
	}
	if out.Status != tokenlimit.Reserved {
		return fmt.Errorf("reserve %s: %s, want reserved", id, out.Status)
	}
	st2, err := rs.Settle(ctx, Base, tokenlimit.SettleRequest{ID: id, Actual: 1, TTL: time.Hour})
	if err != nil {
		return err
	}
	if st2 != tokenlimit.Settled {
		return fmt.Errorf("settle %s: %s, want settled", id, st2)
	}
	return nil
}

// runReset: Reset makes a budget whole, touches no other, and accepts a
// budget that holds nothing.
func runReset(t *testing.T, open Open) {
	st := open(t).Replica()
	ctx := context.Background()
	for _, l := range exactLimits() {
		for _, key := range []string{"reset", "kept"} {
			items := []tokenlimit.Item{{Key: key, Limit: l, Cost: 70}}
			if _, err := st.Check(ctx, Base, items, make([]tokenlimit.Result, 1)); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Reset(ctx, "reset", l.Algorithm); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		if got := peek(t, st, l, "reset"); got.Remaining != l.Capacity() {
			t.Errorf("%s: %d left after Reset, want %d", l, got.Remaining, l.Capacity())
		}
		if got := peek(t, st, l, "kept"); got.Remaining != l.Capacity()-70 {
			t.Errorf("%s: the other key has %d left after Reset, want %d", l, got.Remaining, l.Capacity()-70)
		}
		if err := st.Reset(ctx, "never-used", l.Algorithm); err != nil {
			t.Errorf("%s: Reset of an unused key: %v", l, err)
		}
	}
	if err := st.Reset(ctx, "", tokenlimit.TokenBucket); !errors.Is(err, tokenlimit.ErrInvalid) {
		t.Errorf("Reset with an empty key: %v, want ErrInvalid", err)
	}
}

// runLogEntries: a store that can list a sliding log's entries lists those
// still in the window, refunds included, and changes nothing.
func runLogEntries(t *testing.T, open Open) {
	st := open(t).Replica()
	reader, ok := st.(tokenlimit.LogReader)
	if !ok {
		return // the store cannot list logs
	}
	ctx := context.Background()
	l := tokenlimit.SlidingLogLimit(10, 10*s)
	charge := func(at time.Duration, cost int64) {
		t.Helper()
		if _, err := st.Check(ctx, Base.Add(at), []tokenlimit.Item{{Key: "log", Limit: l, Cost: cost}}, make([]tokenlimit.Result, 1)); err != nil {
			t.Fatal(err)
		}
	}
	entries := func(at time.Duration) []tokenlimit.LogEntry {
		t.Helper()
		got, err := reader.LogEntries(ctx, "log", l, Base.Add(at))
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(got, func(a, b tokenlimit.LogEntry) int {
			return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Cost, b.Cost))
		})
		return got
	}
	charge(0, 2)
	charge(1*s, 3)
	refund := []tokenlimit.Adjustment{{Key: "log", Limit: l, Delta: -1, ChargedAt: Base.Add(1 * s)}}
	if err := st.Adjust(ctx, Base.Add(2*s), refund); err != nil {
		t.Fatal(err)
	}
	want := []tokenlimit.LogEntry{{At: Base, Cost: 2}, {At: Base.Add(1 * s), Cost: -1}, {At: Base.Add(1 * s), Cost: 3}}
	for range 2 { // reading twice: reading changes nothing
		if got := entries(5 * s); !slices.EqualFunc(got, want, sameEntry) {
			t.Fatalf("entries at 5s: %v, want %v", got, want)
		}
	}
	if got := entries(10500 * ms); !slices.EqualFunc(got, want[1:], sameEntry) {
		t.Errorf("entries at 10.5s: %v, want %v (the entry at 0 has left)", got, want[1:])
	}
	if got := entries(30 * s); len(got) != 0 {
		t.Errorf("entries at 30s: %v, want none", got)
	}
	if got, err := reader.LogEntries(ctx, "none", l, Base); err != nil || len(got) != 0 {
		t.Errorf("entries of a key with no log: %v %v", got, err)
	}
	if _, err := reader.LogEntries(ctx, "log", tb10at2, Base); !errors.Is(err, tokenlimit.ErrInvalid) {
		t.Errorf("entries of a token bucket: %v, want ErrInvalid", err)
	}
}

func sameEntry(a, b tokenlimit.LogEntry) bool { return a.At.Equal(b.At) && a.Cost == b.Cost }
