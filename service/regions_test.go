package service_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/tcprelay"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
	"github.com/tokenlimit/tokenlimit/service"
	"github.com/tokenlimit/tokenlimit/storekit"
)

// This file simulates regions on loopback: each region has a redis-server
// of its own for its own limits and replicas (services) in this process,
// and reaches the home store, where the global limit's one budget lives,
// through a relay of its own that adds linkDelay each way (a round trip of
// 2 × linkDelay), as a link between regions does.

// linkDelay is half a round trip between a region and the home store.
const linkDelay = 40 * time.Millisecond

// regionsConfig: a global limit per org in home, fail-closed, leased on
// the terms of the second %s (", lease: {...}", or "" for none), and a
// per-user bucket in each region's own store. The global limit is a
// bucket of %d that refills one a day: no window ends during a test (a
// fixed window would start afresh at the top of an hour), and what a test
// admits is the capacity, give or take one.
const regionsConfig = `
stores:
  home: {redis: "redis://127.0.0.1:1"}
limits:
  - {name: global, key: [org], algorithm: token_bucket, capacity: %d, refill: 1/d, store: home, failure_mode: closed%s}
  - {name: per-user, key: [user], algorithm: token_bucket, capacity: 100000, refill: 100000/s}
`

// world is the home store and the regions.
type world struct {
	t       testing.TB
	home    *redistest.Server
	peek    tokenlimit.Store // the home store, reached directly
	regions []*region
	limit   int64
	lease   string // the global limit's lease terms, "" for none
}

type region struct {
	name     string
	relay    *tcprelay.Relay // its link to home
	replicas []*service.Service
	// calls counts each replica's calls to home.
	calls []*homeCalls
}

// onPath marks the context of a call a test makes, so that homeCalls
// tells the store calls made on a caller's path from those made in the
// background (leases are taken and returned on contexts of their own).
type onPath struct{}

// homeCalls counts the calls to a store: all of them, and those made
// on the path of a caller whose context carries onPath.
type homeCalls struct {
	tokenlimit.Store
	all, onPath atomic.Int64
}

func (c *homeCalls) count(ctx context.Context) {
	c.all.Add(1)
	if ctx.Value(onPath{}) != nil {
		c.onPath.Add(1)
	}
}

func (c *homeCalls) Check(ctx context.Context, now time.Time, items []tokenlimit.Item, results []tokenlimit.Result) (time.Time, error) {
	c.count(ctx)
	return c.Store.Check(ctx, now, items, results)
}

func (c *homeCalls) Adjust(ctx context.Context, now time.Time, adjs []tokenlimit.Adjustment) error {
	c.count(ctx)
	return c.Store.Adjust(ctx, now, adjs)
}

func (c *homeCalls) Reserve(ctx context.Context, now time.Time, req tokenlimit.ReserveRequest, results []tokenlimit.Result) (tokenlimit.ReserveOutcome, error) {
	c.count(ctx)
	return storekit.Reserve(ctx, c.Store, now, req, results)
}

func (c *homeCalls) Settle(ctx context.Context, now time.Time, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error) {
	c.count(ctx)
	return storekit.Settle(ctx, c.Store, now, req)
}

func (c *homeCalls) Describe() tokenlimit.StoreInfo { return tokenlimit.Describe(c.Store) }

// homeStore is a Redis store of the home budgets on the server at addr:
// every region shares its key prefix and decides at the server's clock.
func homeStore(tb testing.TB, addr string) tokenlimit.Store {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	st, err := redisstore.New(rueidisclient.New(c), redisstore.Options{Prefix: "home:"})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// newWorld starts home and a region of replicas for each of timeouts, the
// deadline of that region's calls to the home store; lease is the global
// limit's lease terms ("{size: 20, ttl: 10s}"), "" for none.
func newWorld(tb testing.TB, replicas int, limit int64, lease string, timeouts ...time.Duration) *world {
	tb.Helper()
	w := &world{t: tb, home: redistest.Start(tb), limit: limit, lease: lease}
	w.peek = homeStore(tb, w.home.Addr())
	terms := ""
	if lease != "" {
		terms = ", lease: " + lease
	}
	cfg := testkit.ParseConfig(tb, fmt.Sprintf(regionsConfig, limit, terms))
	for r, timeout := range timeouts {
		relay, err := tcprelay.Start(w.home.Addr())
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { relay.Close() })
		relay.SetDelay(tcprelay.Requests, linkDelay)
		relay.SetDelay(tcprelay.Replies, linkDelay)
		rg := &region{name: fmt.Sprintf("region-%d", r), relay: relay}
		own := redistest.Start(tb)
		for range replicas {
			home := &homeCalls{Store: homeStore(tb, relay.Addr())}
			svc, err := service.New(cfg, service.Options{
				Store:        testkit.RedisStore(tb, own.Addr(), testkit.Rueidis),
				Stores:       map[string]service.NamedStore{"home": {Store: home, Timeout: timeout}},
				StoreTimeout: 5 * time.Second, Logger: testkit.Quiet(),
			})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(svc.Close)
			rg.replicas = append(rg.replicas, svc)
			rg.calls = append(rg.calls, home)
		}
		w.regions = append(w.regions, rg)
	}
	return w
}

