package redisstore_test

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/algo"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/goredisclient"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
)

// skewedLimiter is a gateway replica whose clock is off by skew.
func skewedLimiter(t *testing.T, st tokenlimit.Store, skew time.Duration) *tokenlimit.Limiter {
	t.Helper()
	lim, err := tokenlimit.NewLimiter(st, tokenlimit.WithClock(func() time.Time { return time.Now().Add(skew) }))
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// TestServerTimeIgnoresSkewedCallerClocks: two replicas whose clocks are two
// hours apart share budgets exactly, because the store decides at the Redis
// server's TIME. In caller-time mode the same replicas disagree.
func TestServerTimeIgnoresSkewedCallerClocks(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	limits := []tokenlimit.Limit{
		tokenlimit.TokenBucketLimit(5, 5, time.Hour),
		tokenlimit.GCRALimit(4, 5, time.Hour),
		tokenlimit.SlidingLogLimit(5, time.Hour),
	}
	// admitted runs 20 alternating requests of cost 1 through two replicas,
	// one an hour behind and one an hour ahead.
	admitted := func(t *testing.T, opts redisstore.Options, l tokenlimit.Limit) (int, []tokenlimit.Decision) {
		behind := skewedLimiter(t, newStore(t, goredisclient.New(goRedisClient(t, srv.Addr())), opts), -time.Hour)
		ahead := skewedLimiter(t, newStore(t, rueidisclient.New(rueidisClient(t, srv.Addr())), opts), time.Hour)
		n := 0
		var decisions []tokenlimit.Decision
		for i := range 20 {
			lim := behind
			if i%2 == 1 {
				lim = ahead
			}
			d, err := lim.Check(context.Background(), tokenlimit.Item{Key: "shared", Limit: l, Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				n++
			}
			decisions = append(decisions, d)
		}
		return n, decisions
	}
	for _, l := range limits {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			n, decisions := admitted(t, redisstore.Options{Prefix: newPrefix()}, l)
			if n != 5 {
				t.Errorf("server time: %d admitted across the skewed replicas, want exactly 5", n)
			}
			for i, d := range decisions {
				if off := time.Since(d.At); off < -5*time.Second || off > 5*time.Second {
					t.Errorf("decision %d at %v, %v from the real time: not the server's clock", i, d.At, off)
				}
			}
			last := decisions[len(decisions)-1].Results[0]
			if last.Allowed || last.RetryAfter <= 0 || last.RetryAfter > l.Period {
				t.Errorf("last decision %+v, want denied with RetryAfter in (0, %v]", last, l.Period)
			}

			// Control: deciding at the callers' clocks, the replica an hour
			// ahead sees the other's charges as long past, and the two
			// together admit more than the limit.
			n, _ = admitted(t, redisstore.Options{Prefix: newPrefix(), CallerTime: true}, l)
			if n <= 5 {
				t.Errorf("caller time: %d admitted, want more than 5: the control shows nothing", n)
			}
		})
	}
}

// naiveAllow is the classic client-side limiter, unsafe under concurrency: read
// the counter, compare it with the limit, then increment it, in three steps
// that other clients interleave with. between runs after the GET.
func naiveAllow(ctx context.Context, c *redis.Client, key string, limit int64, between func()) (bool, error) {
	n, err := c.Get(ctx, key).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	between()
	if n >= limit {
		return false, nil
	}
	return true, c.Incr(ctx, key).Err()
}

