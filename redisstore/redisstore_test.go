package redisstore_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/goredisclient"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
	"github.com/tokenlimit/tokenlimit/storekit"
	"github.com/tokenlimit/tokenlimit/storetest"
)

// callerTime is the mode the conformance suite drives: the suite's fake
// clock decides, and keys are padded so that the real clock, which runs
// behind or ahead of the fake one, never expires them early.
func callerTime(prefix string) redisstore.Options {
	return redisstore.Options{Prefix: prefix, CallerTime: true, TTLPadding: time.Hour}
}

var prefixes atomic.Int64

// newPrefix returns a key prefix no other test of this process uses, so
// tests can share one server.
func newPrefix() string {
	return fmt.Sprintf("t%d:", prefixes.Add(1))
}

func goRedisClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

func rueidisClient(t testing.TB, addrs ...string) rueidis.Client {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatalf("rueidis: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func newStore(t testing.TB, s redisstore.Scripter, opts redisstore.Options) *redisstore.Store {
	st, err := redisstore.New(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// standaloneEnv opens a namespace on srv whose replicas each get their own
// client made by dial.
func standaloneEnv(srv *redistest.Server, dial func(t testing.TB) redisstore.Scripter) storetest.Open {
	return func(t *testing.T) storetest.Env {
		prefix := newPrefix()
		inspect := goRedisClient(t, srv.Addr())
		return storetest.Env{
			Replica:      func() tokenlimit.Store { return newStore(t, dial(t), callerTime(prefix)) },
			CheckKeys:    func(t *testing.T) { assertEveryKeyHasTTL(t, inspect, prefix) },
			FlushScripts: func(t *testing.T) { flushScripts(t, srv) },
		}
	}
}

func TestConformanceGoRedis(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, standaloneEnv(srv, func(t testing.TB) redisstore.Scripter {
		return goredisclient.New(goRedisClient(t, srv.Addr()))
	}))
}

func TestConformanceRueidis(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, standaloneEnv(srv, func(t testing.TB) redisstore.Scripter {
		return rueidisclient.New(rueidisClient(t, srv.Addr()))
	}))
}

// TestConformanceScripts runs the suite on the fallback for servers without
// Redis Functions: every call a script (EVALSHA).
func TestConformanceScripts(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T) storetest.Env {
		prefix := newPrefix()
		inspect := goRedisClient(t, srv.Addr())
		return storetest.Env{
			Replica: func() tokenlimit.Store {
				return redisstore.ScriptsOnly(newStore(t, rueidisclient.New(rueidisClient(t, srv.Addr())), callerTime(prefix)))
			},
			CheckKeys:    func(t *testing.T) { assertEveryKeyHasTTL(t, inspect, prefix) },
			FlushScripts: func(t *testing.T) { flushScripts(t, srv) },
		}
	})
}

// TestConformanceUnbatched runs the suite with batching off: every check
// is its own call.
func TestConformanceUnbatched(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T) storetest.Env {
		prefix := newPrefix()
		inspect := goRedisClient(t, srv.Addr())
		return storetest.Env{
			Replica: func() tokenlimit.Store {
				opts := callerTime(prefix)
				opts.Unbatched = true
				return newStore(t, rueidisclient.New(rueidisClient(t, srv.Addr())), opts)
			},
			CheckKeys:    func(t *testing.T) { assertEveryKeyHasTTL(t, inspect, prefix) },
			FlushScripts: func(t *testing.T) { flushScripts(t, srv) },
		}
	})
}

func TestConformanceCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	storetest.Run(t, func(t *testing.T) storetest.Env {
		prefix := newPrefix()
		return storetest.Env{
			Replica: func() tokenlimit.Store {
				c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
				t.Cleanup(func() { c.Close() })
				opts := callerTime(prefix)
				opts.Cluster = true // reservations find their records through it
				return newStore(t, goredisclient.New(c), opts)
			},
			FlushScripts: func(t *testing.T) {
				for i := range cluster.Addrs() {
					flushScripts(t, cluster.Node(i))
				}
			},
		}
	})
}

