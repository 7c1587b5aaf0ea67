package service_test

// Regression tests for bugs found while testing the service: multi-limit
// checks on Redis Cluster, callers that give up, shadow limits charged one by
// one, store validation errors as ErrInvalidRequest, and health recovering
// without traffic.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/goredisclient"
	"github.com/tokenlimit/tokenlimit/service"
)

// Each shadow limit must be a dry run of enforcing it: whether one shadow
// limit is over its budget must not decide whether another is charged.
func TestShadowLimitsAreChargedIndependently(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: enforced
    key: [user]
    algorithm: fixed_window
    limit: 100/h
  - name: shadow-tight
    key: [user]
    algorithm: fixed_window
    limit: 1/h
    shadow: true
  - name: shadow-loose
    key: [user]
    algorithm: fixed_window
    limit: 10/h
    shadow: true
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, yml, t0)
		for range 3 {
			e.check(D{"user": "u"}, 1)
		}
		// Three requests were admitted: shadow-loose saw all three.
		if got := e.remaining(D{"user": "u"}, "shadow-loose"); got != 7 {
			t.Errorf("shadow-loose remaining after 3 admitted requests = %d, want 7 (shadow-tight's denial stopped its charge)", got)
		}
	})
}

// A request the service cannot check because of its own content must be
// reported as ErrInvalidRequest (a 400), not as an internal error.
func TestStoreValidationErrorsAreInvalidRequests(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: per-user
    key: [user, tenant]
    algorithm: fixed_window
    limit: 100/h
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, yml, t0)
		ctx := context.Background()
		// Two values within the 256-byte cap whose escaped key exceeds
		// tokenlimit.MaxKeyLength (1024).
		long := strings.Repeat("|", 256)
		_, err := e.svc.Check(ctx, service.Request{Descriptors: D{"user": long, "tenant": long}})
		if err != nil && !errors.Is(err, service.ErrInvalidRequest) {
			t.Errorf("descriptors within the cap, key too long: %v; want a decision, or ErrInvalidRequest", err)
		}
		// Two requests selecting one budget.
		r := service.Request{Descriptors: D{"user": "u", "tenant": "t"}}
		_, err = e.svc.Check(ctx, r, r)
		if err != nil && !errors.Is(err, service.ErrInvalidRequest) {
			t.Errorf("two requests on one budget: %v; want a decision, or ErrInvalidRequest", err)
		}
		// More than 32 budgets in one call.
		var many []service.Request
		for i := range 33 {
			many = append(many, service.Request{Descriptors: D{"user": strings.Repeat("u", i+1), "tenant": "t"}})
		}
		_, err = e.svc.Check(ctx, many...)
		if err != nil && !errors.Is(err, service.ErrInvalidRequest) {
			t.Errorf("33 budgets in one check: %v; want a decision, or ErrInvalidRequest", err)
		}
	})
}

