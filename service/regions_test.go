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
)

// This file simulates regions on loopback: each region has a redis-server
// of its own for its own limits and replicas (services) in this process,
// and reaches the home store, where the global limit's one budget lives,
// through a relay of its own that adds linkDelay each way (a round trip of
// 2 × linkDelay), as a link between regions does.

// linkDelay is half a round trip between a region and the home store.
const linkDelay = 40 * time.Millisecond

// regionsConfig: a global limit per org in home, fail-closed, and a
// per-user bucket in each region's own store.
const regionsConfig = `
stores:
  home: {redis: "redis://127.0.0.1:1"}
limits:
  - {name: global, key: [org], algorithm: fixed_window, limit: %d/h, store: home, failure_mode: closed}
  - {name: per-user, key: [user], algorithm: token_bucket, capacity: 100000, refill: 100000/s}
`

// world is the home store and the regions.
type world struct {
	t       testing.TB
	home    *redistest.Server
	peek    tokenlimit.Store // the home store, reached directly
	regions []*region
	limit   int64
}

type region struct {
	name     string
	relay    *tcprelay.Relay // its link to home
	replicas []*service.Service
}

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
// deadline of that region's calls to the home store.
func newWorld(tb testing.TB, replicas int, limit int64, timeouts ...time.Duration) *world {
	tb.Helper()
	w := &world{t: tb, home: redistest.Start(tb), limit: limit}
	w.peek = homeStore(tb, w.home.Addr())
	cfg := testkit.ParseConfig(tb, fmt.Sprintf(regionsConfig, limit))
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
			svc, err := service.New(cfg, service.Options{
				Store:        testkit.RedisStore(tb, own.Addr(), testkit.Rueidis),
				Stores:       map[string]service.NamedStore{"home": {Store: homeStore(tb, relay.Addr()), Timeout: timeout}},
				StoreTimeout: 5 * time.Second, Logger: testkit.Quiet(),
			})
			if err != nil {
				tb.Fatal(err)
			}
			rg.replicas = append(rg.replicas, svc)
		}
		w.regions = append(w.regions, rg)
	}
	return w
}

// used reads what org's global budget has used, in the home store.
func (w *world) used(org string) int64 {
	w.t.Helper()
	results := make([]tokenlimit.Result, 1)
	item := tokenlimit.Item{Key: "global|org=" + org, Limit: tokenlimit.FixedWindowLimit(w.limit, time.Hour)}
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
	w := newWorld(t, 2, limit, 10*time.Second, 10*time.Second, 10*time.Second)
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
	if got := tl.admitted.Load(); got != limit {
		t.Errorf("the regions admitted %d, want exactly the global limit %d", got, limit)
	}
	if got := w.used("acme"); got != limit {
		t.Errorf("the home store counts %d, want %d", got, limit)
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
	w := newWorld(t, 1, limit, time.Second, 10*time.Second)
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
	if used := w.used("acme"); used < admitted.Load() || used > limit {
		t.Errorf("home counts %d with %d admitted: want at least every admitted call (a call cut off may have landed), never past %d", used, admitted.Load(), limit)
	}

	cut.relay.Release(tcprelay.Replies)
	testkit.Eventually(t, 20*time.Second, "the cut region deciding on home again", func() bool {
		return check(cut.replicas[0], D{"org": "acme", "user": "u"}).Allowed
	})
}

// BenchmarkRegionAdmittedCall times admitted calls of a replica in a
// region whose global limit lives in home over the slow link: the
// p99 added by the link is reported as p99-ms (no lease: every call a
// round trip).
func BenchmarkRegionAdmittedCall(b *testing.B) {
	w := newWorld(b, 1, tokenlimit.MaxQuota, 5*time.Second)
	svc := w.regions[0].replicas[0]
	req := service.Request{Descriptors: D{"org": "acme", "user": "u"}}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		d, err := svc.Check(context.Background(), req)
		took := time.Since(start)
		if err != nil || !d.Allowed {
			b.Fatalf("Check: %s, %v", describe(d), err)
		}
		lat = append(lat, took)
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
}
