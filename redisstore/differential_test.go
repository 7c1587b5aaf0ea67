package redisstore_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/goredisclient"
	"github.com/tokenlimit/tokenlimit/storetest"
)

// differentialLimits are the limits programs run against; odd rates and
// windows keep the arithmetic honest.
var differentialLimits = []tokenlimit.Limit{
	tokenlimit.FixedWindowLimit(7, 3*time.Second),
	tokenlimit.SlidingLogLimit(9, 2500*time.Millisecond),
	tokenlimit.SlidingCounterLimit(11, 3700*time.Millisecond),
	tokenlimit.TokenBucketLimit(10, 3, time.Second),
	tokenlimit.TokenBucketLimit(13, 7, time.Minute),
	tokenlimit.GCRALimit(4, 90000, time.Minute),
	{Algorithm: tokenlimit.FixedWindow, Quota: 5, Period: 2 * time.Second, Offset: 700 * time.Millisecond},
	{Algorithm: tokenlimit.SlidingCounter, Quota: 8, Period: 3 * time.Second, Offset: 1100 * time.Millisecond},
}

// program interprets bytes, three per operation, as a sequence of checks,
// multi-item checks, settlements and clock moves (forward, backward, far
// forward), and runs it on both stores, requiring identical answers.
func runProgram(t *testing.T, mem, red tokenlimit.Store, limitIndex uint8, program []byte) {
	l := differentialLimits[int(limitIndex)%len(differentialLimits)]
	other := differentialLimits[(int(limitIndex)+1)%len(differentialLimits)]
	unit := l.Period / 37
	now := storetest.Base
	type charge struct {
		at   time.Time
		item tokenlimit.Item
	}
	var charges []charge
	ctx := context.Background()
	for i := 0; i+2 < len(program); i += 3 {
		step, cost, op := program[i], int64(program[i+1])%(l.Capacity()+2), program[i+2]%8
		switch op {
		case 6:
			now = now.Add(-time.Duration(step) * unit)
		case 7:
			now = now.Add(time.Duration(step) * l.Period)
		default:
			now = now.Add(time.Duration(step) * unit)
		}
		items := []tokenlimit.Item{{Key: "{k}", Limit: l, Cost: cost}}
		if op == 4 {
			items = append(items, tokenlimit.Item{Key: "{k}:other", Limit: other, Cost: cost / 2})
		}
		if op == 5 && len(charges) > 0 {
			c := charges[len(charges)-1]
			charges = charges[:len(charges)-1]
			adj := []tokenlimit.Adjustment{{Key: c.item.Key, Limit: c.item.Limit, Delta: cost - c.item.Cost, ChargedAt: c.at}}
			errMem, errRed := mem.Adjust(ctx, now, adj), red.Adjust(ctx, now, adj)
			if (errMem == nil) != (errRed == nil) {
				t.Fatalf("op %d: adjust %+v: memstore error %v, redis error %v", i/3, adj[0], errMem, errRed)
			}
			continue
		}
		got := [2][]tokenlimit.Result{make([]tokenlimit.Result, len(items)), make([]tokenlimit.Result, len(items))}
		_, errMem := mem.Check(ctx, now, items, got[0])
		_, errRed := red.Check(ctx, now, items, got[1])
		if errMem != nil || errRed != nil {
			t.Fatalf("op %d: check: memstore error %v, redis error %v", i/3, errMem, errRed)
		}
		for j := range items {
			if got[0][j] != got[1][j] {
				t.Fatalf("op %d at +%s, %s cost %d:\nmemstore %+v\n   redis %+v", i/3, now.Sub(storetest.Base), items[j].Limit, items[j].Cost, got[0][j], got[1][j])
			}
		}
		if got[0][0].Allowed && (len(items) == 1 || got[0][1].Allowed) && cost > 0 {
			charges = append(charges, charge{at: now, item: items[0]})
		}
	}
}