// A caller giving up (its context cancelled: a client disconnecting) says
// nothing about Redis: it must not count as a store failure, open the
// breaker and put every other caller on the failure modes.
func TestCallersThatGiveUpDoNotOpenTheBreaker(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: closed
    key: [user]
    algorithm: fixed_window
    limit: 100/h
    failure_mode: closed
`
	e := newEnv(t, "redis", yml, t0, func(o *service.Options) { o.BreakerThreshold = 3 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 3 {
		e.svc.Check(ctx, service.Request{Descriptors: D{"user": "gone"}})
	}
	if h := e.svc.Health(); h.Degraded {
		t.Errorf("Health() after 3 cancelled callers = %+v, want not degraded: Redis is fine", h)
	}
	d := e.check(D{"user": "other"}, 1)
	if !d.Allowed || d.Unavailable {
		t.Errorf("a healthy caller after 3 cancelled ones: %s, want allowed by Redis", describe(d))
	}
	if got := metric(t, e.reg, "tokenlimit_store_errors_total"); got != 0 {
		t.Errorf("store errors = %v, want 0", got)
	}
}

// Health must not stay degraded forever once the store is back: with no
// traffic nothing ever tries the store again (a readiness probe that takes
// the replica out of rotation while degraded would keep it out for good).
func TestHealthRecoversWithoutTraffic(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: closed
    key: [user]
    algorithm: fixed_window
    limit: 100/h
    failure_mode: closed
`
	e := newEnv(t, "redis", yml, t0, func(o *service.Options) {
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

// On Redis Cluster, the limits one request selects must be checked in one
// atomic script: their keys need a shared hash tag.
func TestMultiLimitCheckOnRedisCluster(t *testing.T) {
	t.Parallel()
	for _, tagged := range []bool{false, true} {
		t.Run(fmt.Sprintf("hash_tag=%v", tagged), func(t *testing.T) { multiLimitOnCluster(t, tagged) })
	}
}

// multiLimitOnCluster: without hash_tag the two budgets lie in two slots and
// are decided slot by slot (two scripts); with hash_tag: user they share the
// user's slot and are decided in one atomic script.
func multiLimitOnCluster(t *testing.T, tagged bool) {
	yml := `
limits:
  - name: per-user
    key: [user]
    algorithm: token_bucket
    capacity: 10
    refill: 1/s
    failure_mode: closed
  - name: per-model
    key: [user, model]
    algorithm: fixed_window
    limit: 100/h
    failure_mode: closed
`
	if tagged {
		yml = "hash_tag: user\n" + yml
	}
	cluster := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { c.Close() })
	st, err := redisstore.New(goredisclient.New(c), redisstore.Options{Prefix: "cl:", CallerTime: true, TTLPadding: time.Hour, Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, "memory", yml, t0, func(o *service.Options) {
		o.Store, o.StoreTimeout = st, 10*time.Second
	})
	e.check(D{"user": "alice", "model": "gpt-4o"}, 1) // loads the scripts
	for i := range cluster.Addrs() {
		if _, err := cluster.Node(i).Do("CONFIG", "RESETSTAT"); err != nil {
			t.Fatal(err)
		}
	}
	d := e.check(D{"user": "alice", "model": "gpt-4o"}, 1)
	if !d.Allowed || d.Unavailable {
		t.Errorf("a request selecting 2 limits on Redis Cluster: %s; want allowed by Redis (store errors: %v)",
			describe(d), metric(t, e.reg, "tokenlimit_store_errors_total"))
	}
	calls := 0
	for i := range cluster.Addrs() {
		info, err := cluster.Node(i).Do("INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{"cmdstat_fcall:calls=", "cmdstat_evalsha:calls="} {
			if _, rest, ok := strings.Cut(info, cmd); ok {
				var n int
				fmt.Sscanf(rest, "%d", &n)
				calls += n
			}
		}
	}
	if want := map[bool]int{false: 2, true: 1}[tagged]; calls != want {
		t.Errorf("FCALL and EVALSHA calls across the cluster: %d, want %d", calls, want)
	}
}

// While the store is down, a fail-open concurrency limit counts requests in
// flight locally, and settling them releases their slots there: fail-open
// must not turn into fail-closed for the length of a lease. Token estimates
// are refunded locally too.
func TestFailOpenReservationsSettleOnTheLocalBudget(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: in-flight
    key: [api_key]
    algorithm: concurrency
    limit: 3
  - name: tokens
    key: [api_key]
    algorithm: token_bucket
    capacity: 100
    refill: 1/h
`
	e := newEnv(t, "redis", yml, t0, func(o *service.Options) {
		o.BreakerThreshold, o.BreakerCooldown, o.StoreTimeout = 1, time.Hour, 50*time.Millisecond
	})
	e.redis.Stop()
	ctx := context.Background()
	req := service.Request{Descriptors: map[string]string{"api_key": "k"}, Cost: 30}
	for i := range 6 {
		d, err := e.svc.Reserve(ctx, "", req)
		if err != nil || !d.Allowed || !d.Reserved {
			t.Fatalf("request %d with Redis down: %s, err %v; want admitted on the local budget", i, describe(d), err)
		}
		for _, o := range d.Limits {
			if !o.FailOpen {
				t.Fatalf("request %d: %s decided on the store, want fail-open", i, o.Name)
			}
		}
		if st, err := e.svc.Settle(ctx, d.ReservationID, 10); err != nil || st != tokenlimit.Settled { // 10 of the 30 reserved
			t.Fatalf("settle %d: %s, %v", i, st, err)
		}
	}
	// 6 × 10 tokens charged locally: 40 of 100 left, all 3 slots free.
	d, err := e.svc.Reserve(ctx, "", service.Request{Descriptors: map[string]string{"api_key": "k"}, Cost: 40})
	if err != nil || !d.Allowed {
		t.Fatalf("after 6 settled requests: %s, %v; want 40 tokens and a slot left", describe(d), err)
	}
	if o := mustOutcome(t, d, "tokens"); o.Remaining != 0 {
		t.Errorf("tokens left %d, want 0 (100 - 6×10 - 40)", o.Remaining)
	}
}

// A reserve that selects no limit is admitted, as a check would be, and
// records nothing: settling it finds no reservation.
func TestReserveOfNoLimitRecordsNothing(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: tokens
    key: [user]
    algorithm: token_bucket
    capacity: 1000
    refill: 1/s
`
	e := newEnv(t, "memory", yml, t0)
	ctx := context.Background()
	nothing := service.Request{Descriptors: D{"route": "/selects-nothing"}}
	d, err := e.svc.Reserve(ctx, "no-limit", nothing)
	if err != nil || !d.Allowed || d.Reserved {
		t.Fatalf("a reserve selecting no limit: %v %s, want admitted with nothing reserved", err, describe(d))
	}
	if st, err := e.svc.Settle(ctx, "no-limit", 0); err != nil || st != tokenlimit.UnknownReservation {
		t.Errorf("settling it: %s, %v; want unknown", st, err)
	}
}
