package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/memstore"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newStore(t *testing.T, opts memstore.Options) *memstore.Store {
	t.Helper()
	st, err := memstore.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// check runs one Check and returns its results and error.
func check(st *memstore.Store, now time.Time, items ...tokenlimit.Item) ([]tokenlimit.Result, error) {
	results := make([]tokenlimit.Result, len(items))
	_, err := st.Check(context.Background(), now, items, results)
	return results, err
}

// mustCheck is check for a call that must succeed; it returns the first result.
func mustCheck(t *testing.T, st *memstore.Store, now time.Time, key string, l tokenlimit.Limit, cost int64) tokenlimit.Result {
	t.Helper()
	res, err := check(st, now, tokenlimit.Item{Key: key, Limit: l, Cost: cost})
	if err != nil {
		t.Fatalf("check %q cost %d at %v: %v", key, cost, now, err)
	}
	return res[0]
}

func TestMaxKeysRefusesNewKeysWithoutEvicting(t *testing.T) {
	t.Parallel()
	st := newStore(t, memstore.Options{MaxKeys: 3})
	ctx := context.Background()
	l := tokenlimit.TokenBucketLimit(10, 1, time.Minute)
	for _, k := range []string{"a", "b", "c"} {
		if r := mustCheck(t, st, t0, k, l, 2); !r.Allowed || r.Remaining != 8 {
			t.Fatalf("%s: %+v, want allowed with 8 left", k, r)
		}
	}
	if st.Len() != 3 {
		t.Fatalf("Len() = %d, want 3", st.Len())
	}

	_, err := check(st, t0, tokenlimit.Item{Key: "d", Limit: l, Cost: 1})
	if !errors.Is(err, tokenlimit.ErrStoreFull) || errors.Is(err, tokenlimit.ErrInvalid) {
		t.Fatalf("a fourth key: %v, want ErrStoreFull (and not ErrInvalid)", err)
	}
	// The same key under another algorithm is another budget: also refused.
	_, err = check(st, t0, tokenlimit.Item{Key: "a", Limit: tokenlimit.FixedWindowLimit(10, time.Minute), Cost: 1})
	if !errors.Is(err, tokenlimit.ErrStoreFull) {
		t.Errorf("key a under a second algorithm: %v, want ErrStoreFull", err)
	}
	// An extra charge that would create a key is refused the same way.
	err = st.Adjust(ctx, t0, []tokenlimit.Adjustment{{Key: "e", Limit: l, Delta: 3, ChargedAt: t0}})
	if !errors.Is(err, tokenlimit.ErrStoreFull) {
		t.Errorf("an adjustment creating a fourth key: %v, want ErrStoreFull", err)
	}
	if st.Len() != 3 {
		t.Errorf("Len() = %d after refusals, want 3", st.Len())
	}

	// Peeking needs no key: allowed, and reports a full budget.
	if r := mustCheck(t, st, t0, "d", l, 0); !r.Allowed || r.Remaining != 10 {
		t.Errorf("peek at the refused key: %+v, want allowed with 10 left", r)
	}
	// Nothing was evicted: every existing key kept its charge and still works.
	for _, k := range []string{"a", "b", "c"} {
		if r := mustCheck(t, st, t0, k, l, 1); !r.Allowed || r.Remaining != 7 {
			t.Errorf("%s after the store filled: %+v, want allowed with 7 left", k, r)
		}
	}
	if err := st.Adjust(ctx, t0, []tokenlimit.Adjustment{{Key: "a", Limit: l, Delta: -3, ChargedAt: t0}}); err != nil {
		t.Errorf("refund to an existing key of a full store: %v", err)
	}
	if r := mustCheck(t, st, t0, "a", l, 0); r.Remaining != 10 {
		t.Errorf("a after a refund of 3: %d left, want 10", r.Remaining)
	}
	// A whole budget needs no key: the refund freed a's slot for d.
	if st.Len() != 2 {
		t.Errorf("Len() = %d after a's budget became whole, want 2", st.Len())
	}
	if r := mustCheck(t, st, t0, "d", l, 1); !r.Allowed || r.Remaining != 9 {
		t.Errorf("d after a's slot was freed: %+v, want allowed with 9 left", r)
	}
}