// TestNaiveGetThenIncrOverAdmits shows the race that the Lua scripts close:
// two replicas × 64 goroutines that all read the counter before any of them
// increments it admit every request, far over the limit; the same workload
// through the store admits exactly the limit.
func TestNaiveGetThenIncrOverAdmits(t *testing.T) {
	t.Parallel()
	const (
		replicas   = 2
		goroutines = 64
		limit      = 10
	)
	srv := redistest.Start(t)
	ctx := context.Background()

	t.Run("naive GET then INCR", func(t *testing.T) {
		t.Parallel()
		key := newPrefix() + "naive"
		var (
			wg       sync.WaitGroup
			read     sync.WaitGroup // every goroutine has done its GET
			admitted atomic.Int64
		)
		read.Add(replicas * goroutines)
		for range replicas {
			c := goRedisClient(t, srv.Addr())
			for range goroutines {
				wg.Go(func() {
					ok, err := naiveAllow(ctx, c, key, limit, func() { read.Done(); read.Wait() })
					if err != nil {
						t.Error(err)
					}
					if ok {
						admitted.Add(1)
					}
				})
			}
		}
		wg.Wait()
		if n := admitted.Load(); n <= limit {
			t.Fatalf("the naive limiter admitted %d, want more than the limit %d", n, limit)
		}
		if n := admitted.Load(); n != replicas*goroutines {
			t.Errorf("the naive limiter admitted %d, want all %d: every GET saw 0", n, replicas*goroutines)
		}
		count, err := goRedisClient(t, srv.Addr()).Get(ctx, key).Int64()
		if err != nil || count != replicas*goroutines {
			t.Errorf("counter %d (%v), want %d", count, err, replicas*goroutines)
		}
	})

	for _, l := range []tokenlimit.Limit{
		tokenlimit.FixedWindowLimit(limit, time.Hour),
		tokenlimit.TokenBucketLimit(limit, 1, time.Hour),
	} {
		t.Run("store "+l.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			opts := redisstore.Options{Prefix: newPrefix(), CallerTime: true}
			at := time.Now() // one instant for every replica: one window, no refill
			var (
				wg       sync.WaitGroup
				ready    sync.WaitGroup // every goroutine is about to check
				admitted atomic.Int64
			)
			ready.Add(replicas * goroutines)
			for range replicas {
				st := newStore(t, goredisclient.New(goRedisClient(t, srv.Addr())), opts)
				for range goroutines {
					wg.Go(func() {
						ready.Done()
						ready.Wait()
						results := make([]tokenlimit.Result, 1)
						if _, err := st.Check(ctx, at, []tokenlimit.Item{{Key: "k", Limit: l, Cost: 1}}, results); err != nil {
							t.Error(err)
							return
						}
						if results[0].Allowed {
							admitted.Add(1)
						}
					})
				}
			}
			wg.Wait()
			if n := admitted.Load(); n != limit {
				t.Errorf("the store admitted %d of %d concurrent requests, want exactly the limit %d", n, replicas*goroutines, limit)
			}
		})
	}
}

// TestRestartRecoversWithoutActionGoRedis: a Redis restart loses the data,
// the script cache and the functions; the next check succeeds anyway,
// reloading the code (FUNCTION LOAD, or EVAL after NOSCRIPT), and sees
// fresh budgets.
func TestRestartRecoversWithoutActionGoRedis(t *testing.T) {
	t.Parallel()
	for _, path := range codePaths {
		t.Run(path.name, func(t *testing.T) {
			testRestartRecovers(t, path.call, path.reload, 1+path.missed, func(t *testing.T, addr string) *redisstore.Store {
				return path.wrap(newStore(t, goredisclient.New(goRedisClient(t, addr)), redisstore.Options{Prefix: newPrefix()}))
			})
		})
	}
}

// testRestartRecovers runs the restart on a store that runs its code with
// call (fcall or evalsha) and reloads it with reload; runs is how many
// calls commandstats counts for the first check after the restart.
func testRestartRecovers(t *testing.T, call, reload string, runs int, open func(t *testing.T, addr string) *redisstore.Store) {
	srv := redistest.Start(t)
	st := open(t, srv.Addr())
	lim, err := tokenlimit.NewLimiter(st)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := tokenlimit.TokenBucketLimit(10, 1, time.Hour)
	if r, err := lim.AllowN(ctx, "k", l, 4); err != nil || r.Remaining != 6 {
		t.Fatalf("before the restart: %+v, %v; want 6 left", r, err)
	}

	srv.Restart()

	r, err := lim.AllowN(ctx, "k", l, 1)
	if err != nil {
		t.Fatalf("first check after the restart: %v", err)
	}
	if !r.Allowed || r.Remaining != 9 {
		t.Errorf("first check after the restart: %+v, want allowed with 9 left (the data was lost)", r)
	}
	calls := commandCalls(t, srv)
	if calls[reload] != 1 || calls[call] != runs {
		t.Errorf("after the restart: %d %s and %d %s calls, want %d and 1 (the reload); commandstats %v", calls[call], call, calls[reload], reload, runs, calls)
	}
	if r, err := lim.AllowN(ctx, "k", l, 1); err != nil || r.Remaining != 8 {
		t.Errorf("second check after the restart: %+v, %v; want 8 left", r, err)
	}
	if calls := commandCalls(t, srv); calls[reload] != 1 {
		t.Errorf("the code was loaded again: %d %s calls, want 1", calls[reload], reload)
	}
}