// TestConformanceSentinel finds the master through a real Sentinel, as
// production setups with failover do (go-redis' failover client).
func TestConformanceSentinel(t *testing.T) {
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, master, "mymaster")
	storetest.Run(t, func(t *testing.T) storetest.Env {
		prefix := newPrefix()
		inspect := goRedisClient(t, master.Addr())
		return storetest.Env{
			Replica: func() tokenlimit.Store {
				c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: []string{sentinel.Addr()}, ContextTimeoutEnabled: true})
				t.Cleanup(func() { c.Close() })
				return newStore(t, goredisclient.New(c), callerTime(prefix))
			},
			CheckKeys:    func(t *testing.T) { assertEveryKeyHasTTL(t, inspect, prefix) },
			FlushScripts: func(t *testing.T) { flushScripts(t, master) },
		}
	})
}

// TestConformanceClusterAcrossSlots runs the suite with every hash tag
// removed from the keys, so the limits of one check lie in different slots:
// the store (Options.Cluster) decides slot by slot and refunds on a denial,
// and must still pass every all-or-nothing case.
func TestConformanceClusterAcrossSlots(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	storetest.Run(t, func(t *testing.T) storetest.Env {
		prefix := newPrefix()
		return storetest.Env{
			Replica: func() tokenlimit.Store {
				c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
				t.Cleanup(func() { c.Close() })
				opts := callerTime(prefix)
				opts.Cluster = true
				return untagged{newStore(t, goredisclient.New(c), opts)}
			},
		}
	})
}

// untagged is a store whose keys lose their hash tags: "{u}:plan" becomes
// "(u):plan", still distinct from every other key but in a slot of its own.
type untagged struct{ tokenlimit.Store }

var untag = strings.NewReplacer("{", "(", "}", ")")

func (u untagged) Check(ctx context.Context, now time.Time, items []tokenlimit.Item, results []tokenlimit.Result) (time.Time, error) {
	out := slices.Clone(items)
	for i := range out {
		out[i].Key = untag.Replace(out[i].Key)
	}
	return u.Store.Check(ctx, now, out, results)
}

func (u untagged) Adjust(ctx context.Context, now time.Time, adjustments []tokenlimit.Adjustment) error {
	out := slices.Clone(adjustments)
	for i := range out {
		out[i].Key = untag.Replace(out[i].Key)
	}
	return u.Store.Adjust(ctx, now, out)
}

func (u untagged) Reserve(ctx context.Context, now time.Time, req tokenlimit.ReserveRequest, results []tokenlimit.Result) (tokenlimit.ReserveOutcome, error) {
	req.Items = slices.Clone(req.Items)
	for i := range req.Items {
		req.Items[i].Key = untag.Replace(req.Items[i].Key)
	}
	return storekit.Reserve(ctx, u.Store, now, req, results)
}

func (u untagged) Settle(ctx context.Context, now time.Time, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error) {
	return storekit.Settle(ctx, u.Store, now, req)
}

func (u untagged) Reset(ctx context.Context, key string, alg tokenlimit.Algorithm) error {
	return u.Store.Reset(ctx, untag.Replace(key), alg)
}