func TestMultiItemCheckNeedingTooManyNewKeysChangesNothing(t *testing.T) {
	t.Parallel()
	st := newStore(t, memstore.Options{MaxKeys: 3})
	l := tokenlimit.TokenBucketLimit(10, 1, time.Minute)
	mustCheck(t, st, t0, "{u}:a", l, 4)
	mustCheck(t, st, t0, "{u}:b", l, 4)

	items := []tokenlimit.Item{
		{Key: "{u}:a", Limit: l, Cost: 1},
		{Key: "{u}:n1", Limit: l, Cost: 1},
		{Key: "{u}:n2", Limit: l, Cost: 1},
	}
	if _, err := check(st, t0, items...); !errors.Is(err, tokenlimit.ErrStoreFull) {
		t.Fatalf("a check creating 2 keys with 1 free: %v, want ErrStoreFull", err)
	}
	if st.Len() != 2 {
		t.Errorf("Len() = %d, want 2: the refused check created a key", st.Len())
	}
	for key, want := range map[string]int64{"{u}:a": 6, "{u}:b": 6, "{u}:n1": 10, "{u}:n2": 10} {
		if r := mustCheck(t, st, t0, key, l, 0); r.Remaining != want {
			t.Errorf("%s: %d left after the refused check, want %d", key, r.Remaining, want)
		}
	}
	// One new key fits.
	res, err := check(st, t0, items[:2]...)
	if err != nil || !res[0].Allowed || !res[1].Allowed || res[0].Remaining != 5 || res[1].Remaining != 9 {
		t.Fatalf("a check creating 1 key with 1 free: %+v, %v; want both allowed with 5 and 9 left", res, err)
	}
	if st.Len() != 3 {
		t.Errorf("Len() = %d, want 3", st.Len())
	}
}

func TestExpiredKeysAreSweptOnSchedule(t *testing.T) {
	t.Parallel()
	st := newStore(t, memstore.Options{Shards: 1, SweepInterval: 10 * time.Second})
	l := tokenlimit.TokenBucketLimit(1, 1, time.Second) // a key lives 1s after a charge of 1
	for _, k := range []string{"a", "b", "c"} {
		mustCheck(t, st, t0, k, l, 1)
	}
	if st.Len() != 3 {
		t.Fatalf("Len() = %d, want 3", st.Len())
	}
	// Expired at t0+1s, but the shard swept at t0 and is not due again
	// before t0+10s: the expired keys are still counted.
	mustCheck(t, st, t0.Add(5*time.Second), "other", l, 0)
	if st.Len() != 3 {
		t.Errorf("Len() = %d at t0+5s, before the sweep is due, want 3 (expired, not yet swept)", st.Len())
	}
	mustCheck(t, st, t0.Add(10*time.Second), "other", l, 0)
	if st.Len() != 0 {
		t.Errorf("Len() = %d at t0+10s, when the sweep is due, want 0", st.Len())
	}
	// The swept keys start over with a full budget.
	if r := mustCheck(t, st, t0.Add(10*time.Second), "a", l, 0); r.Remaining != 1 || r.ResetAfter != 0 {
		t.Errorf("a after the sweep: %+v, want a full budget", r)
	}
}

func TestSweptKeysMakeRoomForNewOnes(t *testing.T) {
	t.Parallel()
	st := newStore(t, memstore.Options{Shards: 1, MaxKeys: 3, SweepInterval: time.Second})
	short := tokenlimit.TokenBucketLimit(1, 1, time.Second)   // lives 1s
	long := tokenlimit.TokenBucketLimit(1, 1, 10*time.Second) // lives 10s
	mustCheck(t, st, t0, "a", short, 1)
	mustCheck(t, st, t0, "b", short, 1)
	mustCheck(t, st, t0, "c", long, 1)
	at := t0.Add(500 * time.Millisecond)
	if _, err := check(st, at, tokenlimit.Item{Key: "d", Limit: short, Cost: 1}); !errors.Is(err, tokenlimit.ErrStoreFull) {
		t.Fatalf("new key while 3 keys are live: %v, want ErrStoreFull", err)
	}
	at = t0.Add(2 * time.Second) // a and b expired, c lives until t0+10s
	for _, k := range []string{"d", "e"} {
		if r := mustCheck(t, st, at, k, short, 1); !r.Allowed {
			t.Errorf("new key %s after a and b expired: %+v, want allowed", k, r)
		}
	}
	if st.Len() != 3 {
		t.Errorf("Len() = %d, want 3 (c, d, e)", st.Len())
	}
	if _, err := check(st, at, tokenlimit.Item{Key: "f", Limit: short, Cost: 1}); !errors.Is(err, tokenlimit.ErrStoreFull) {
		t.Errorf("a fourth live key: %v, want ErrStoreFull", err)
	}
	if r := mustCheck(t, st, at, "c", long, 1); r.Allowed || r.RetryAfter != 8*time.Second {
		t.Errorf("c, still live: %+v, want denied for 8s more (its state survived)", r)
	}
}