// used reads what org's global budget has used, in the home store.
func (w *world) used(org string) int64 {
	w.t.Helper()
	results := make([]tokenlimit.Result, 1)
	item := tokenlimit.Item{Key: "global|org=" + org, Limit: tokenlimit.TokenBucketLimit(w.limit, 1, 24*time.Hour)}
	if _, err := w.peek.Check(context.Background(), time.Now(), []tokenlimit.Item{item}, results); err != nil {
		w.t.Fatalf("reading home: %v", err)
	}
	return results[0].Limit - results[0].Remaining
}

// answers counts a load's answers by kind.
type answers struct {
	admitted, denied, unavailable atomic.Int64
}

func (tl *answers) record(d service.Decision) {
	switch {
	case d.Allowed:
		tl.admitted.Add(1)
	case d.Unavailable:
		tl.unavailable.Add(1)
	default:
		tl.denied.Add(1)
	}
}

// TestRegionsShareAGlobalLimit: replicas of three regions admit exactly the
// global limit between them, each call of theirs decided by the home
// store over the slow link, and the home store's count is what they
// admitted.
func TestRegionsShareAGlobalLimit(t *testing.T) {
	t.Parallel()
	const limit = 120
	w := newWorld(t, 2, limit, "", 10*time.Second, 10*time.Second, 10*time.Second)
	var tl answers
	var wg sync.WaitGroup
	for _, rg := range w.regions {
		for i, svc := range rg.replicas {
			for g := range 3 {
				wg.Go(func() {
					user := fmt.Sprintf("%s-%d-%d", rg.name, i, g)
					for {
						d, err := svc.Check(context.Background(), service.Request{Descriptors: D{"org": "acme", "user": user}})
						if err != nil {
							t.Errorf("Check: %v", err)
							return
						}
						tl.record(d)
						if !d.Allowed {
							return // the global budget is spent
						}
					}
				})
			}
		}
	}
	wg.Wait()
	// The bucket may refill one during the test.
	if got := tl.admitted.Load(); got < limit || got > limit+1 {
		t.Errorf("the regions admitted %d, want the global limit %d (one more if the bucket refilled one)", got, limit)
	}
	if got := w.used("acme"); got != limit {
		t.Errorf("the home store counts %d used, want %d", got, limit)
	}
	if tl.unavailable.Load() != 0 {
		t.Errorf("%d answers unavailable with every link up", tl.unavailable.Load())
	}
}