func assertEveryKeyHasTTL(t *testing.T, c *redis.Client, prefix string) {
	t.Helper()
	ctx := context.Background()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		ttl, err := c.PTTL(ctx, iter.Val()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 && ttl != -2 { // -2: expired between SCAN and PTTL
			t.Errorf("key %s has no TTL (PTTL %v)", iter.Val(), ttl)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
}

// flushScripts makes srv lose the store's code, in both forms: the script
// cache (SCRIPT FLUSH) and the functions (FUNCTION FLUSH).
func flushScripts(t *testing.T, srv *redistest.Server) {
	t.Helper()
	for _, cmd := range [][]string{{"SCRIPT", "FLUSH"}, {"FUNCTION", "FLUSH"}} {
		if _, err := srv.Do(cmd...); err != nil {
			t.Fatal(err)
		}
	}
}

// commandCalls reads INFO commandstats: calls per command name.
func commandCalls(t testing.TB, srv *redistest.Server) map[string]int {
	t.Helper()
	info, err := srv.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for name, stat := range commandStats(info) {
		calls[name] = int(stat["calls"])
	}
	return calls
}

// commandStats parses INFO commandstats: per command name (without
// "cmdstat_"), its fields (calls, usec, ...) by name.
func commandStats(info string) map[string]map[string]float64 {
	stats := map[string]map[string]float64{}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		fields := map[string]float64{}
		for field := range strings.SplitSeq(rest, ",") {
			if k, v, ok := strings.Cut(field, "="); ok {
				fields[k], _ = strconv.ParseFloat(v, 64)
			}
		}
		stats[name] = fields
	}
	return stats
}

// storeCalls is how many calls of the store's code commandstats counts:
// FCALL and EVALSHA, and the reloads (FUNCTION LOAD, EVAL).
func storeCalls(calls map[string]int) (runs, reloads int) {
	return calls["fcall"] + calls["evalsha"], calls["function|load"] + calls["eval"]
}

// codePaths are the two ways the store runs its code: Redis Functions
// (the default where the server has them) and scripts (EVALSHA).
var codePaths = []struct {
	name   string
	wrap   func(*redisstore.Store) *redisstore.Store
	call   string // the command that runs the code
	reload string // the command that reloads it
	// missed is how many calls commandstats counts for the one that found
	// the code missing: an FCALL of a missing function counts, an EVALSHA
	// refused with NOSCRIPT does not.
	missed int
}{
	{"functions", func(s *redisstore.Store) *redisstore.Store { return s }, "fcall", "function|load", 1},
	{"scripts", redisstore.ScriptsOnly, "evalsha", "eval", 0},
}

func TestMultiLimitCheckIsOneCall(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, path := range codePaths {
		t.Run(path.name, func(t *testing.T) {
			st := path.wrap(newStore(t, goredisclient.New(goRedisClient(t, srv.Addr())), redisstore.Options{Prefix: newPrefix()}))
			items := []tokenlimit.Item{
				{Key: "{u}", Limit: tokenlimit.FixedWindowLimit(100, time.Minute), Cost: 1},
				{Key: "{u}", Limit: tokenlimit.SlidingLogLimit(100, time.Minute), Cost: 1},
				{Key: "{u}", Limit: tokenlimit.SlidingCounterLimit(100, time.Minute), Cost: 1},
				// Buckets refilling once an hour: Redis decides at its own
				// clock, and on a loaded machine a faster refill would put
				// a token back between the two checks.
				{Key: "{u}", Limit: tokenlimit.TokenBucketLimit(100, 1, time.Hour), Cost: 1},
				{Key: "{u}:plan", Limit: tokenlimit.GCRALimit(99, 1, time.Hour), Cost: 1},
			}
			results := make([]tokenlimit.Result, len(items))
			if _, err := st.Check(ctx, time.Now(), items, results); err != nil { // loads the code
				t.Fatal(err)
			}
			if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Check(ctx, time.Now(), items, results); err != nil {
				t.Fatal(err)
			}
			calls := commandCalls(t, srv)
			if runs, reloads := storeCalls(calls); calls[path.call] != 1 || runs != 1 || reloads != 0 {
				t.Errorf("a check of %d limits made %d calls and %d reloads, want exactly 1 %s; commandstats: %v", len(items), runs, reloads, path.call, calls)
			}
			for i, r := range results {
				if !r.Allowed || r.Remaining != 98 {
					t.Errorf("item %d: %+v, want allowed with 98 left", i, r)
				}
			}
		})
	}
}

// TestLostCodeReloadsOnce: after SCRIPT FLUSH and FUNCTION FLUSH the next
// check reloads the store's code once (FUNCTION LOAD, or EVAL after
// NOSCRIPT) and is decided, and charged, exactly once.
func TestLostCodeReloadsOnce(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, path := range codePaths {
		t.Run(path.name, func(t *testing.T) {
			st := path.wrap(newStore(t, rueidisclient.New(rueidisClient(t, srv.Addr())), redisstore.Options{Prefix: newPrefix()}))
			l := tokenlimit.TokenBucketLimit(10, 1, time.Hour)
			lim, err := tokenlimit.NewLimiter(st)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := lim.AllowN(ctx, "k", l, 1); err != nil { // loads the code
				t.Fatal(err)
			}
			for i, flush := range []bool{false, true} {
				if flush {
					flushScripts(t, srv)
				}
				if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
					t.Fatal(err)
				}
				r, err := lim.AllowN(ctx, "k", l, 1)
				if err != nil {
					t.Fatal(err)
				}
				if want := int64(8 - i); r.Remaining != want {
					t.Errorf("flushed=%v: %d left, want %d (charged exactly once)", flush, r.Remaining, want)
				}
				calls := commandCalls(t, srv)
				runs, reloads := storeCalls(calls)
				wantRuns, wantReloads := 1, 0
				if flush {
					wantRuns, wantReloads = 1+path.missed, 1
				}
				if calls[path.call] != wantRuns || runs != wantRuns || calls[path.reload] != wantReloads || reloads != wantReloads {
					t.Errorf("flushed=%v: %d calls, %d reloads; want %d %s and %d %s; commandstats %v", flush, runs, reloads, wantRuns, path.call, wantReloads, path.reload, calls)
				}
			}
		})
	}
}

