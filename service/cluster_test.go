package service_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/plane"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/goredisclient"
	"github.com/tokenlimit/tokenlimit/service"
)

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
	resetCommandStats(t, cluster)
	d := e.check(D{"user": "alice", "model": "gpt-4o"}, 1)
	if !d.Allowed || d.Unavailable {
		t.Errorf("a request selecting 2 limits on Redis Cluster: %s; want allowed by Redis (store errors: %v)",
			describe(d), testkit.Metric(t, e.reg, "tokenlimit_store_errors_total", "store", "default"))
	}
	if calls, want := scriptCalls(t, cluster), map[bool]int{false: 2, true: 1}[tagged]; calls != want {
		t.Errorf("FCALL and EVALSHA calls across the cluster: %d, want %d", calls, want)
	}
}

// TestPlaneCallOnRedisCluster: with hash_tag set, a call made with a plane
// key takes its team's tag (its own when it has no team) for every limit
// keyed by team or api_key, so the key's, its team's and the plan's
// limits are decided in one script call on Redis Cluster, whatever
// descriptor hash_tag names; a team's budget stays one budget for all its
// keys.
func TestPlaneCallOnRedisCluster(t *testing.T) {
	t.Parallel()
	yml := `
hash_tag: tenant
plans:
  pro: {daily: 1000}
limits:
  - {name: rpm, key: [api_key], algorithm: fixed_window, limit: 100/min, failure_mode: closed}
  - {name: team-model, key: [team, model], algorithm: token_bucket, capacity: 50, refill: 1/s, failure_mode: closed}
`
	cluster := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { c.Close() })
	st, err := redisstore.New(goredisclient.New(c), redisstore.Options{Prefix: "pl:", CallerTime: true, TTLPadding: time.Hour, Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	var svc *service.Service
	p, err := plane.Open(context.Background(), plane.NewMemoryStore(), plane.Options{
		KnownPlan: func(name string) bool { return svc.KnownPlan(name) }, Logger: testkit.Quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, testkit.Memory, yml, t0, func(o *service.Options) {
		o.Store, o.StoreTimeout, o.Plane = st, 10*time.Second, p
	})
	svc = e.svc
	ctx := context.Background()
	if _, err := p.CreateTeam(ctx, plane.Spec{Name: "acme", Plan: "pro", Limits: limitsJSON(`[
		{"name": "team-rpm", "algorithm": "fixed_window", "limit": "40/min", "failure_mode": "closed"}]`)}); err != nil {
		t.Fatal(err)
	}
	own := limitsJSON(`[{"name": "own", "algorithm": "fixed_window", "limit": "30/min", "failure_mode": "closed"}]`)
	_, one, err := p.CreateKey(ctx, plane.Spec{Name: "one", Team: "acme", Limits: own})
	if err != nil {
		t.Fatal(err)
	}
	_, two, err := p.CreateKey(ctx, plane.Spec{Name: "two", Team: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	_, solo, err := p.CreateKey(ctx, plane.Spec{Name: "solo", Plan: "pro", Limits: own})
	if err != nil {
		t.Fatal(err)
	}
	e.check(D{"api_key": one, "model": "m"}, 1) // loads the scripts
	for _, tc := range []struct {
		name, secret string
		limits       []string
	}{
		{"a team's key", one, []string{"rpm", "team-model", "plan-pro-daily", "team-rpm", "own"}},
		{"another key of the team", two, []string{"rpm", "team-model", "plan-pro-daily", "team-rpm"}},
		{"a key without a team", solo, []string{"rpm", "plan-pro-daily", "own"}},
	} {
		resetCommandStats(t, cluster)
		d := e.check(D{"api_key": tc.secret, "model": "m"}, 1)
		if !d.Allowed || d.Unavailable {
			t.Fatalf("%s: %s; want allowed by Redis (store errors: %v)", tc.name, describe(d),
				testkit.Metric(t, e.reg, "tokenlimit_store_errors_total"))
		}
		if got := names(d); !sameSet(got, tc.limits) {
			t.Fatalf("%s: limits %v, want %v", tc.name, got, tc.limits)
		}
		if calls := scriptCalls(t, cluster); calls != 1 {
			t.Errorf("%s: %d FCALL and EVALSHA calls across the cluster for one check of %d limits, want 1: %s",
				tc.name, calls, len(d.Limits), describe(d))
		}
	}
	// The team's budgets are one for all its keys: key one's loading
	// call, then its own and key two's.
	d := e.check(D{"api_key": two, "model": "m"}, 1)
	for name, want := range map[string]int64{"team-rpm": 40 - 4, "team-model": 50 - 4} {
		if o := mustOutcome(t, d, name); o.Remaining != want {
			t.Errorf("%s after four calls by the team's two keys: %d remaining, want %d", name, o.Remaining, want)
		}
	}
}

func resetCommandStats(t *testing.T, cluster *redistest.Cluster) {
	t.Helper()
	for i := range cluster.Addrs() {
		if _, err := cluster.Node(i).Do("CONFIG", "RESETSTAT"); err != nil {
			t.Fatal(err)
		}
	}
}

// scriptCalls returns the FCALL and EVALSHA calls the cluster's masters
// served since resetCommandStats.
func scriptCalls(t *testing.T, cluster *redistest.Cluster) int {
	t.Helper()
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
	return calls
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
