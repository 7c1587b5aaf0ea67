package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/goredisclient"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
)

// setMaxmemory makes srv refuse what grows its memory past bytes (0: no
// bound), evicting nothing.
func setMaxmemory(t *testing.T, srv *redistest.Server, bytes int64) {
	t.Helper()
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", strconv.FormatInt(bytes, 10)}} {
		if _, err := srv.Do("CONFIG", "SET", kv[0], kv[1]); err != nil {
			t.Fatalf("CONFIG SET %s %s: %v", kv[0], kv[1], err)
		}
	}
}

// usedMemory is srv's used_memory.
func usedMemory(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	info, err := srv.Do("INFO", "memory")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("INFO memory has no used_memory")
	return 0
}

// budgetState is what Redis holds for item (its first key's value, or a
// sliding log's entries), "" for nothing.
func budgetState(t *testing.T, c redis.Cmdable, st *redisstore.Store, it tokenlimit.Item) string {
	t.Helper()
	key := st.Keys(it.Key, it.Limit.Algorithm)[0]
	if it.Limit.Algorithm == tokenlimit.SlidingLog {
		members, err := c.ZRange(context.Background(), key, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(members, ",")
	}
	v, err := c.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestFullRedisChecksAllOrNothing fills a redis-server under maxmemory with
// noeviction by multi-item checks, each of budgets that exist and of new
// ones, on both client adapters, as functions and as scripts: every check
// charges all its items or none (read from the keys), a refused one with
// tokenlimit.ErrStoreFull; on a full server checks, reserve, settle and
// adjust are refused so, while reading a log and resetting still work.
func TestFullRedisChecksAllOrNothing(t *testing.T) {
	srv := redistest.Start(t)
	inspect := goRedisClient(t, srv.Addr())
	clients := map[string]func() redisstore.Scripter{
		"goredis": func() redisstore.Scripter { return goredisclient.New(goRedisClient(t, srv.Addr())) },
		"rueidis": func() redisstore.Scripter { return rueidisclient.New(rueidisClient(t, srv.Addr())) },
	}
	for name, dial := range clients {
		for _, scripts := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/scripts=%v", name, scripts), func(t *testing.T) {
				setMaxmemory(t, srv, 0)
				if _, err := srv.Do("FLUSHALL"); err != nil {
					t.Fatal(err)
				}
				st := newStore(t, dial(), redisstore.Options{Prefix: newPrefix()})
				if scripts {
					st = redisstore.ScriptsOnly(st)
				}
				testFullRedis(t, srv, inspect, st)
			})
		}
	}
}

func testFullRedis(t *testing.T, srv *redistest.Server, inspect *redis.Client, st *redisstore.Store) {
	ctx := context.Background()
	shared := []tokenlimit.Item{
		{Key: "shared-fw", Limit: tokenlimit.FixedWindowLimit(1e12, time.Hour), Cost: 1},
		{Key: "shared-tb", Limit: tokenlimit.TokenBucketLimit(100000, 1, time.Second), Cost: 1},
	}
	check := func(i int) ([]tokenlimit.Item, error) {
		items := append([]tokenlimit.Item(nil), shared...)
		for _, l := range []tokenlimit.Limit{tokenlimit.SlidingLogLimit(10, time.Hour), tokenlimit.SlidingCounterLimit(10, time.Hour), tokenlimit.GCRALimit(10, 1, time.Hour)} {
			items = append(items, tokenlimit.Item{Key: fmt.Sprintf("new%d-%s", i, l.Algorithm), Limit: l, Cost: 1})
		}
		before := make([]string, len(items))
		for j, it := range items {
			before[j] = budgetState(t, inspect, st, it)
		}
		results := make([]tokenlimit.Result, len(items))
		_, err := st.Check(ctx, time.Now(), items, results)
		changed := 0
		for j, it := range items {
			if budgetState(t, inspect, st, it) != before[j] {
				changed++
			}
		}
		if changed != 0 && changed != len(items) {
			t.Fatalf("check %d (err %v) charged %d of its %d items", i, err, changed, len(items))
		}
		if (changed == len(items)) != (err == nil) {
			t.Fatalf("check %d: %d of %d items charged, error %v", i, changed, len(items), err)
		}
		return items, err
	}
	if _, err := check(-1); err != nil {
		t.Fatal(err)
	}
	rsv := tokenlimit.ReserveRequest{ID: "before-full", Items: shared, TTL: time.Hour}
	if _, err := st.Reserve(ctx, time.Now(), rsv, make([]tokenlimit.Result, len(shared))); err != nil {
		t.Fatal(err)
	}
	setMaxmemory(t, srv, usedMemory(t, srv)+64<<10)
	refused := -1
	for i := 0; refused < 0; i++ {
		if i == 10000 {
			t.Fatal("10,000 checks did not fill 64 KB")
		}
		if _, err := check(i); err != nil {
			if !errors.Is(err, tokenlimit.ErrStoreFull) {
				t.Fatalf("check %d on a full Redis: %v, want tokenlimit.ErrStoreFull", i, err)
			}
			refused = i
		}
	}
	// Past the boundary used_memory moves (keys expire, client buffers are
	// freed): a bound of 1 byte keeps the server full from here on.
	setMaxmemory(t, srv, 1)
	for i := refused + 1; i < refused+5; i++ {
		if _, err := check(i); !errors.Is(err, tokenlimit.ErrStoreFull) {
			t.Fatalf("check %d after the first refused: %v, want tokenlimit.ErrStoreFull", i, err)
		}
	}
	if _, err := st.Reserve(ctx, time.Now(), tokenlimit.ReserveRequest{ID: "when-full", Items: shared, TTL: time.Hour}, make([]tokenlimit.Result, len(shared))); !errors.Is(err, tokenlimit.ErrStoreFull) {
		t.Errorf("reserve on a full Redis: %v, want tokenlimit.ErrStoreFull", err)
	}
	if _, err := st.Settle(ctx, time.Now(), tokenlimit.SettleRequest{ID: rsv.ID, Actual: 3, TTL: time.Hour}); !errors.Is(err, tokenlimit.ErrStoreFull) {
		t.Errorf("settle on a full Redis: %v, want tokenlimit.ErrStoreFull", err)
	}
	adj := []tokenlimit.Adjustment{{Key: shared[0].Key, Limit: shared[0].Limit, Delta: 5, ChargedAt: time.Now()}}
	if err := st.Adjust(ctx, time.Now(), adj); !errors.Is(err, tokenlimit.ErrStoreFull) {
		t.Errorf("adjust on a full Redis: %v, want tokenlimit.ErrStoreFull", err)
	}
	logged := tokenlimit.Item{Key: fmt.Sprintf("new%d-%s", -1, tokenlimit.SlidingLog), Limit: tokenlimit.SlidingLogLimit(10, time.Hour)}
	if entries, err := st.LogEntries(ctx, logged.Key, logged.Limit, time.Now()); err != nil || len(entries) != 1 {
		t.Errorf("reading a log on a full Redis: %v, %v, want its one entry", entries, err)
	}
	if err := st.Reset(ctx, shared[0].Key, shared[0].Limit.Algorithm); err != nil {
		t.Errorf("reset on a full Redis: %v, want it done (it only deletes)", err)
	}
	if got := budgetState(t, inspect, st, shared[0]); got != "" {
		t.Errorf("after reset on a full Redis the budget holds %q", got)
	}
}

