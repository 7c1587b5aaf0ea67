package redisstore_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
	"github.com/tokenlimit/tokenlimit/storetest"
)

// gated holds every script call until open is closed, and counts them.
type gated struct {
	redisstore.Scripter
	open  chan struct{}
	calls atomic.Int64
}

func (g *gated) EvalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	g.calls.Add(1)
	<-g.open
	return g.Scripter.EvalSHA(ctx, sha, keys, args)
}

// untilLanesHeld waits until every batch lane holds a call at g's gate
// and queued reports the other n - BatchLanes waiting behind them, failing
// t if that does not come.
func untilLanesHeld(t *testing.T, g *gated, queued func() int, n int) {
	t.Helper()
	testkit.Eventually(t, time.Minute, "a call held in every lane, the rest queued", func() bool {
		return g.calls.Load() >= int64(redisstore.BatchLanes) && queued() >= n-redisstore.BatchLanes
	})
}

// Checks that arrive while calls are in flight queue and are decided
// together in one call, each on its own and in order, and exactly: a bucket
// of 5 admits 5 of 12 concurrent checks, in 2 lone calls and 1 batch, and
// each caller's batch observer hears the size of the call that made its
// check (1 for a lone call, 10 for the batch).
func TestChecksQueuedBehindCallsShareOneCall(t *testing.T) {
	srv := redistest.Start(t)
	g := &gated{Scripter: rueidisclient.New(rueidisClient(t, srv.Addr())), open: make(chan struct{})}
	st := newStore(t, g, callerTime(newPrefix()))
	limit := tokenlimit.TokenBucketLimit(5, 1, time.Hour)
	const callers = 12
	var allowed atomic.Int64
	var wg sync.WaitGroup
	observed := make([][]int, callers)
	for i := range callers {
		wg.Go(func() {
			results := make([]tokenlimit.Result, 1)
			items := []tokenlimit.Item{{Key: "user=batch", Limit: limit, Cost: 1}}
			ctx := redisstore.WithBatchObserver(context.Background(), func(jobs int) { observed[i] = append(observed[i], jobs) })
			if _, err := st.Check(ctx, storetest.Base, items, results); err != nil {
				t.Error(err)
				return
			}
			if results[0].Allowed {
				allowed.Add(1)
			}
		})
	}
	untilLanesHeld(t, g, func() int { return redisstore.QueuedChecks(st) }, callers)
	close(g.open)
	wg.Wait()
	if n := allowed.Load(); n != 5 {
		t.Errorf("%d of %d checks allowed, want 5", n, callers)
	}
	if n, lanes := g.calls.Load(), int64(redisstore.BatchLanes); n != lanes+1 {
		t.Errorf("%d script calls for %d checks, want %d (%d alone, 1 batch of %d)", n, callers, lanes+1, lanes, callers-lanes)
	}
	sizes := map[int]int{} // batch size observed -> callers that observed it
	for i, o := range observed {
		if len(o) != 1 {
			t.Errorf("caller %d's observer heard %v, want one batch size", i, o)
			continue
		}
		sizes[o[0]]++
	}
	if want := map[int]int{1: redisstore.BatchLanes, callers - redisstore.BatchLanes: callers - redisstore.BatchLanes}; !maps.Equal(sizes, want) {
		t.Errorf("callers by the batch size they observed: %v, want %v", sizes, want)
	}
}