// TestTTLsAreNoLongerThanNeeded uses the server's clock, as production does:
// each key's TTL is its ResetAfter rounded up to the millisecond, and a
// budget that is whole again has no key at all.
func TestTTLsAreNoLongerThanNeeded(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := goRedisClient(t, srv.Addr())
	st := newStore(t, goredisclient.New(c), redisstore.Options{Prefix: newPrefix()})
	lim, err := tokenlimit.NewLimiter(st)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []tokenlimit.Limit{
		tokenlimit.FixedWindowLimit(10, time.Hour),
		tokenlimit.SlidingLogLimit(10, time.Hour),
		tokenlimit.SlidingCounterLimit(10, time.Hour),
		tokenlimit.TokenBucketLimit(10, 1, time.Minute),
		tokenlimit.GCRALimit(9, 1, time.Minute),
	} {
		res, err := lim.Reserve(ctx, tokenlimit.Item{Key: "ttl", Limit: l, Cost: 4})
		if err != nil || !res.OK() {
			t.Fatalf("%s: reserve: %v", l, err)
		}
		d := res.Decision()
		key := st.Key("ttl", l.Algorithm)
		ttl, err := c.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		need := d.Results[0].ResetAfter.Round(time.Millisecond) + time.Millisecond
		if ttl <= 0 || ttl > need {
			t.Errorf("%s: PTTL %v after a charge with ResetAfter %v, want 0 < PTTL <= %v", l, ttl, d.Results[0].ResetAfter, need)
		}
		if st, err := res.Cancel(ctx); err != nil || st != tokenlimit.Settled {
			t.Fatal(st, err)
		}
		n, err := c.Exists(ctx, st.Keys("ttl", l.Algorithm)...).Result()
		if err != nil {
			t.Fatal(err)
		}
		if wantGone := l.Algorithm != tokenlimit.FixedWindow && l.Algorithm != tokenlimit.SlidingCounter; wantGone && n != 0 {
			t.Errorf("%s: %d keys left after a full refund emptied the budget, want none", l, n)
		}
	}
}