// TestRegionCutOffFollowsTheFailureMode: a region whose link to home is
// cut answers the fail-closed global limit unavailable once its calls time
// out, while its own limits and the other regions go on as before; the
// global count never passes the limit; once the link returns the region
// decides on home again.
func TestRegionCutOffFollowsTheFailureMode(t *testing.T) {
	t.Parallel()
	const limit = 1000
	// The region cut off gives up on home after a second; the other one
	// waits as long as a loaded machine may take.
	w := newWorld(t, 1, limit, "", time.Second, 10*time.Second)
	ctx := context.Background()
	cut, other := w.regions[0], w.regions[1]
	check := func(svc *service.Service, desc D) service.Decision {
		t.Helper()
		d, err := svc.Check(ctx, service.Request{Descriptors: desc})
		if err != nil {
			t.Fatalf("Check(%v): %v", desc, err)
		}
		return d
	}
	var admitted atomic.Int64
	for _, rg := range w.regions {
		// The first calls dial and load the scripts over the link, which
		// may take longer than the timeout.
		testkit.Eventually(t, 20*time.Second, rg.name+" deciding on home", func() bool {
			ok := check(rg.replicas[0], D{"org": "acme", "user": "u"}).Allowed
			if ok {
				admitted.Add(1)
			}
			return ok
		})
	}

	cut.relay.Hold(tcprelay.Replies)
	cut.relay.Reset()
	testkit.Eventually(t, 20*time.Second, "the cut region answering the global limit unavailable", func() bool {
		d := check(cut.replicas[0], D{"org": "acme", "user": "u"})
		if d.Allowed {
			admitted.Add(1) // a call made before the cut came back
		}
		return d.Unavailable
	})
	if d := check(cut.replicas[0], D{"user": "u"}); !d.Allowed {
		t.Errorf("the cut region's own limit: %s, want admitted", describe(d))
	}
	testkit.Eventually(t, 20*time.Second, "the cut region's breaker of home open", func() bool {
		if d := check(cut.replicas[0], D{"org": "acme", "user": "u"}); !d.Unavailable {
			t.Fatalf("the cut region: %s, want unavailable", describe(d))
		}
		return cut.replicas[0].Health().Stores[0].Breaker == "open"
	})
	if h := cut.replicas[0].Health(); h.Degraded || !h.Stores[0].Degraded {
		t.Errorf("the cut region's health %+v: want ready, home degraded", h)
	}
	for range 5 {
		if d := check(other.replicas[0], D{"org": "acme", "user": "v"}); !d.Allowed {
			t.Fatalf("the other region while the first is cut: %s, want admitted", describe(d))
		}
		admitted.Add(1)
	}
	if used := w.used("acme"); used < admitted.Load()-1 || used > limit {
		t.Errorf("home counts %d with %d admitted: want at least every admitted call (a call cut off may have landed; less one the bucket may refill), never past %d", used, admitted.Load(), limit)
	}

	cut.relay.Release(tcprelay.Replies)
	testkit.Eventually(t, 20*time.Second, "the cut region deciding on home again", func() bool {
		return check(cut.replicas[0], D{"org": "acme", "user": "u"}).Allowed
	})
}

// TestRegionLeasesDecideLocally: with leases, replicas of two regions
// decide the global limit's calls in process: once a replica holds a
// lease, its admitted calls make no store call of their own, and the store
// is asked about one lease per lease's worth of calls; between them the
// regions admit the global limit less at most the leases outstanding at
// the end, never more, and the home store never counts past the limit.
func TestRegionLeasesDecideLocally(t *testing.T) {
	t.Parallel()
	const limit, size = 600, 20
	w := newWorld(t, 2, limit, fmt.Sprintf("{size: %d, ttl: 30s}", size), 10*time.Second, 10*time.Second)
	ctx := context.WithValue(context.Background(), onPath{}, true)
	check := func(svc *service.Service, user string) service.Decision {
		t.Helper()
		d, err := svc.Check(ctx, service.Request{Descriptors: D{"org": "acme", "user": user}})
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		return d
	}
	// One replica: its first call waits for its first lease; the next
	// calls are paid from leases, the next one taken in the background.
	rg := w.regions[0]
	if d := check(rg.replicas[0], "first"); !d.Allowed {
		t.Fatalf("first call: %s", describe(d))
	}
	path, all := rg.calls[0].onPath.Load(), rg.calls[0].all.Load()
	const calls = 3 * size
	for range calls {
		if d := check(rg.replicas[0], "first"); !d.Allowed {
			t.Fatalf("a call paid from leases: %s", describe(d))
		}
	}
	if got := rg.calls[0].onPath.Load() - path; got != 0 {
		t.Errorf("%d store calls on the admitted calls' path, want 0 (paid from leases)", got)
	}
	if got := rg.calls[0].all.Load() - all; got > calls/size+2 {
		t.Errorf("%d store calls for %d admitted calls, want about one per lease (%d)", got, calls, calls/size)
	}
	admitted := int64(1 + calls)

	// Every replica spends the budget.
	var tl answers
	var wg sync.WaitGroup
	for _, rg := range w.regions {
		for i, svc := range rg.replicas {
			for g := range 3 {
				wg.Go(func() {
					user := fmt.Sprintf("%s-%d-%d", rg.name, i, g)
					for {
						d, err := svc.Check(ctx, service.Request{Descriptors: D{"org": "acme", "user": user}})
						if err != nil {
							t.Errorf("Check: %v", err)
							return
						}
						tl.record(d)
						if !d.Allowed {
							return
						}
					}
				})
			}
		}
	}
	wg.Wait()
	admitted += tl.admitted.Load()
	// At most maxLiveLeases (2) leases with cost left per replica.
	outstanding := int64(2 * size * 2 * len(w.regions))
	if admitted > limit+1 || admitted < limit-outstanding { // +1: the bucket may refill one
		t.Errorf("the regions admitted %d, want between %d (the limit less the leases outstanding) and %d", admitted, limit-outstanding, limit)
	}
	if used := w.used("acme"); used > limit || used < admitted-1 {
		t.Errorf("the home store counts %d used with %d admitted, want between them and the limit %d", used, admitted, limit)
	}
	if tl.unavailable.Load() != 0 {
		t.Errorf("%d answers unavailable with every link up", tl.unavailable.Load())
	}
}

