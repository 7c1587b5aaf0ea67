package resilient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/breaker"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/resilient"
)

func newStore(t *testing.T, info *tokenlimit.StoreInfo, clock *testkit.Clock) (*resilient.Store, *testkit.FaultStore) {
	t.Helper()
	mem, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fs := &testkit.FaultStore{Store: mem, Info: info}
	s, err := resilient.New(fs, resilient.Options{Timeout: 50 * time.Millisecond, BreakerThreshold: 2, BreakerCooldown: time.Second, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return s, fs
}

func check(s *resilient.Store, ctx context.Context, item tokenlimit.Item) error {
	_, err := s.Check(ctx, time.Now(), []tokenlimit.Item{item}, make([]tokenlimit.Result, 1))
	return err
}

var item = tokenlimit.Item{Key: "k", Cost: 1, Limit: tokenlimit.FixedWindowLimit(10, time.Minute)}

// A store failure matches ErrUnavailable; a refused request, a full store
// and a caller that gave up do not, and count nothing towards the breaker.
// Threshold failures open it: calls then fail fast without reaching the
// store, until a trial after the cooldown finds it back.
func TestStoreClassifiesAndBreaks(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(time.Now())
	s, fs := newStore(t, testkit.Remote, clock)
	if err := check(s, context.Background(), item); err != nil {
		t.Fatalf("healthy: %v", err)
	}
	bad := item
	bad.Cost = -1
	if err := check(s, context.Background(), bad); !errors.Is(err, tokenlimit.ErrInvalid) || errors.Is(err, resilient.ErrUnavailable) {
		t.Errorf("invalid item: %v, want ErrInvalid alone", err)
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	fs.Set(testkit.Down)
	for range 3 {
		if err := check(s, gone, item); !errors.Is(err, context.Canceled) {
			t.Errorf("a caller that gave up: %v, want its context's error", err)
		}
	}
	if st := s.Breaker().State(); st != breaker.Closed {
		t.Fatalf("breaker %s after a refused request and callers that gave up, want closed", st)
	}
	var fe *resilient.FailedError
	for i := range 2 {
		err := check(s, context.Background(), item)
		if !errors.Is(err, resilient.ErrUnavailable) || !errors.Is(err, testkit.ErrStoreDown) || !errors.As(err, &fe) || fe.Trial {
			t.Fatalf("failure %d: %v, want ErrUnavailable wrapping the store's error", i, err)
		}
	}
	if h, _ := s.Health(context.Background()); h.Breaker != "open" || !h.Degraded || h.Error != testkit.ErrStoreDown.Error() {
		t.Errorf("Health after the threshold: %+v, want open, degraded, the store's error", h)
	}
	fs.Set(testkit.Healthy)
	before := fs.Checks()
	if err := check(s, context.Background(), item); !errors.Is(err, resilient.ErrBreakerOpen) || fs.Checks() != before {
		t.Errorf("breaker open: %v (%d calls reached the store), want ErrBreakerOpen and none", err, fs.Checks()-before)
	}
	clock.Advance(time.Second)
	if h, probed := s.Health(context.Background()); !probed || h.Degraded || h.Breaker != "closed" || h.Error != "" {
		t.Errorf("Health after the cooldown, store back: %+v (probed %v), want a probe that closes the breaker", h, probed)
	}
}

// A store whose replies never come fails at the timeout (and at most a
// 32nd more), not at the caller's later deadline; a caller whose own
// deadline comes first keeps it and is not counted as a failure.
func TestStoreTimesOut(t *testing.T) {
	t.Parallel()
	s, fs := newStore(t, testkit.Remote, testkit.NewClock(time.Now()))
	fs.Set(testkit.Hang)
	start := time.Now()
	err := check(s, context.Background(), item)
	if took := time.Since(start); !errors.Is(err, resilient.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || took < 50*time.Millisecond {
		t.Errorf("hanging store: %v after %s, want ErrUnavailable at the 50ms timeout", err, took)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	if err := check(s, ctx, item); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, resilient.ErrUnavailable) {
		t.Errorf("a caller's earlier deadline: %v, want its own DeadlineExceeded", err)
	}
}

// A local store gets no breaker: its failures still match ErrUnavailable.
func TestLocalStoreHasNoBreaker(t *testing.T) {
	t.Parallel()
	s, fs := newStore(t, nil, testkit.NewClock(time.Now()))
	fs.Set(testkit.Down)
	for range 5 {
		if err := check(s, context.Background(), item); !errors.Is(err, resilient.ErrUnavailable) {
			t.Fatalf("failing local store: %v, want ErrUnavailable", err)
		}
	}
	if st := s.Breaker().State(); st != breaker.Closed {
		t.Errorf("breaker %s for a local store, want closed (unused)", st)
	}
}

// OnFull hears of a store filling up once, however many calls it then
// refuses, and of it having room again once: for the embedded store when
// it has fewer keys than its bound (a call on a stored key while it is
// full changes nothing), for another store at its next answered call.
func TestStoreReportsFullOncePerChange(t *testing.T) {
	t.Parallel()
	key := func(k string) tokenlimit.Item {
		return tokenlimit.Item{Key: k, Cost: 1, Limit: tokenlimit.FixedWindowLimit(10, time.Minute)}
	}
	mem, err := memstore.New(memstore.Options{MaxKeys: 2})
	if err != nil {
		t.Fatal(err)
	}
	var changes []bool
	for _, c := range []struct {
		name  string
		store tokenlimit.Store
		// afterFull are the changes heard once the store is full and a
		// stored key answered.
		afterFull []bool
	}{
		{"embedded", mem, []bool{true}},
		{"remote, counting no keys", &testkit.FaultStore{Store: mem, Info: testkit.Remote}, []bool{true, false}},
	} {
		changes = nil
		s, err := resilient.New(c.store, resilient.Options{OnFull: func(full bool) { changes = append(changes, full) }})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for _, k := range []string{"a", "b"} {
			if err := check(s, ctx, key(k)); err != nil {
				t.Fatalf("%s: key %s: %v", c.name, k, err)
			}
		}
		for _, k := range []string{"c", "d", "e"} {
			if err := check(s, ctx, key(k)); !errors.Is(err, tokenlimit.ErrStoreFull) {
				t.Fatalf("%s: key %s: %v, want ErrStoreFull", c.name, k, err)
			}
		}
		if err := check(s, ctx, key("a")); err != nil {
			t.Fatalf("%s: a stored key: %v", c.name, err)
		}
		if len(changes) != len(c.afterFull) || changes[0] != true || (len(changes) == 2 && changes[1] != false) {
			t.Errorf("%s: OnFull heard %v, want %v", c.name, changes, c.afterFull)
		}
		if err := mem.Reset(ctx, "b", tokenlimit.FixedWindow); err != nil {
			t.Fatal(err)
		}
		if err := check(s, ctx, key("a")); err != nil {
			t.Fatalf("%s: a stored key: %v", c.name, err)
		}
		if want := []bool{true, false}; len(changes) != 2 || changes[0] != true || changes[1] != false {
			t.Errorf("%s: OnFull heard %v once a key was freed, want %v", c.name, changes, want)
		}
		if err := mem.Reset(ctx, "a", tokenlimit.FixedWindow); err != nil { // empty again for the next store
			t.Fatal(err)
		}
	}
}