func TestCrossSlotCheckOnClusterNamesTheHashTag(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { c.Close() })
	st := newStore(t, goredisclient.New(c), redisstore.Options{Prefix: newPrefix()})
	l := tokenlimit.TokenBucketLimit(10, 1, time.Second)
	items := []tokenlimit.Item{{Key: "user=a", Limit: l, Cost: 1}, {Key: "user=b", Limit: l, Cost: 1}}
	_, err := st.Check(context.Background(), time.Now(), items, make([]tokenlimit.Result, 2))
	if err == nil || !strings.Contains(err.Error(), "hash tag") {
		t.Fatalf("error %v, want one that explains the keys need a common hash tag", err)
	}
}

// TestClusterRefundsEarlierSlotsWhenALaterOneDenies: the first slot's limits
// admit and are charged, the second slot's deny; the first are refunded, for
// every algorithm, so that nothing stays charged.
func TestClusterRefundsEarlierSlotsWhenALaterOneDenies(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	st := newStore(t, goredisclient.New(c), redisstore.Options{Prefix: newPrefix(), Cluster: true})
	cap := tokenlimit.SlidingLogLimit(2, time.Minute)
	full := []tokenlimit.Item{{Key: "late", Limit: cap, Cost: 2}}
	if _, err := st.Check(ctx, time.Now(), full, make([]tokenlimit.Result, 1)); err != nil {
		t.Fatal(err)
	}
	items := []tokenlimit.Item{
		{Key: "early-fw", Limit: tokenlimit.FixedWindowLimit(10, time.Hour), Cost: 4},
		{Key: "early-sl", Limit: tokenlimit.SlidingLogLimit(10, time.Hour), Cost: 4},
		{Key: "early-sc", Limit: tokenlimit.SlidingCounterLimit(10, time.Hour), Cost: 4},
		{Key: "early-tb", Limit: tokenlimit.TokenBucketLimit(10, 1, time.Hour), Cost: 4},
		{Key: "early-gcra", Limit: tokenlimit.GCRALimit(9, 1, time.Hour), Cost: 4},
		{Key: "late", Limit: cap, Cost: 1},
	}
	results := make([]tokenlimit.Result, len(items))
	if _, err := st.Check(ctx, time.Now(), items, results); err != nil {
		t.Fatal(err)
	}
	if results[5].Allowed {
		t.Fatalf("the full sliding log admitted: %+v", results[5])
	}
	for i, r := range results[:5] {
		if !r.Allowed || r.Remaining != 10 {
			t.Errorf("%s: %+v, want allowed alone and reported uncharged (10 left)", items[i].Key, r)
		}
		peek := []tokenlimit.Item{{Key: items[i].Key, Limit: items[i].Limit}}
		got := make([]tokenlimit.Result, 1)
		if _, err := st.Check(ctx, time.Now(), peek, got); err != nil {
			t.Fatal(err)
		}
		if got[0].Remaining != 10 {
			t.Errorf("%s: %d left after the denied check, want 10 (refunded)", items[i].Key, got[0].Remaining)
		}
	}
}

// TestSlidingLogSurvivesALostLog: Redis may evict the log's ZSET but keep
// its sum (maxmemory with an LRU policy); the next check must treat the
// budget as empty instead of failing or counting a sum of nothing.
func TestSlidingLogSurvivesALostLog(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	st := newStore(t, goredisclient.New(goRedisClient(t, srv.Addr())), redisstore.Options{Prefix: newPrefix()})
	l := tokenlimit.SlidingLogLimit(5, time.Minute)
	items := []tokenlimit.Item{{Key: "lost", Limit: l, Cost: 5}}
	results := make([]tokenlimit.Result, 1)
	if _, err := st.Check(ctx, time.Now(), items, results); err != nil || !results[0].Allowed {
		t.Fatalf("first check: %v %+v", err, results[0])
	}
	if _, err := srv.Do("DEL", st.Keys("lost", l.Algorithm)[0]); err != nil { // the ZSET only
		t.Fatal(err)
	}
	items[0].Cost = 1
	if _, err := st.Check(ctx, time.Now(), items, results); err != nil || !results[0].Allowed || results[0].Remaining != 4 {
		t.Fatalf("check after the log was evicted: %v %+v, want allowed with 4 left", err, results[0])
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	c := goredisclient.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})) // never dialled
	for _, opts := range []redisstore.Options{{Prefix: "rl:{x}:"}, {Prefix: "a}"}, {TTLPadding: -time.Second}} {
		if _, err := redisstore.New(c, opts); err == nil {
			t.Errorf("New(%+v) succeeded, want an error", opts)
		}
	}
	if _, err := redisstore.New(nil, redisstore.Options{}); err == nil {
		t.Error("New(nil client) succeeded, want an error")
	}
}