// TestRegionCutOffDecidesFromItsLease: a region cut off from home goes on
// admitting from the leases it holds, then answers the fail-closed global
// limit unavailable; the other region is not affected; once the link
// returns the region decides again.
func TestRegionCutOffDecidesFromItsLease(t *testing.T) {
	t.Parallel()
	const limit, size = 1000, 50
	w := newWorld(t, 1, limit, fmt.Sprintf("{size: %d, ttl: 30s}", size), time.Second, 10*time.Second)
	ctx := context.WithValue(context.Background(), onPath{}, true)
	cut, other := w.regions[0], w.regions[1]
	check := func(svc *service.Service, user string) service.Decision {
		t.Helper()
		d, err := svc.Check(ctx, service.Request{Descriptors: D{"org": "acme", "user": user}})
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		return d
	}
	var admitted atomic.Int64
	// Held once a call is admitted with no store call on its path (a
	// take that times out on a loaded machine leaves calls to the store
	// for a while).
	testkit.Eventually(t, 30*time.Second, "the region holding a lease", func() bool {
		before := cut.calls[0].onPath.Load()
		ok := check(cut.replicas[0], "u").Allowed
		if ok {
			admitted.Add(1)
		}
		return ok && cut.calls[0].onPath.Load() == before
	})

	cut.relay.Hold(tcprelay.Replies)
	cut.relay.Reset()
	fromLease := 0
	testkit.Eventually(t, 60*time.Second, "the cut region answering the global limit unavailable", func() bool {
		d := check(cut.replicas[0], "u")
		if d.Allowed {
			fromLease++
			admitted.Add(1)
		}
		return d.Unavailable
	})
	if fromLease < 1 || fromLease > 2*size {
		t.Errorf("the cut region admitted %d calls after the cut, want at least one and at most its two leases (%d)", fromLease, 2*size)
	}
	for range 5 {
		if d := check(other.replicas[0], "v"); !d.Allowed {
			t.Fatalf("the other region while the first is cut: %s, want admitted", describe(d))
		}
		admitted.Add(1)
	}
	if used := w.used("acme"); used < admitted.Load()-1 || used > limit {
		t.Errorf("home counts %d with %d admitted: want at least every admitted call (less one the bucket may refill), never past %d", used, admitted.Load(), limit)
	}
	cut.relay.Release(tcprelay.Replies)
	testkit.Eventually(t, 30*time.Second, "the cut region deciding again", func() bool {
		return check(cut.replicas[0], "u").Allowed
	})
}

// BenchmarkRegionAdmittedCall times admitted calls of the global limit
// alone by a replica in a region whose home is over the slow link,
// reporting their p50 and p99 (p50-ms, p99-ms): without a lease every call is a
// round trip; with one (a lease of 100,000, enough for the calls made
// while the next is taken) calls are paid in process.
func BenchmarkRegionAdmittedCall(b *testing.B) {
	for _, v := range []struct{ name, lease string }{{"no-lease", ""}, {"lease", "{size: 100000, ttl: 1m}"}} {
		b.Run(v.name, func(b *testing.B) {
			w := newWorld(b, 1, tokenlimit.MaxQuota, v.lease, 5*time.Second)
			svc := w.regions[0].replicas[0]
			// The global limit alone: what the call takes is what it adds.
			req := service.Request{Descriptors: D{"org": "acme"}}
			if d, err := svc.Check(context.Background(), req); err != nil || !d.Allowed { // the first lease
				b.Fatalf("Check: %s, %v", describe(d), err)
			}
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				d, err := svc.Check(context.Background(), req)
				took := time.Since(start)
				if err != nil || !d.Allowed {
					b.Fatalf("Check: %s, %v", describe(d), err)
				}
				lat = append(lat, took)
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e6, "p99-ms")
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e6, "p50-ms")
		})
	}
}