// A caller that gives up while its check waits in the queue gets its
// context's error, and the others are still decided.
func TestQueuedCheckOfACallerThatGaveUp(t *testing.T) {
	srv := redistest.Start(t)
	g := &gated{Scripter: rueidisclient.New(rueidisClient(t, srv.Addr())), open: make(chan struct{})}
	st := newStore(t, g, callerTime(newPrefix()))
	limit := tokenlimit.TokenBucketLimit(5, 1, time.Hour)
	check := func(ctx context.Context) error {
		items := []tokenlimit.Item{{Key: "user=gaveup", Limit: limit, Cost: 1}}
		_, err := st.Check(ctx, storetest.Base, items, make([]tokenlimit.Result, 1))
		return err
	}
	var wg sync.WaitGroup
	lanes := redisstore.BatchLanes
	for range lanes {
		wg.Go(func() {
			if err := check(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	untilLanesHeld(t, g, func() int { return 0 }, lanes)
	go func() { gaveUp <- check(ctx) }()
	untilLanesHeld(t, g, func() int { return redisstore.QueuedChecks(st) }, lanes+1)
	cancel()
	if err := <-gaveUp; err == nil {
		t.Error("a cancelled queued check returned no error")
	}
	close(g.open)
	wg.Wait()
	// The cancelled check was left out of the batch: one per lane of 5 is
	// taken.
	results := make([]tokenlimit.Result, 1)
	items := []tokenlimit.Item{{Key: "user=gaveup", Limit: limit}}
	if _, err := st.Check(context.Background(), storetest.Base, items, results); err != nil {
		t.Fatal(err)
	}
	if want := int64(5 - lanes); results[0].Remaining != want {
		t.Errorf("remaining %d after %d checks and 1 abandoned one, want %d", results[0].Remaining, lanes, want)
	}
}

// Queued checks whose callers give up at any moment, beside ones that wait:
// every answer a caller gets is its own check's (each caller has a limit of
// its own capacity), never one written for a check that gave up earlier,
// whose queue entry a batch may still be deciding.
func TestQueuedChecksOfCallersThatGiveUpAtRandom(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, rueidisclient.New(rueidisClient(t, srv.Addr())), callerTime(newPrefix()))
	const callers, checks = 32, 60
	limits := make([]tokenlimit.Limit, callers)
	for c := range limits {
		limits[c] = tokenlimit.TokenBucketLimit(int64(1_000+c), 1, time.Hour)
		// One check per key first, with nobody giving up: rueidis dials a
		// connection on the context of the first call routed to it, and
		// every call waiting for that dial gets its error, so a caller
		// giving up during the dial would fail the others' checks (notes,
		// follow-ups). The connections stay up for the rest of the test.
		items := []tokenlimit.Item{{Key: fmt.Sprintf("user=%d", c), Limit: limits[c], Cost: 0}}
		if _, err := st.Check(context.Background(), storetest.Base, items, make([]tokenlimit.Result, 1)); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for c := range callers {
		limit := limits[c]
		wg.Go(func() {
			items := []tokenlimit.Item{{Key: fmt.Sprintf("user=%d", c), Limit: limit, Cost: 1}}
			for i := range checks {
				results := make([]tokenlimit.Result, 1)
				ctx, cancel := context.WithCancel(context.Background())
				if i%2 == 1 {
					go cancel()
				}
				_, err := st.Check(ctx, storetest.Base, items, results)
				cancel()
				if err != nil {
					if i%2 == 0 {
						t.Errorf("caller %d, check %d: %v", c, i, err)
					}
					continue
				}
				if r := results[0]; !r.Allowed || r.Limit != limit.Capacity() {
					t.Errorf("caller %d, check %d: %+v, want an allowed result of capacity %d", c, i, r, limit.Capacity())
				}
			}
		})
	}
	wg.Wait()
}

// Reservations that arrive while reserve calls are in flight queue and are
// made together in one call, each on its own and in order, and exactly: a
// bucket of 5 admits 5 of 12 concurrent reservations, in 2 lone calls and
// 1 batch; a retry of each replays its answer; then the settlements queue
// and are made together alike.
func TestReservesQueuedBehindCallsShareOneCall(t *testing.T) {
	srv := redistest.Start(t)
	g := &gated{Scripter: rueidisclient.New(rueidisClient(t, srv.Addr())), open: make(chan struct{})}
	prefix := newPrefix()
	st := newStore(t, g, callerTime(prefix))
	limit := tokenlimit.TokenBucketLimit(5, 1, time.Hour)
	const callers = 12
	req := func(i int) tokenlimit.ReserveRequest {
		return tokenlimit.ReserveRequest{ID: fmt.Sprintf("r%d", i), Items: []tokenlimit.Item{{Key: "user=rbatch", Limit: limit, Cost: 1}}, TTL: time.Hour}
	}
	outs := make([]tokenlimit.ReserveStatus, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			out, err := st.Reserve(context.Background(), storetest.Base, req(i), make([]tokenlimit.Result, 1))
			if err != nil {
				t.Error(err)
				return
			}
			outs[i] = out.Status
		})
	}
	untilLanesHeld(t, g, func() int { return redisstore.QueuedReserves(st) }, callers)
	close(g.open)
	wg.Wait()
	if n, lanes := g.calls.Load(), int64(redisstore.BatchLanes); n != lanes+1 {
		t.Errorf("%d script calls for %d reservations, want %d (%d alone, 1 batch of %d)", n, callers, lanes+1, lanes, callers-lanes)
	}
	reserved := 0
	for i, st0 := range outs {
		switch st0 {
		case tokenlimit.Reserved:
			reserved++
		case tokenlimit.Denied:
		default:
			t.Errorf("reservation %d: %s, want reserved or denied", i, st0)
		}
	}
	if reserved != 5 {
		t.Errorf("%d of %d reservations made, want 5", reserved, callers)
	}
	for i := range callers {
		out, err := st.Reserve(context.Background(), storetest.Base, req(i), make([]tokenlimit.Result, 1))
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]tokenlimit.ReserveStatus{true: tokenlimit.Replayed, false: tokenlimit.Denied}[outs[i] == tokenlimit.Reserved]; out.Status != want {
			t.Errorf("retry of reservation %d (%s): %s, want %s", i, outs[i], out.Status, want)
		}
	}

	// Settlements queue alike: each reservation settled at 0 (a refund),
	// the denied ones unknown (and tombstoned).
	g2 := &gated{Scripter: g.Scripter, open: make(chan struct{})}
	st2 := newStore(t, g2, callerTime(prefix))
	statuses := make([]tokenlimit.SettleStatus, callers)
	for i := range callers {
		wg.Go(func() {
			s, err := st2.Settle(context.Background(), storetest.Base, tokenlimit.SettleRequest{ID: req(i).ID, Actual: 0, TTL: time.Hour})
			if err != nil {
				t.Error(err)
				return
			}
			statuses[i] = s
		})
	}
	untilLanesHeld(t, g2, func() int { return redisstore.QueuedSettles(st2) }, callers)
	close(g2.open)
	wg.Wait()
	if n, lanes := g2.calls.Load(), int64(redisstore.BatchLanes); n != lanes+1 {
		t.Errorf("%d script calls for %d settlements, want %d (%d alone, 1 batch of %d)", n, callers, lanes+1, lanes, callers-lanes)
	}
	for i, s := range statuses {
		if want := map[bool]tokenlimit.SettleStatus{true: tokenlimit.Settled, false: tokenlimit.UnknownReservation}[outs[i] == tokenlimit.Reserved]; s != want {
			t.Errorf("settlement of reservation %d (%s): %s, want %s", i, outs[i], s, want)
		}
	}
	results := make([]tokenlimit.Result, 1)
	if _, err := st2.Check(context.Background(), storetest.Base, []tokenlimit.Item{{Key: "user=rbatch", Limit: limit}}, results); err != nil {
		t.Fatal(err)
	}
	if results[0].Remaining != 5 {
		t.Errorf("%d left after every reservation was refunded, want 5", results[0].Remaining)
	}
}

// A call of several reservations answers each as calls of their own would
// (on a second namespace set up alike), whatever the statuses before it: a
// replay, a conflict and a tombstone (whose items' keys the call skips), a
// denial, then two that reserve on keys the replayed one charged (a
// sliding log's two keys among them).
func TestReserveCallOfEveryStatus(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	log, bucket := tokenlimit.SlidingLogLimit(10, time.Minute), tokenlimit.TokenBucketLimit(10, 1, time.Hour)
	req := func(id string, logCost, bucketCost int64) tokenlimit.ReserveRequest {
		return tokenlimit.ReserveRequest{ID: id, TTL: time.Hour, Items: []tokenlimit.Item{
			{Key: "{a}", Limit: log, Cost: logCost}, {Key: "{a}", Limit: bucket, Cost: bucketCost},
		}, Rules: []tokenlimit.SettleRule{tokenlimit.SettleActual, tokenlimit.SettleKeep}}
	}
	open := func() *redisstore.Store {
		st := newStore(t, rueidisclient.New(rueidisClient(t, srv.Addr())), callerTime(newPrefix()))
		for _, r := range []tokenlimit.ReserveRequest{req("replayed", 3, 1), req("conflict", 1, 1)} {
			if out, err := st.Reserve(ctx, storetest.Base, r, make([]tokenlimit.Result, 2)); err != nil || out.Status != tokenlimit.Reserved {
				t.Fatalf("reserve %s: %+v, %v", r.ID, out, err)
			}
		}
		if s, err := st.Settle(ctx, storetest.Base, tokenlimit.SettleRequest{ID: "closed", TTL: time.Hour}); err != nil || s != tokenlimit.UnknownReservation {
			t.Fatalf("settle of no reservation: %s, %v", s, err)
		}
		return st
	}
	reqs := []tokenlimit.ReserveRequest{
		req("replayed", 3, 1), req("conflict", 2, 1), req("closed", 1, 1), req("denied", 7, 1), req("fresh", 2, 3), req("fresh-2", 1, 1),
	}
	want := []tokenlimit.ReserveStatus{tokenlimit.Replayed, tokenlimit.Conflict, tokenlimit.Closed, tokenlimit.Denied, tokenlimit.Reserved, tokenlimit.Reserved}
	results := make([][]tokenlimit.Result, len(reqs))
	for i := range results {
		results[i] = make([]tokenlimit.Result, 2)
	}
	outs, err := redisstore.ReserveInOneCall(open(), storetest.Base, reqs, results)
	if err != nil {
		t.Fatal(err)
	}
	// 10 - 3 (replayed) - 1 (conflict) - 2 (fresh) - 1 (fresh-2) left in the log.
	if got := results[5][0].Remaining; got != 3 {
		t.Errorf("fresh-2's log: %d left, want 3 (its own keys read after the skipped ones)", got)
	}
	lone := open()
	for i, r := range reqs {
		alone := make([]tokenlimit.Result, 2)
		out, err := lone.Reserve(ctx, storetest.Base, r, alone)
		if err != nil {
			t.Fatal(err)
		}
		if outs[i].Status != want[i] || out != outs[i] || !slices.Equal(alone, results[i]) {
			t.Errorf("%s in one call: %+v %+v; alone: %+v %+v; want %s", r.ID, outs[i], results[i], out, alone, want[i])
		}
	}
}