// TestClusterSettlesEverySlotInServerTime: a reservation across slots,
// decided at the Redis server's clock, refunds every slot when cancelled —
// sliding logs refund only a charge they hold at its exact time, so every
// slot must have been charged at the time the reservation records.
func TestClusterSettlesEverySlotInServerTime(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	st := newStore(t, goredisclient.New(c), redisstore.Options{Prefix: newPrefix(), Cluster: true})
	lim, err := tokenlimit.NewLimiter(st)
	if err != nil {
		t.Fatal(err)
	}
	l := tokenlimit.SlidingLogLimit(10, time.Hour)
	var items []tokenlimit.Item
	for i := range 6 {
		items = append(items, tokenlimit.Item{Key: fmt.Sprintf("slot%d", i), Limit: l, Cost: 5})
	}
	res, err := lim.Reserve(ctx, items...)
	if err != nil || !res.OK() {
		t.Fatalf("reserve: %v %+v", err, res.Decision())
	}
	if st, err := res.Cancel(ctx); err != nil || st != tokenlimit.Settled {
		t.Fatal(st, err)
	}
	for _, it := range items {
		r, err := lim.AllowN(ctx, it.Key, l, 0)
		if err != nil {
			t.Fatal(err)
		}
		if r.Remaining != 10 {
			t.Errorf("%s: %d left after the reservation was cancelled, want 10", it.Key, r.Remaining)
		}
	}
}

// TestSlidingLogRebuildsALostSum: if Redis evicts the log's sum but not the
// log, the sum and the sequence are rebuilt from the log: decisions stay
// exact, members never collide, and every key keeps a TTL.
func TestSlidingLogRebuildsALostSum(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := goRedisClient(t, srv.Addr())
	prefix := newPrefix()
	st := newStore(t, goredisclient.New(c), callerTime(prefix))
	l := tokenlimit.SlidingLogLimit(10, 10*time.Second)
	now := storetest.Base
	check := func(at time.Duration, cost int64) tokenlimit.Result {
		t.Helper()
		results := make([]tokenlimit.Result, 1)
		if _, err := st.Check(ctx, now.Add(at), []tokenlimit.Item{{Key: "sum", Limit: l, Cost: cost}}, results); err != nil {
			t.Fatal(err)
		}
		return results[0]
	}
	check(0, 3)
	check(time.Second, 4)
	if _, err := srv.Do("DEL", st.Keys("sum", l.Algorithm)[1]); err != nil { // the sum only
		t.Fatal(err)
	}
	if r := check(2*time.Second, 2); !r.Allowed || r.Remaining != 1 {
		t.Fatalf("after the sum was evicted: %+v, want allowed with 1 left (3+4+2 of 10)", r)
	}
	if r := check(10*time.Second, 0); r.Remaining != 4 { // the entry at 0 left: 4+2 remain
		t.Fatalf("after the first entry left: %+v, want 4 left", r)
	}
	if n, _ := c.ZCard(ctx, st.Keys("sum", l.Algorithm)[0]).Result(); n != 2 {
		t.Errorf("the log holds %d entries, want 2 (no member overwritten)", n)
	}
	assertEveryKeyHasTTL(t, c, prefix)
}

