package service_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/tcprelay"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/goredisclient"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
	"github.com/tokenlimit/tokenlimit/service"
)

// TestRedisOutage is the service's fault test, for real: a service on a real
// redis-server under load from several goroutines; the server stops; each
// limit follows its failure mode (fail-open: exactly its local share of
// what Redis last said was left, then denied; fail-closed: unavailable) and
// health says degraded; the server comes back on the same port, the service
// recovers by itself and writes back what it admitted locally, with no
// goroutine left behind.
//
// Time: the service's clock is fake and frozen during the outage, so the
// local fail-open budgets never refill and the breaker stays open until the
// test moves the clock past the cooldown. Only the store timeout and the
// deadlines of polling conditions are wall-clock; the store timeout is long
// (2 s), as a loaded machine must not make Redis look down before the test
// stops it (a stopped server refuses connections at once).
func TestRedisOutage(t *testing.T) {
	// Not parallel: the goroutine count is process-wide.
	for _, client := range []string{"go-redis", "rueidis"} {
		t.Run(client, func(t *testing.T) { testRedisOutage(t, client) })
	}
}

const outageConfig = `
limits:
  - name: open-limit
    match: {route: /open}
    key: [user]
    algorithm: token_bucket
    capacity: 10
    refill: 10/h
    fail_open_share: 0.5
  - name: closed-limit
    match: {route: /closed}
    key: [user]
    algorithm: sliding_log
    limit: 1000/h
    failure_mode: closed
`

const (
	outageUsers      = 4
	outageGoroutines = 8
	localShare       = 5 // capacity 10 × fail_open_share 0.5: the local budget's capacity
	breakerCooldown  = time.Second
)

// tally counts a user's decisions by how they were made.
type tally struct {
	redisAllowed, redisDenied       int   // decided by Redis
	redisLeast                      int64 // the least Remaining Redis answered
	failOpenAllowed, failOpenDenied int   // decided locally
	unavailable                     int   // fail-closed
}

