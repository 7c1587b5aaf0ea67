package service_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
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
	for i := range cluster.Addrs() {
		if _, err := cluster.Node(i).Do("CONFIG", "RESETSTAT"); err != nil {
			t.Fatal(err)
		}
	}
	d := e.check(D{"user": "alice", "model": "gpt-4o"}, 1)
	if !d.Allowed || d.Unavailable {
		t.Errorf("a request selecting 2 limits on Redis Cluster: %s; want allowed by Redis (store errors: %v)",
			describe(d), testkit.Metric(t, e.reg, "tokenlimit_store_errors_total"))
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