// TestFunctionsReloadOnEveryClusterNode: on a replicated Redis Cluster,
// through either adapter, the library is loaded on every master the keys
// live on; after FUNCTION FLUSH on every node each check reloads it where
// needed, and every check is decided, and charged, once.
func TestFunctionsReloadOnEveryClusterNode(t *testing.T) {
	cluster := redistest.StartReplicatedCluster(t, 3)
	clients := map[string]func(t *testing.T) redisstore.Scripter{
		"go-redis": func(t *testing.T) redisstore.Scripter {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
			t.Cleanup(func() { c.Close() })
			return goredisclient.New(c)
		},
		"rueidis": func(t *testing.T) redisstore.Scripter { return rueidisclient.New(rueidisClient(t, cluster.Addrs()...)) },
	}
	ctx := context.Background()
	l := tokenlimit.TokenBucketLimit(10, 1, time.Hour)
	for name, dial := range clients {
		t.Run(name, func(t *testing.T) {
			st := newStore(t, dial(t), redisstore.Options{Prefix: newPrefix(), Cluster: true})
			lim, err := tokenlimit.NewLimiter(st)
			if err != nil {
				t.Fatal(err)
			}
			keys := []string{"a", "b", "c", "d", "e", "f"} // over the 3 masters' slots
			for i := range cluster.Addrs() {
				if _, err := cluster.Node(i).Do("CONFIG", "RESETSTAT"); err != nil {
					t.Fatal(err)
				}
			}
			for round := range 3 {
				if round > 0 {
					for i := range cluster.Addrs() {
						if _, err := cluster.Node(i).Do("FUNCTION", "FLUSH"); err != nil {
							t.Fatal(err)
						}
					}
				}
				for _, k := range keys {
					r, err := lim.AllowN(ctx, k, l, 1)
					if err != nil {
						t.Fatalf("round %d, key %s: %v", round, k, err)
					}
					if want := int64(9 - round); r.Remaining != want {
						t.Errorf("round %d, key %s: %d left, want %d (each check charged once)", round, k, r.Remaining, want)
					}
				}
			}
			fcalls, scripts := 0, 0
			for i := range cluster.Addrs() {
				calls := commandCalls(t, cluster.Node(i))
				fcalls += calls["fcall"]
				scripts += calls["evalsha"] + calls["eval"]
			}
			if fcalls < 3*len(keys) || scripts != 0 {
				t.Errorf("%d FCALL and %d EVALSHA or EVAL calls for %d checks, want every check an FCALL", fcalls, scripts, 3*len(keys))
			}
		})
	}
}

// TestFunctionsDeniedFallBackToScripts: a user whose ACL denies FCALL and
// FUNCTION gets the EVALSHA fallback, every check decided and charged once.
func TestFunctionsDeniedFallBackToScripts(t *testing.T) {
	srv := redistest.Start(t)
	if _, err := srv.Do("ACL", "SETUSER", "nofn", "on", ">pw", "~*", "&*", "+@all", "-fcall", "-function"); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "nofn", Password: "pw"})
	t.Cleanup(func() { c.Close() })
	st := newStore(t, goredisclient.New(c), redisstore.Options{Prefix: newPrefix()})
	lim, err := tokenlimit.NewLimiter(st)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := tokenlimit.TokenBucketLimit(10, 1, time.Hour)
	for i := range 3 {
		r, err := lim.AllowN(ctx, "k", l, 1)
		if err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
		if want := int64(9 - i); r.Remaining != want {
			t.Errorf("check %d: %d left, want %d", i, r.Remaining, want)
		}
	}
	if calls := commandCalls(t, srv); calls["evalsha"] < 3 || calls["fcall"] != 0 || calls["function|load"] != 0 {
		t.Errorf("want the 3 checks run by EVALSHA and no FCALL or FUNCTION LOAD run; commandstats %v", calls)
	}
}