// newPair opens the memory store and a Redis store that runs Redis
// Functions or, if scriptsOnly, scripts (EVALSHA).
func newPair(t *testing.T, srv *redistest.Server, scriptsOnly bool) (mem, red tokenlimit.Store) {
	m, err := memstore.New(memstore.Options{SweepInterval: 1000 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Neither store deletes anything by expiry during a program: the memory
	// store never sweeps, and Redis keys are padded far beyond the test.
	r := newStore(t, goredisclient.New(goRedisClient(t, srv.Addr())), callerTime(newPrefix()))
	if scriptsOnly {
		r = redisstore.ScriptsOnly(r)
	}
	return m, r
}

// FuzzDifferential: go test -fuzz FuzzDifferential ./redisstore/
func FuzzDifferential(f *testing.F) {
	srv := redistest.Start(f)
	f.Add(uint8(0), []byte{0, 3, 0, 1, 5, 0, 40, 7, 0, 2, 2, 5, 0, 1, 6})
	f.Add(uint8(1), []byte{0, 9, 0, 1, 1, 0, 3, 4, 4, 200, 2, 6, 0, 9, 5})
	f.Add(uint8(3), []byte{0, 10, 0, 0, 1, 0, 1, 3, 0, 9, 1, 7, 2, 0, 5, 1, 11, 0})
	f.Add(uint8(5), []byte{0, 5, 0, 0, 5, 0, 13, 1, 6, 1, 2, 4, 3, 0, 5})
	f.Fuzz(func(t *testing.T, limitIndex uint8, program []byte) {
		for _, scriptsOnly := range []bool{false, true} {
			mem, red := newPair(t, srv, scriptsOnly)
			runProgram(t, mem, red, limitIndex, program)
		}
	})
}

// TestDifferentialRandomPrograms runs seeded random programs on every limit,
// so that plain `go test` covers far more than the fuzz seeds; every other
// pair of programs runs scripts (EVALSHA) instead of Redis Functions.
func TestDifferentialRandomPrograms(t *testing.T) {
	srv := redistest.Start(t)
	rng := rand.New(rand.NewPCG(2026, 11))
	for n := range 120 {
		program := make([]byte, 3*60)
		for i := range program {
			program[i] = byte(rng.UintN(256))
			if i%3 == 0 && rng.UintN(2) == 0 {
				program[i] %= 8 // many small steps: most decisions happen near the limit
			}
		}
		t.Run("", func(t *testing.T) {
			t.Parallel()
			mem, red := newPair(t, srv, n%4 >= 2)
			runProgram(t, mem, red, uint8(n), program)
		})
	}
}

// TestDifferentialBatchCalls runs seeded random runs of checks, alone and
// in groups, on a few keys that they share; the Redis store decides each
// run in one batch call, the memory store one check after another. A
// check in a batch call must see every check before it in the call, as it
// would with one call per check.
func TestDifferentialBatchCalls(t *testing.T) {
	srv := redistest.Start(t)
	rng := rand.New(rand.NewPCG(2026, 12))
	// Each key has one limit, as a key names one limit's state; with the
	// buckets below, a call can hold more distinct limits than the store
	// looks up when it packs them.
	limitOf := slices.Clone(differentialLimits)
	for i := range 20 {
		limitOf = append(limitOf, tokenlimit.TokenBucketLimit(int64(3+i), int64(5+2*i), time.Second))
	}
	for n := range 24 {
		mem, red := newPair(t, srv, n%2 == 1)
		now := storetest.Base
		for round := range 40 {
			now = now.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
			items := make([][]tokenlimit.Item, 1+rng.IntN(40))
			for i := range items {
				for _, k := range rng.Perm(len(limitOf))[:1+rng.IntN(3)*rng.IntN(2)] {
					l := limitOf[k]
					items[i] = append(items[i], tokenlimit.Item{Key: "{k}:" + strconv.Itoa(k), Limit: l, Cost: rng.Int64N(l.Capacity() + 2)})
				}
			}
			got, want := resultsFor(items), resultsFor(items)
			if err := redisstore.CheckInOneCall(red.(*redisstore.Store), now, items, got); err != nil {
				t.Fatalf("program %d, round %d: batch call: %v", n, round, err)
			}
			for i := range items {
				if _, err := mem.Check(context.Background(), now, items[i], want[i]); err != nil {
					t.Fatalf("program %d, round %d, check %d: memstore: %v", n, round, i, err)
				}
				if !slices.Equal(got[i], want[i]) {
					t.Fatalf("program %d, round %d, check %d of %d at +%s, items %+v:\nmemstore %+v\n   redis %+v", n, round, i, len(items), now.Sub(storetest.Base), items[i], want[i], got[i])
				}
			}
		}
	}
}

// resultsFor is a result slice for each check of items.
func resultsFor(items [][]tokenlimit.Item) [][]tokenlimit.Result {
	out := make([][]tokenlimit.Result, len(items))
	for i := range items {
		out[i] = make([]tokenlimit.Result, len(items[i]))
	}
	return out
}
