package service_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"

	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
	"github.com/tokenlimit/tokenlimit/service"
)

const failoverConfig = `
limits:
  - name: open
    match: {route: /open}
    key: [user]
    algorithm: fixed_window
    limit: 3000/h
    fail_open_share: 0.5
  - name: closed
    match: {route: /closed}
    key: [user]
    algorithm: fixed_window
    limit: 3000/h
    failure_mode: closed
`

const (
	failoverLimit    = 3000
	failoverReplicas = 2 // service replicas, each with its own cluster client
	failoverWorkers  = 6 // goroutines per replica
)

// routeCount counts one route's decisions across the replicas.
type routeCount struct {
	allowed     atomic.Int64 // by Redis or by a local fail-open budget
	local       atomic.Int64 // allowed by a local fail-open budget after the kill
	redisDenied atomic.Int64 // denied by Redis after the failover
	failOpen    atomic.Int64 // decided locally
	unavailable atomic.Int64
}

// TestClusterFailoverOverAdmission measures what fail-open costs: a real
// Redis Cluster (3 masters, 3 replicas), two service replicas with their own
// cluster clients under load on one user's budgets, and the master of those
// budgets killed (SIGKILL) halfway through the window. While the replica
// takes over, the fail-open limit is decided on local budgets started from
// what Redis last said was left (halved: fail_open_share 0.5), written back
// once Redis answers, and kept to for the recovery period after that (so
// that the replica back first is not granted what the other admitted
// locally); the fail-closed limit answers unavailable. Once Redis denies
// again on both replicas, the test counts everything admitted in the
// window: the local budgets admitted together at most what Redis had left,
// the fail-open limit is over by at most 5% of the limit, and the
// fail-closed limit is not over at all. The breaker cooldown is the
// default (1 s).
//
// Time: the services' clock starts mid-hour and follows the wall clock, and
// the store decides at that clock (CallerTime), so the hour's window never
// ends during the test; nothing is timed, every wait is for a condition.
func TestClusterFailoverOverAdmission(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 6-node Redis Cluster and waits for a failover; runs without -short (scripts/test.sh)")
	}
	t.Parallel()
	cluster := redistest.StartReplicatedCluster(t, 3)
	user, node := userOnOneMaster(t, cluster)

	start := time.Now()
	clock := func() time.Time { return t0.Add(time.Since(start)) }
	var svcs [failoverReplicas]*service.Service
	var regs [failoverReplicas]*prometheus.Registry
	for i := range svcs {
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cluster.Addrs(), DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(client.Close)
		st, err := redisstore.New(rueidisclient.New(client), redisstore.Options{Cluster: true, CallerTime: true, TTLPadding: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		regs[i] = prometheus.NewRegistry()
		svcs[i], err = service.New(testkit.ParseConfig(t, failoverConfig), service.Options{
			Store: st, Clock: clock, Registerer: regs[i], Logger: testkit.Quiet(),
			// Long enough that a loaded machine does not make Redis look down
			// (every local decision starts the recovery period again).
			StoreTimeout: 2 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	counts := map[string]*routeCount{"/open": {}, "/closed": {}}
	var killed atomic.Bool
	stop := make(chan struct{})
	errs := make(chan error, failoverReplicas*failoverWorkers)
	var wg sync.WaitGroup
	for _, svc := range svcs {
		for w := range failoverWorkers {
			wg.Go(func() {
				for i := w; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					route := [2]string{"/open", "/closed"}[i%2]
					d, err := svc.Check(context.Background(), service.Request{Descriptors: D{"user": user, "route": route}})
					if err != nil || len(d.Limits) != 1 {
						errs <- fmt.Errorf("check %s: %s, %v", route, describe(d), err)
						return
					}
					c := counts[route]
					switch o := d.Limits[0]; {
					case d.Unavailable:
						c.unavailable.Add(1)
					case o.FailOpen:
						c.failOpen.Add(1)
					case !d.Allowed && killed.Load():
						c.redisDenied.Add(1)
					}
					if d.Allowed {
						c.allowed.Add(1)
						if d.Limits[0].FailOpen && killed.Load() {
							c.local.Add(1)
						}
					}
				}
			})
		}
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopLoad()
	waitLoad := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			select {
			case err := <-errs:
				t.Fatal(err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not reached within 60s (open %+v, closed %+v)", what, snapshotCount(counts["/open"]), snapshotCount(counts["/closed"]))
			}
			time.Sleep(time.Millisecond)
		}
	}

	// A third of the window is spent on Redis; then the master dies.
	waitLoad("a third of both budgets spent", func() bool {
		return counts["/open"].allowed.Load() >= failoverLimit/3 && counts["/closed"].allowed.Load() >= failoverLimit/3
	})
	for _, key := range []string{"rl:fw:{open|user=" + user + "}", "rl:fw:{closed|user=" + user + "}"} {
		if n, err := cluster.Node(node).Do("EXISTS", key); err != nil || n != "1" {
			t.Fatalf("EXISTS %s on master %d = %q, %v; want the budget there", key, node, n, err)
		}
	}
	// Redis has at most this much left of the open budget when it dies.
	leftAtKill := failoverLimit - counts["/open"].allowed.Load()
	// The replica gets every write the master acknowledged before it dies:
	// what asynchronous replication loses in a crash is a bound of its own
	// (docs/operations.md); this test measures what the replicas admit.
	if err := cluster.CatchUpReplica(node, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	killed.Store(true)
	cluster.Node(node).Kill()
	atKill := [2]int64{counts["/open"].allowed.Load(), counts["/closed"].allowed.Load()}
	if err := cluster.WaitFailover(node); err != nil {
		t.Fatal(err)
	}
	// Redis decides again, and has spent both budgets: every replica's
	// workers are denied by it again and again.
	waitLoad("Redis denying both routes again", func() bool {
		return counts["/open"].redisDenied.Load() >= 50 && counts["/closed"].redisDenied.Load() >= 50
	})
	stopLoad()

	open, closed := snapshotCount(counts["/open"]), snapshotCount(counts["/closed"])
	var written, failed float64
	for _, reg := range regs {
		written += testkit.Metric(t, reg, "tokenlimit_fail_open_writeback_total", "limit", "open", "result", "ok")
		failed += testkit.Metric(t, reg, "tokenlimit_fail_open_writeback_total", "limit", "open", "result", "failed")
	}
	overOpen, overClosed := open.allowed-failoverLimit, closed.allowed-failoverLimit
	t.Logf("over-admission after a master SIGKILL, 2 replicas, limit %d/h: fail-open (share 0.5) %+d (%.2f%% of the limit), fail-closed %+d; "+
		"admitted before the kill %d and %d; during the failover %d decided locally (%d allowed, Redis had at most %d left), %d unavailable; written back %v, failed %v",
		failoverLimit, overOpen, 100*float64(overOpen)/failoverLimit, overClosed, atKill[0], atKill[1], open.failOpen, open.local, leftAtKill, closed.unavailable, written, failed)
	if open.failOpen == 0 || closed.unavailable == 0 {
		t.Errorf("no request was decided by the failure modes (%d fail-open, %d unavailable): the outage was not seen", open.failOpen, closed.unavailable)
	}
	// The local budgets start from what Redis said was left, halved on
	// each replica: together at most what Redis had left (plus the requests
	// in flight when it died).
	if inFlight := int64(failoverReplicas * failoverWorkers); open.local > leftAtKill+inFlight {
		t.Errorf("local fail-open budgets admitted %d, Redis had at most %d left: want at most that (+%d in flight)", open.local, leftAtKill, inFlight)
	}
	// Past that, the recovery period keeps each replica to its local share
	// until both have written back: the target is 5% of the limit.
	if overOpen > failoverLimit*5/100 {
		t.Errorf("fail-open limit admitted %d, %d over the limit of %d: want at most 5%% of the limit (%d)", open.allowed, overOpen, failoverLimit, failoverLimit*5/100)
	}
	if overClosed > 0 {
		t.Errorf("fail-closed limit admitted %d, %d over the limit of %d: want none over", closed.allowed, overClosed, failoverLimit)
	}
}

// countSnapshot is a routeCount read once.
type countSnapshot struct{ allowed, local, redisDenied, failOpen, unavailable int64 }

func snapshotCount(c *routeCount) countSnapshot {
	return countSnapshot{c.allowed.Load(), c.local.Load(), c.redisDenied.Load(), c.failOpen.Load(), c.unavailable.Load()}
}

// userOnOneMaster returns a user whose two budgets (open and closed) live on
// the same master, and that master's index.
func userOnOneMaster(t *testing.T, c *redistest.Cluster) (string, int) {
	t.Helper()
	for i := range 100 {
		user := fmt.Sprintf("u%d", i)
		a, err := c.NodeOf("rl:fw:{open|user=" + user + "}")
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.NodeOf("rl:fw:{closed|user=" + user + "}")
		if err != nil {
			t.Fatal(err)
		}
		if a == b {
			return user, a
		}
	}
	t.Fatal("no user of 100 has both budgets on one master")
	return "", 0
}