// TestRedisDownIsAnError: with Redis gone, a check fails within the caller's
// deadline, neither panicking nor allowing; when Redis returns, checks work
// again with no action.
func TestRedisDownIsAnError(t *testing.T) {
	t.Parallel()
	clients := map[string]func(t *testing.T, addr string) redisstore.Scripter{
		"go-redis": func(t *testing.T, addr string) redisstore.Scripter { return goredisclient.New(goRedisClient(t, addr)) },
		"rueidis":  func(t *testing.T, addr string) redisstore.Scripter { return rueidisclient.New(rueidisClient(t, addr)) },
	}
	for name, dial := range clients {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			st := newStore(t, dial(t, srv.Addr()), redisstore.Options{Prefix: newPrefix()})
			lim, err := tokenlimit.NewLimiter(st)
			if err != nil {
				t.Fatal(err)
			}
			l := tokenlimit.TokenBucketLimit(10, 1, time.Hour)
			if _, err := lim.Allow(context.Background(), "k", l); err != nil {
				t.Fatal(err)
			}

			srv.Stop()

			const deadline = time.Second
			for i := range 2 {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				start := time.Now()
				d, err := lim.Check(ctx, tokenlimit.Item{Key: "k", Limit: l, Cost: 1})
				took := time.Since(start)
				cancel()
				if err == nil {
					t.Fatalf("check %d with Redis down: %+v and no error", i, d)
				}
				if d.Allowed || len(d.Results) != 0 {
					t.Errorf("check %d with Redis down: decision %+v alongside the error, want the zero Decision", i, d)
				}
				if errors.Is(err, tokenlimit.ErrInvalid) {
					t.Errorf("check %d: %v matches ErrInvalid; a store failure is not invalid input", i, err)
				}
				if took > deadline+time.Second {
					t.Errorf("check %d took %v, past the %v deadline", i, took, deadline)
				}
			}
			_, err = lim.Reserve(context.Background(), tokenlimit.Item{Key: "k", Limit: l, Cost: 1})
			if err == nil {
				t.Error("Reserve with Redis down: no error")
			}

			srv.Restart()
			assertRecovers(t, lim, l)
		})
	}
}

// assertRecovers checks what the store promises once Redis is back: checks
// succeed again with no action. The first call may still fail on a
// connection that died with the old server, since a plain check is never
// retried (after a lost reply nobody knows whether Redis ran the script, and
// a retry could charge twice); the caller's failure mode answers that call.
// So a few calls may fail, each a store error, never invalid input; then a
// call succeeds and sees the fresh budget, less at most what the failed calls
// may have charged.
func assertRecovers(t *testing.T, lim *tokenlimit.Limiter, l tokenlimit.Limit) {
	t.Helper()
	const maxFailures = 3
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var failures []error
	for len(failures) <= maxFailures {
		r, err := lim.Allow(ctx, "k", l)
		if err == nil {
			if !r.Allowed || r.Remaining > 9 || r.Remaining < 9-int64(len(failures)) {
				t.Errorf("first successful check after Redis returned: %+v after %d failed calls; want allowed with 9 left, less at most one per failed call", r, len(failures))
			}
			return
		}
		if errors.Is(err, tokenlimit.ErrInvalid) {
			t.Fatalf("check after Redis returned: %v matches ErrInvalid", err)
		}
		failures = append(failures, err)
	}
	t.Errorf("after Redis returned, %d checks in a row failed: %v", len(failures), failures)
}

// TestLuaBoundsMatchGo reads the constants that lib.lua repeats from Go and
// compares them.
func TestLuaBoundsMatchGo(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("lua/lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	luaConst := func(name string) int64 {
		t.Helper()
		m := regexp.MustCompile(`(?m)^local ` + name + ` = (\d+)`).FindSubmatch(src)
		if m == nil {
			t.Fatalf("lib.lua defines no %s", name)
		}
		v, err := strconv.ParseInt(string(m[1]), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		name string
		want int64
	}{
		{"MAX_LOG_ENTRIES", algo.MaxLogEntries},
		{"MAX_LOG_ENTRIES", tokenlimit.MaxLogEntries},
		{"MAX_FIXED_COUNT", 2 * tokenlimit.MaxQuota}, // algo's maxFixedCount, 2^41
		{"MAX_SLIDING_COUNT", tokenlimit.MaxSlidingCounterQuota},
	} {
		if got := luaConst(c.name); got != c.want {
			t.Errorf("lib.lua: %s = %d, Go has %d", c.name, got, c.want)
		}
	}
	m := regexp.MustCompile(`(?m)^local FIXED_WINDOW, SLIDING_LOG, SLIDING_COUNTER = (\d+), (\d+), (\d+)`).FindSubmatch(src)
	if m == nil {
		t.Fatal("lib.lua defines no algorithm codes")
	}
	for i, a := range []tokenlimit.Algorithm{tokenlimit.FixedWindow, tokenlimit.SlidingLog, tokenlimit.SlidingCounter} {
		if got := string(m[i+1]); got != strconv.Itoa(int(a)) {
			t.Errorf("lib.lua codes %s as %s, Go as %d", a, got, int(a))
		}
	}
}