// TestFullRedisClusterLaterSlotFull: a check over two slots on two masters
// whose later one is full (maxmemory, noeviction) answers
// tokenlimit.ErrStoreFull and leaves the earlier slot uncharged (read from
// its key), on both client adapters; and a refund, what takes back the
// earlier slot, runs on a full master too, while an adjustment that
// charges is refused there.
func TestFullRedisClusterLaterSlotFull(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	goredis := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { goredis.Close() })
	clients := map[string]redisstore.Scripter{
		"goredis": goredisclient.New(goredis),
		"rueidis": rueidisclient.New(rueidisClient(t, cluster.Addrs()...)),
	}
	for name, client := range clients {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st := newStore(t, client, redisstore.Options{Prefix: newPrefix(), Cluster: true})
			limit := tokenlimit.FixedWindowLimit(100, time.Hour)
			early, late, earlyNode, lateNode := keysOnTwoMasters(t, cluster, st, limit.Algorithm)
			items := []tokenlimit.Item{{Key: early, Limit: limit, Cost: 3}, {Key: late, Limit: limit, Cost: 3}}
			if _, err := st.Check(ctx, time.Now(), items, make([]tokenlimit.Result, 2)); err != nil {
				t.Fatal(err) // both charged, and the library loaded on both masters
			}
			before := []string{budgetState(t, goredis, st, items[0]), budgetState(t, goredis, st, items[1])}
			setMaxmemory(t, cluster.Node(lateNode), 1)
			t.Cleanup(func() { setMaxmemory(t, cluster.Node(lateNode), 0) })
			_, err := st.Check(ctx, time.Now(), items, make([]tokenlimit.Result, 2))
			if !errors.Is(err, tokenlimit.ErrStoreFull) {
				t.Fatalf("check whose later slot is full: %v, want tokenlimit.ErrStoreFull", err)
			}
			for i, it := range items {
				if got := budgetState(t, goredis, st, it); got != before[i] {
					t.Errorf("%s after the refused check holds %q, want %q (uncharged)", it.Key, got, before[i])
				}
			}

			setMaxmemory(t, cluster.Node(earlyNode), 1)
			t.Cleanup(func() { setMaxmemory(t, cluster.Node(earlyNode), 0) })
			charge := []tokenlimit.Adjustment{{Key: early, Limit: limit, Delta: 3, ChargedAt: time.Now()}}
			if err := st.Adjust(ctx, time.Now(), charge); !errors.Is(err, tokenlimit.ErrStoreFull) {
				t.Errorf("charging adjustment on a full master: %v, want tokenlimit.ErrStoreFull", err)
			}
			charge[0].Delta = -3
			if err := redisstore.RefundOnce(st, ctx, time.Now(), charge); err != nil {
				t.Fatalf("refund on a full master: %v", err)
			}
			peek := make([]tokenlimit.Result, 1)
			setMaxmemory(t, cluster.Node(earlyNode), 0)
			if _, err := st.Check(ctx, time.Now(), []tokenlimit.Item{{Key: early, Limit: limit}}, peek); err != nil || peek[0].Remaining != 100 {
				t.Errorf("after the refund on a full master: %+v, %v, want 100 left", peek[0], err)
			}
		})
	}
}
