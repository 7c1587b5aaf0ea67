package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/goredisclient"
)

// TestReserveAndSettleAreOneCallEach: on a standalone Redis a reservation
// of several limits is one call (FCALL, or EVALSHA without functions), and
// so is its settlement, whose record and items stay in one round trip.
func TestReserveAndSettleAreOneCallEach(t *testing.T) {
	srv := redistest.Start(t)
	for _, path := range codePaths {
		t.Run(path.name, func(t *testing.T) {
			st := path.wrap(newStore(t, goredisclient.New(goRedisClient(t, srv.Addr())), redisstore.Options{Prefix: newPrefix()}))
			testReserveAndSettleAreOneCallEach(t, srv, st, path.call)
		})
	}
}

func testReserveAndSettleAreOneCallEach(t *testing.T, srv *redistest.Server, st *redisstore.Store, call string) {
	ctx := context.Background()
	items := []tokenlimit.Item{
		{Key: "{u}", Limit: tokenlimit.FixedWindowLimit(100, time.Minute), Cost: 10},
		{Key: "{u}", Limit: tokenlimit.SlidingLogLimit(100, time.Minute), Cost: 10},
		{Key: "{u}:t", Limit: tokenlimit.TokenBucketLimit(100, 10, time.Hour), Cost: 10},
	}
	results := make([]tokenlimit.Result, len(items))
	reserve := func(id string) tokenlimit.ReserveOutcome {
		t.Helper()
		out, err := st.Reserve(ctx, time.Now(), tokenlimit.ReserveRequest{ID: id, Items: items, TTL: time.Minute}, results)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	settle := func(id string) tokenlimit.SettleStatus {
		t.Helper()
		s, err := st.Settle(ctx, time.Now(), tokenlimit.SettleRequest{ID: id, Actual: 4, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	reserve("warm") // loads the code
	settle("warm")
	if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	if out := reserve("r"); out.Status != tokenlimit.Reserved {
		t.Fatalf("reserve: %+v", out)
	}
	if calls := commandCalls(t, srv); calls[call] != 1 || sum(storeCalls(calls)) != 1 {
		t.Errorf("a reservation of %d limits made %d %s calls, want exactly 1 call in all; commandstats: %v", len(items), calls[call], call, calls)
	}
	if s := settle("r"); s != tokenlimit.Settled {
		t.Fatalf("settle: %s", s)
	}
	if calls := commandCalls(t, srv); calls[call] != 2 || sum(storeCalls(calls)) != 2 {
		t.Errorf("reserve + settle made %d %s calls, want exactly 2 calls in all; commandstats: %v", calls[call], call, calls)
	}
	for i, r := range results {
		if r.Remaining != 86 { // 4 settled by "warm", 10 reserved
			t.Errorf("item %d: %+v, want 86 left (the reserved answer)", i, r)
		}
	}
}

// sum adds storeCalls' two counts.
func sum(runs, reloads int) int { return runs + reloads }

// TestRecordMemory measures what one reservation record costs in Redis
// (MEMORY USAGE), reserved and then settled, for docs/operations.md: a
// one-item reservation of a typical service key, and one of three items.
func TestRecordMemory(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := goRedisClient(t, srv.Addr())
	st := newStore(t, goredisclient.New(c), redisstore.Options{Prefix: "rl:"})
	key := "{tenant=acme}|tokens|user=alice"
	for _, n := range []int{1, 3} {
		var items []tokenlimit.Item
		for i := range n {
			items = append(items, tokenlimit.Item{Key: key + strconv.Itoa(i), Limit: tokenlimit.TokenBucketLimit(100000, 1000, time.Second), Cost: 2000})
		}
		id := tokenlimit.NewID()
		out, err := st.Reserve(ctx, time.Now(), tokenlimit.ReserveRequest{ID: id, Items: items, TTL: 10 * time.Minute}, make([]tokenlimit.Result, n))
		if err != nil || out.Status != tokenlimit.Reserved {
			t.Fatal(out, err)
		}
		reserved := memoryUsage(t, c, st.RecordKey(id))
		if _, err := st.Settle(ctx, time.Now(), tokenlimit.SettleRequest{ID: id, Actual: 10, TTL: 10 * time.Minute}); err != nil {
			t.Fatal(err)
		}
		settled := memoryUsage(t, c, st.RecordKey(id))
		ttl, err := c.PTTL(ctx, st.RecordKey(id)).Result()
		if err != nil || ttl <= 9*time.Minute || ttl > 10*time.Minute {
			t.Errorf("settled record's PTTL %v, %v; want it to keep the reservation's 10 minutes", ttl, err)
		}
		t.Logf("record of %d item(s) with %d-byte keys: %d B reserved, %d B settled", n, len(key)+1, reserved, settled)
		if reserved <= 0 || settled <= 0 || settled >= reserved || reserved > 200+250*int64(n) {
			t.Errorf("record of %d items: %d B reserved, %d B settled; want settled < reserved <= %d", n, reserved, settled, 200+250*n)
		}
	}
}

func memoryUsage(t *testing.T, c *redis.Client, key string) int64 {
	t.Helper()
	n, err := c.MemoryUsage(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestClusterRecordsLiveInTheItemsSlots: on Cluster a reservation's record
// sits in its items' slot (so reserve and settle are atomic there) and the
// pointer in the id's slot; the store computes slots as Redis does.
func TestClusterRecordsLiveInTheItemsSlots(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	prefix := newPrefix()
	st := newStore(t, goredisclient.New(c), redisstore.Options{Prefix: prefix, Cluster: true})
	var items []tokenlimit.Item
	for i := range 4 {
		items = append(items, tokenlimit.Item{Key: fmt.Sprintf("user=%d", i), Limit: tokenlimit.FixedWindowLimit(10, time.Hour), Cost: 3})
	}
	out, err := st.Reserve(ctx, time.Now(), tokenlimit.ReserveRequest{ID: "id-1", Items: items, TTL: time.Minute}, make([]tokenlimit.Result, len(items)))
	if err != nil || out.Status != tokenlimit.Reserved {
		t.Fatal(out, err)
	}
	slots := map[int64]bool{}
	for _, it := range items {
		slot, err := c.ClusterKeySlot(ctx, st.Key(it.Key, it.Limit.Algorithm)).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
	}
	// Look on every master (concurrently: ForEachMaster runs in parallel).
	var mu sync.Mutex
	var records []string
	err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		keys, err := n.Keys(ctx, prefix+"rv*").Result()
		mu.Lock()
		defer mu.Unlock()
		records = append(records, keys...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	recordSlots := map[int64]bool{}
	pointers := 0
	for _, k := range records {
		if seen[k] {
			continue
		}
		seen[k] = true
		if strings.HasPrefix(k, prefix+"rvp:") {
			pointers++
			continue
		}
		slot, err := c.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		recordSlots[slot] = true
	}
	if pointers != 1 || len(recordSlots) != len(slots) {
		t.Fatalf("%d pointers and records in slots %v; want 1 pointer and one record in each of the items' slots %v", pointers, recordSlots, slots)
	}
	for slot := range slots {
		if !recordSlots[slot] {
			t.Errorf("no record in slot %d of an item (records in %v)", slot, recordSlots)
		}
	}
	st2 := newStore(t, goredisclient.New(c), redisstore.Options{Prefix: prefix, Cluster: true})
	if s, err := st2.Settle(ctx, time.Now(), tokenlimit.SettleRequest{ID: "id-1", Actual: 1, TTL: time.Minute}); err != nil || s != tokenlimit.Settled {
		t.Fatalf("settle from another client: %s, %v", s, err)
	}
	for _, it := range items {
		r := make([]tokenlimit.Result, 1)
		if _, err := st.Check(ctx, time.Now(), []tokenlimit.Item{{Key: it.Key, Limit: it.Limit}}, r); err != nil || r[0].Remaining != 9 {
			t.Errorf("%s after settling at 1: %+v, %v; want 9 left", it.Key, r[0], err)
		}
	}
}