// TestConcurrentDistinctKeys hammers many keys across shards from many
// goroutines: each goroutine's own keys, keys shared by all, and two-key
// checks taken in both orders. Every total is exact.
func TestConcurrentDistinctKeys(t *testing.T) {
	t.Parallel()
	st := newStore(t, memstore.Options{Shards: 16})
	const (
		goroutines = 32
		ownKeys    = 64
		ownRounds  = 5
		shared     = 40
		sharedCap  = 10
		pairKeys   = 12
		pairCap    = 50
		pairChecks = 40
	)
	own := tokenlimit.FixedWindowLimit(1_000_000, time.Hour)
	bucket := tokenlimit.TokenBucketLimit(sharedCap, 1, time.Hour)
	pairLimit := tokenlimit.SlidingLogLimit(pairCap, time.Hour)

	var (
		wg            sync.WaitGroup
		start         = make(chan struct{})
		sharedAllowed [shared]atomic.Int64
		pairAllowed   [pairKeys]atomic.Int64
	)
	for g := range goroutines {
		wg.Go(func() {
			<-start
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for round := range ownRounds {
				for k := range ownKeys {
					res, err := check(st, t0, tokenlimit.Item{Key: fmt.Sprintf("own:%d:%d", g, k), Limit: own, Cost: int64(1 + (k+round)%3)})
					if err != nil || !res[0].Allowed {
						t.Errorf("own key: %+v, %v", res, err)
						return
					}
				}
			}
			for _, k := range rng.Perm(shared) {
				res, err := check(st, t0, tokenlimit.Item{Key: fmt.Sprintf("shared:%d", k), Limit: bucket, Cost: 1})
				if err != nil {
					t.Error(err)
					return
				}
				if res[0].Allowed {
					sharedAllowed[k].Add(1)
				}
			}
			for range pairChecks {
				a, b := rng.IntN(pairKeys), rng.IntN(pairKeys-1)
				if b >= a {
					b++
				}
				res, err := check(st, t0,
					tokenlimit.Item{Key: fmt.Sprintf("pair:%d", a), Limit: pairLimit, Cost: 1},
					tokenlimit.Item{Key: fmt.Sprintf("pair:%d", b), Limit: pairLimit, Cost: 1})
				if err != nil {
					t.Error(err)
					return
				}
				if res[0].Allowed && res[1].Allowed {
					pairAllowed[a].Add(1)
					pairAllowed[b].Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		return
	}

	for k := range ownKeys { // each own key took the sum over rounds of 1 + (k+round)%3

		var sum int64
		for round := range ownRounds {
			sum += int64(1 + (k+round)%3)
		}
		for g := range goroutines {
			if r := mustCheck(t, st, t0, fmt.Sprintf("own:%d:%d", g, k), own, 0); r.Remaining != own.Quota-sum {
				t.Errorf("own:%d:%d: %d left, want %d", g, k, r.Remaining, own.Quota-sum)
			}
		}
	}
	for k := range shared {
		if n := sharedAllowed[k].Load(); n != sharedCap {
			t.Errorf("shared:%d admitted %d of %d attempts, want exactly %d", k, n, goroutines, sharedCap)
		}
		if r := mustCheck(t, st, t0, fmt.Sprintf("shared:%d", k), bucket, 0); r.Remaining != 0 {
			t.Errorf("shared:%d: %d left, want 0", k, r.Remaining)
		}
	}
	for k := range pairKeys {
		n := pairAllowed[k].Load()
		r := mustCheck(t, st, t0, fmt.Sprintf("pair:%d", k), pairLimit, 0)
		if n > pairCap || r.Remaining != pairCap-n {
			t.Errorf("pair:%d: in %d admitted checks but %d left of %d: a two-key check charged one key alone", k, n, r.Remaining, pairCap)
		}
	}
	if want := goroutines*ownKeys + shared + pairKeys; st.Len() != want {
		t.Errorf("Len() = %d, want %d", st.Len(), want)
	}
}