func testRedisOutage(t *testing.T, client string) {
	before := runtime.NumGoroutine()
	srv := redistest.Start(t)
	withServer := runtime.NumGoroutine() // the server process's own waiter
	scripter, closeClient := dialScripter(t, client, srv.Addr())
	st, err := redisstore.New(scripter, redisstore.Options{Prefix: "outage:", CallerTime: true, TTLPadding: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	clk := testkit.NewClock(t0)
	reg := prometheus.NewRegistry()
	svc, err := service.New(testkit.ParseConfig(t, outageConfig), service.Options{
		Store: st, Clock: clk.Now, Registerer: reg, Logger: testkit.Quiet(),
		StoreTimeout: 2 * time.Second, BreakerThreshold: 3, BreakerCooldown: breakerCooldown,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	var (
		mu       sync.Mutex
		tallies  [outageUsers]map[string]*tally // per user, per route
		problems []string
	)
	for u := range tallies {
		tallies[u] = map[string]*tally{"/open": {redisLeast: 10}, "/closed": {redisLeast: 1000}}
	}
	record := func(user int, route string, d service.Decision) {
		mu.Lock()
		defer mu.Unlock()
		tl := tallies[user][route]
		bad := func(format string, args ...any) {
			if len(problems) < 20 {
				problems = append(problems, fmt.Sprintf("user %d %s: ", user, route)+fmt.Sprintf(format, args...)+" "+describe(d))
			}
		}
		if len(d.Limits) != 1 {
			bad("want exactly one limit")
			return
		}
		o := d.Limits[0]
		switch {
		case d.Unavailable:
			tl.unavailable++
			if route != "/closed" || d.Allowed || o.FailOpen {
				bad("unavailable, want only fail-closed requests to be")
			}
		case o.FailOpen:
			if route != "/open" || o.Limit != localShare {
				bad("fail-open, want only fail-open requests to be, on a local budget of %d", localShare)
			}
			if d.Allowed {
				tl.failOpenAllowed++
			} else {
				tl.failOpenDenied++
			}
		default:
			if want := map[string]int64{"/open": 10, "/closed": 1000}[route]; o.Limit != want {
				bad("decided by Redis with limit %d, want %d", o.Limit, want)
			}
			if d.Allowed {
				tl.redisAllowed++
			} else {
				tl.redisDenied++
			}
			tl.redisLeast = min(tl.redisLeast, o.Remaining)
		}
	}
	// With the clock frozen every answer is at the same time, so the one the
	// service keeps for a budget is the one with the least left: the local
	// budget starts at half of that (of its capacity of 5 for 10).
	localLeft := func(tl tally) int { return int(tl.redisLeast) / 2 }
	snapshot := func(fn func(user int, route string, tl tally) bool) bool {
		mu.Lock()
		defer mu.Unlock()
		for u := range tallies {
			for route, tl := range tallies[u] {
				if !fn(u, route, *tl) {
					return false
				}
			}
		}
		return true
	}

	// Load: every goroutine cycles through the users and both routes until
	// told to stop.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	loadErrs := make(chan error, outageGoroutines)
	for g := range outageGoroutines {
		wg.Go(func() {
			for i := g; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				user, route := i%outageUsers, [2]string{"/open", "/closed"}[(i/outageUsers)%2]
				d, err := svc.Check(ctx, service.Request{Descriptors: D{"user": "u" + strconv.Itoa(user), "route": route}})
				if err != nil {
					loadErrs <- err
					return
				}
				record(user, route, d)
			}
		})
	}
	stopLoad := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	defer stopLoad()

	// Phase 1: Redis decides.
	testkit.Eventually(t, 10*time.Second, "every user decided by Redis on both routes", func() bool {
		return snapshot(func(_ int, _ string, tl tally) bool { return tl.redisAllowed+tl.redisDenied >= 3 })
	})
	if h := svc.Health(); h.Degraded || h.Breaker != "closed" {
		t.Fatalf("Health() with Redis up = %+v", h)
	}

	// Phase 2: Redis stops under load.
	srv.Stop()
	testkit.Eventually(t, 10*time.Second, "health degraded", func() bool { return svc.Health().Degraded })
	testkit.Eventually(t, 10*time.Second, "every user decided by the failure modes", func() bool {
		return snapshot(func(_ int, route string, tl tally) bool {
			if route == "/open" {
				return tl.failOpenAllowed+tl.failOpenDenied >= localLeft(tl)+3
			}
			return tl.unavailable >= 3
		})
	})
	stopLoad()
	select {
	case err := <-loadErrs:
		t.Fatalf("Check returned an error during the outage: %v (failures are decisions, not errors)", err)
	default:
	}
	for _, p := range problems {
		t.Error(p)
	}
	// Exactly the local share of what each fail-open budget had left was
	// admitted, then fail-open denials; every fail-closed request was
	// unavailable.
	var failOpenAllowed float64
	snapshot(func(u int, route string, tl tally) bool {
		if route == "/open" && (tl.failOpenAllowed != localLeft(tl) || tl.failOpenDenied < 3) {
			t.Errorf("user %d: %d fail-open allowed and %d denied, Redis left %d; want exactly %d allowed, then denied", u, tl.failOpenAllowed, tl.failOpenDenied, tl.redisLeast, localLeft(tl))
		}
		failOpenAllowed += float64(tl.failOpenAllowed)
		return true
	})
	d, err := svc.Check(ctx, service.Request{Descriptors: D{"user": "u0", "route": "/open"}})
	if o := d.Limits[0]; err != nil || d.Allowed || d.Unavailable || !o.FailOpen || o.Remaining != 0 || o.RetryAfter <= 0 {
		t.Errorf("fail-open request after the local share: %s, %v; want denied, fail-open, with a retry-after", describe(d), err)
	}
	d, err = svc.Check(ctx, service.Request{Descriptors: D{"user": "u-new", "route": "/closed"}})
	if err != nil || d.Allowed || !d.Unavailable || d.Limits[0].Name != "closed-limit" {
		t.Errorf("fail-closed request: %s, %v; want unavailable", describe(d), err)
	}
	if h := svc.Health(); !h.Degraded || h.Breaker != "open" || h.Store != "redis" {
		t.Errorf("Health() during the outage = %+v, want degraded with the breaker open", h)
	}
	var unavailable float64
	snapshot(func(_ int, _ string, tl tally) bool { unavailable += float64(tl.unavailable); return true })
	for _, m := range []struct {
		name    string
		labels  []string
		want    float64
		atLeast bool
	}{
		{"tokenlimit_decisions_total", []string{"limit", "open-limit", "result", "fail_open_allowed"}, failOpenAllowed, false},
		{"tokenlimit_decisions_total", []string{"limit", "closed-limit", "result", "fail_closed"}, unavailable + 1, false},
		{"tokenlimit_decisions_total", []string{"limit", "open-limit", "result", "fail_open_denied"}, outageUsers*3 + 1, true},
		{"tokenlimit_store_errors_total", []string{"store", "default"}, 3, true},
		{"tokenlimit_breaker_state", []string{"store", "default"}, 2, false},
	} {
		got := testkit.Metric(t, reg, m.name, m.labels...)
		if got != m.want && !(m.atLeast && got > m.want) {
			t.Errorf("%s%v = %v, want %v (at least: %v)", m.name, m.labels, got, m.want, m.atLeast)
		}
	}
	// The breaker spares the dead store: with the clock frozen it stays open
	// and no call reaches the store (no new store errors).
	errorsBefore := testkit.Metric(t, reg, "tokenlimit_store_errors_total", "store", "default")
	for range 20 {
		svc.Check(ctx, service.Request{Descriptors: D{"user": "u1", "route": "/open"}})
	}
	if got := testkit.Metric(t, reg, "tokenlimit_store_errors_total", "store", "default"); got != errorsBefore {
		t.Errorf("store errors went from %v to %v while the breaker was open", errorsBefore, got)
	}

	// Phase 3: Redis comes back (empty) on the same port; once the cooldown
	// has passed the breaker lets a trial through and closes.
	srv.Restart()
	d, err = svc.Check(ctx, service.Request{Descriptors: D{"user": "u2", "route": "/closed"}})
	if err != nil || !d.Unavailable || !svc.Health().Degraded {
		t.Errorf("Redis back but the cooldown not over: %s, %v, %+v; want still unavailable and degraded", describe(d), err, svc.Health())
	}
	clk.Advance(breakerCooldown - time.Millisecond)
	if d, err := svc.Check(ctx, service.Request{Descriptors: D{"user": "u2", "route": "/closed"}}); err != nil || !d.Unavailable {
		t.Errorf("a millisecond before the cooldown ends: %s, %v; want still unavailable", describe(d), err)
	}
	clk.Advance(time.Millisecond)
	// The first call after the cooldown is the breaker's trial; should it
	// fail (a client still reconnecting), the breaker reopens for another
	// cooldown, so the clock moves on between tries.
	testkit.Eventually(t, 10*time.Second, "recovery after the cooldown", func() bool {
		d, err := svc.Check(ctx, service.Request{Descriptors: D{"user": "probe", "route": "/closed"}})
		if err == nil && !d.Unavailable && !svc.Health().Degraded {
			return true
		}
		clk.Advance(breakerCooldown)
		return false
	})
	if h := svc.Health(); h.Degraded || h.Breaker != "closed" {
		t.Errorf("Health() after recovery = %+v", h)
	}
	if got := testkit.Metric(t, reg, "tokenlimit_breaker_state", "store", "default"); got != 0 {
		t.Errorf("breaker state after recovery = %v, want 0", got)
	}
	// For the recovery period (FailOpenRecovery, 10 s by default) the
	// fail-open budgets keep to their spent local shares, although the new
	// server (empty) has room: each request is denied locally, and the
	// first one writes back what was admitted locally. A call on a
	// connection that died with the old server may still fail (a write-back
	// is never retried within a call: it could charge twice), so the test
	// waits for each user's write-back.
	var allowedLocally [outageUsers]int
	snapshot(func(u int, route string, tl tally) bool {
		if route == "/open" {
			allowedLocally[u] = tl.failOpenAllowed
		}
		return true
	})
	var written int
	for u := range outageUsers {
		written += allowedLocally[u]
		testkit.Eventually(t, 10*time.Second, fmt.Sprintf("user %d written back", u), func() bool {
			d, err := svc.Check(ctx, service.Request{Descriptors: D{"user": "u" + strconv.Itoa(u), "route": "/open"}})
			if err != nil || len(d.Limits) != 1 || d.Allowed || !d.Limits[0].FailOpen {
				t.Fatalf("check during the recovery: %s, %v; want denied by the spent local budget", describe(d), err)
			}
			return testkit.Metric(t, reg, "tokenlimit_fail_open_writeback_total", "limit", "open-limit", "result", "ok") >= float64(written)
		})
	}
	// Then Redis decides alone, counting what was written back.
	clk.Advance(10 * time.Second)
	for u := range outageUsers {
		d, err := svc.Check(ctx, service.Request{Descriptors: D{"user": "u" + strconv.Itoa(u), "route": "/open"}})
		if err != nil || len(d.Limits) != 1 {
			t.Fatalf("check after recovery: %s, %v", describe(d), err)
		}
		o := d.Limits[0]
		// A write-back that failed is tried again, so it may be charged
		// twice (denying early), never not at all.
		written := int64(10 - 1 - allowedLocally[u]) // this check's 1 and the local ones
		if o.Limit != 10 || !o.Allowed || o.Remaining > written ||
			(o.Remaining != written && testkit.Metric(t, reg, "tokenlimit_fail_open_writeback_total", "limit", "open-limit", "result", "failed") == 0) {
			t.Errorf("user %d after recovery: %+v; want allowed by Redis with %d of 10 left (the %d admitted locally written back)", u, o, written, allowedLocally[u])
		}
	}
	// Every local admission was written back.
	if ok := testkit.Metric(t, reg, "tokenlimit_fail_open_writeback_total", "limit", "open-limit", "result", "ok"); ok != failOpenAllowed {
		t.Errorf("written back %v, want %v", ok, failOpenAllowed)
	}
	if n, err := srv.Do("DBSIZE"); err != nil || n == "0" {
		t.Errorf("DBSIZE after recovery = %q, %v; want the budgets in Redis", n, err)
	}
	d, err = svc.Check(ctx, service.Request{Descriptors: D{"user": "u1", "route": "/closed"}})
	if err != nil || !d.Allowed || d.Unavailable || d.Limits[0].Limit != 1000 {
		t.Errorf("fail-closed limit after recovery: %s, %v; want allowed by Redis", describe(d), err)
	}

	// No goroutine left: the service starts none of its own; the client's
	// end when it is closed (while the server still runs, so that no
	// connection ends by itself), and the server's when it stops.
	closeClient()
	testkit.Eventually(t, 10*time.Second, fmt.Sprintf("goroutines back to %d once the client is closed", withServer), func() bool {
		return runtime.NumGoroutine() <= withServer
	})
	srv.Stop()
	testkit.Eventually(t, 10*time.Second, fmt.Sprintf("goroutines back to %d once the server stopped", before), func() bool {
		return runtime.NumGoroutine() <= before
	})
}

// dialScripter connects one of the two Redis clients to addr, with the
// clients' defaults (retries, pools) as a service would use them.
func dialScripter(t *testing.T, client, addr string) (redisstore.Scripter, func()) {
	t.Helper()
	switch client {
	case "go-redis":
		c := redis.NewClient(&redis.Options{Addr: addr})
		var once sync.Once
		closeFn := func() { once.Do(func() { c.Close() }) }
		t.Cleanup(closeFn)
		return goredisclient.New(c), closeFn
	case "rueidis":
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		closeFn := func() { once.Do(c.Close) }
		t.Cleanup(closeFn)
		return rueidisclient.New(c), closeFn
	}
	t.Fatalf("unknown client %q", client)
	return nil, nil
}

// failClosedConfig is one fail-closed limit per user that no test exhausts.
const failClosedConfig = `
limits:
  - name: closed
    key: [user]
    algorithm: fixed_window
    limit: 100/h
    failure_mode: closed
`

// A caller giving up (its context cancelled: a client disconnecting) says
// nothing about Redis: it must not count as a store failure, open the
// breaker and put every other caller on the failure modes.
func TestCallersThatGiveUpDoNotOpenTheBreaker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "redis", failClosedConfig, t0, func(o *service.Options) { o.BreakerThreshold = 3 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 3 {
		e.svc.Check(ctx, service.Request{Descriptors: D{"user": "gone"}})
	}
	if h := e.svc.Health(); h.Degraded {
		t.Errorf("Health() after 3 cancelled callers = %+v, want not degraded: Redis is fine", h)
	}
	if got := e.remaining(D{"user": "gone"}, "closed"); got != 100 {
		t.Errorf("left after 3 cancelled callers: %d, want 100: a caller that gave up is not charged", got)
	}
	d := e.check(D{"user": "other"}, 1)
	if !d.Allowed || d.Unavailable {
		t.Errorf("a healthy caller after 3 cancelled ones: %s, want allowed by Redis", describe(d))
	}
	if got := testkit.Metric(t, e.reg, "tokenlimit_store_errors_total", "store", "default"); got != 0 {
		t.Errorf("store errors = %v, want 0", got)
	}
}

// Health must not stay degraded forever once the store is back: with no
// traffic nothing ever tries the store again (a readiness probe that takes
// the replica out of rotation while degraded would keep it out for good).
func TestHealthRecoversWithoutTraffic(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "redis", failClosedConfig, t0, func(o *service.Options) {
		// A generous timeout: on a loaded machine the probe's first call
		// on a fresh connection can take longer than a production timeout.
		o.BreakerThreshold, o.BreakerCooldown, o.StoreTimeout = 1, time.Second, 2*time.Second
	})
	e.redis.Stop()
	if d := e.check(D{"user": "u"}, 1); !d.Unavailable || !e.svc.Health().Degraded {
		t.Fatalf("Redis down: %s, %+v", describe(d), e.svc.Health())
	}
	e.redis.Restart()
	// Health probes the store itself once per cooldown, as a readiness
	// probe calling it every few seconds would see. The first probe may
	// still meet the connection that died with the old server; a few
	// cooldowns later, with no traffic, the service has recovered.
	const probes = 5
	var h service.Health
	for range probes {
		e.clock.Advance(time.Minute)
		if h = e.svc.Health(); !h.Degraded {
			return
		}
	}
	t.Errorf("Health() after %d probes a minute (fake) apart with Redis back and no traffic = %+v, want recovered", probes, h)
}

// A store call whose reply never comes (Redis reached but silent: a
// stalled server, a partition) comes back on both clients, the calls in
// flight and those queued behind them alike, and each limit follows its
// failure mode. (When is not asserted: rueidis ends a call at the store
// timeout, but go-redis retries a call that timed out on a new connection,
// whose handshake waits out go-redis' own timeouts, about 5 s, whatever
// the caller's deadline.)
func TestSilentRedisFailsOver(t *testing.T) {
	t.Parallel()
	for _, client := range []string{"go-redis", "rueidis"} {
		t.Run(client, func(t *testing.T) {
			t.Parallel()
			relay, err := tcprelay.Start(redistest.Start(t).Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { relay.Close() })
			scripter, _ := dialScripter(t, client, relay.Addr())
			st, err := redisstore.New(scripter, redisstore.Options{Prefix: "silent:", CallerTime: true, TTLPadding: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			svc, err := service.New(testkit.ParseConfig(t, silentConfig), service.Options{
				Store: st, Clock: testkit.NewClock(t0).Now, Logger: testkit.Quiet(),
				StoreTimeout: 200 * time.Millisecond, BreakerThreshold: 1000, // the breaker stays closed: every call is tried
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			check := func(user int) (service.Decision, error) {
				return svc.Check(ctx, service.Request{Descriptors: D{"user": strconv.Itoa(user)}})
			}
			// The first calls dial and load the functions: on a loaded
			// machine they may take longer than the timeout.
			testkit.Eventually(t, 30*time.Second, "a check decided by Redis", func() bool {
				d, err := check(0)
				return err == nil && d.Allowed && !d.Limits[0].FailOpen
			})
			relay.Hold(tcprelay.Replies)
			const callers = 8 // more than the store's calls in flight: some queue
			decisions, errs := make([]service.Decision, callers), make([]error, callers)
			var wg sync.WaitGroup
			for i := range callers {
				wg.Go(func() { decisions[i], errs[i] = check(i) })
			}
			wg.Wait()
			for i, d := range decisions {
				if errs[i] != nil || !d.Allowed || len(d.Limits) != 1 || !d.Limits[0].FailOpen {
					t.Errorf("caller %d with Redis silent: %s, err %v; want allowed on the local budget", i, describe(d), errs[i])
				}
			}
		})
	}
}

// silentConfig is one fail-open limit per user that no test exhausts.
const silentConfig = `
limits:
  - name: open
    key: [user]
    algorithm: fixed_window
    limit: 100/h
`
