package main

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/goredisclient"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
)

// seedTokenBucket is a classic client-side token-bucket script, kept
// verbatim (seed_token_bucket.lua) as the baseline to beat: a HASH of
// tokens and ts, the caller's clock in ms, float refill per ms, three
// commands (HMGET, HMSET, PEXPIRE).
//
//go:embed seed_token_bucket.lua
var seedTokenBucket string

// The limit every variant enforces: 100 per second, bursts of 100. With the
// 10k keys the load is spread over, every decision fits (the "allowed"
// column checks it), so every variant runs its read-modify-write path.
const (
	perSecond = 100
	burst     = 100
)

var (
	ourTokenBucket    = tokenlimit.TokenBucketLimit(burst, perSecond, time.Second)
	ourGCRA           = tokenlimit.GCRALimit(burst-1, perSecond, time.Second)
	ourFixedWindow    = tokenlimit.FixedWindowLimit(perSecond, time.Second)
	ourSlidingCounter = tokenlimit.SlidingCounterLimit(perSecond, time.Second)
	ourSlidingLog     = tokenlimit.SlidingLogLimit(perSecond, time.Second)
	rateLimit         = redis_rate.PerSecond(perSecond)
)

// decider makes one rate-limit decision for key.
type decider func(ctx context.Context, key string) (allowed bool, err error)

// variant is one way of deciding, measured under load.
type variant struct {
	name   string
	decide decider
}

// clients are the Redis clients every variant uses: one go-redis client
// (a connection pool, the defaults: PoolSize 10 per GOMAXPROCS) and one
// rueidis client (auto-pipelining concurrent calls on shared connections).
type clients struct {
	goredis *redis.Client
	rueidis rueidis.Client
	seedSHA string
}

func newClients(ctx context.Context, addr string) (*clients, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	rue, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		rdb.Close()
		return nil, fmt.Errorf("rueidis: %w", err)
	}
	c := &clients{goredis: rdb, rueidis: rue}
	if err := c.loadSeed(ctx); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// loadSeed loads the seed script (again after a FLUSHALL would not need it,
// but SCRIPT FLUSH would): the seed variants call EVALSHA only.
func (c *clients) loadSeed(ctx context.Context) error {
	sha, err := c.goredis.ScriptLoad(ctx, seedTokenBucket).Result()
	if err != nil {
		return fmt.Errorf("SCRIPT LOAD seed token bucket: %w", err)
	}
	c.seedSHA = sha
	return nil
}

func (c *clients) close() {
	c.goredis.Close()
	c.rueidis.Close()
}

// ourLimiter is a tokenlimit.Limiter on the Redis store (server time, the
// production setup: the zero Options) through the given adapter.
func ourLimiter(s redisstore.Scripter) *tokenlimit.Limiter {
	return ourLimiterWith(s, redisstore.Options{})
}

func ourLimiterWith(s redisstore.Scripter, opts redisstore.Options) *tokenlimit.Limiter {
	st, err := redisstore.New(s, opts)
	if err != nil {
		panic(err) // only a nil client fails
	}
	lim, err := tokenlimit.NewLimiter(st)
	if err != nil {
		panic(err)
	}
	return lim
}

func ours(lim *tokenlimit.Limiter, l tokenlimit.Limit) decider {
	return func(ctx context.Context, key string) (bool, error) {
		r, err := lim.AllowN(ctx, key, l, 1)
		return r.Allowed, err
	}
}

// oursMulti checks three limits for one request in one call: a token
// bucket, a sliding-counter cap and a fixed-window quota on the same key.
func oursMulti(lim *tokenlimit.Limiter) decider {
	return func(ctx context.Context, key string) (bool, error) {
		d, err := lim.Check(ctx,
			tokenlimit.Item{Key: key, Limit: ourTokenBucket, Cost: 1},
			tokenlimit.Item{Key: key, Limit: ourSlidingCounter, Cost: 1},
			tokenlimit.Item{Key: key, Limit: tokenlimit.FixedWindowLimit(1_000_000, 24*time.Hour), Cost: 1},
		)
		return d.Allowed, err
	}
}

// The seed script's arguments: capacity 100, 0.1 token per ms, cost 1.
const (
	seedCapacity = "100"
	seedRefill   = "0.1"
	seedCost     = "1"
)

// seedKey is the key the seed script's comment suggests, rl:tb:{user},
// with "seed" in place of "tb" so that it never meets our token bucket's
// keys (a string) on the same server.
func seedKey(key string) string { return "rl:seed:{" + key + "}" }

func seedGoRedis(c *clients) decider {
	return func(ctx context.Context, key string) (bool, error) {
		now := strconv.FormatInt(time.Now().UnixMilli(), 10)
		v, err := c.goredis.EvalSha(ctx, c.seedSHA, []string{seedKey(key)}, now, seedCapacity, seedRefill, seedCost).Int64Slice()
		if err != nil {
			return false, err
		}
		return v[0] == 1, nil
	}
}

func seedRueidis(c *clients) decider {
	return func(ctx context.Context, key string) (bool, error) {
		now := strconv.FormatInt(time.Now().UnixMilli(), 10)
		cmd := c.rueidis.B().Evalsha().Sha1(c.seedSHA).Numkeys(1).Key(seedKey(key)).Arg(now, seedCapacity, seedRefill, seedCost).Build()
		v, err := c.rueidis.Do(ctx, cmd).AsIntSlice()
		if err != nil {
			return false, err
		}
		return v[0] == 1, nil
	}
}

// ping is a bare auto-pipelined rueidis PING: the most a client can ask
// of this Redis, the ceiling of any one-command-per-decision limiter.
func ping(c *clients) decider {
	return func(ctx context.Context, _ string) (bool, error) {
		err := c.rueidis.Do(ctx, c.rueidis.B().Ping().Build()).Error()
		return err == nil, err
	}
}

func redisRate(c *clients) decider {
	lim := redis_rate.NewLimiter(c.goredis)
	return func(ctx context.Context, key string) (bool, error) {
		r, err := lim.Allow(ctx, key, rateLimit)
		if err != nil {
			return false, err
		}
		return r.Allowed > 0, nil
	}
}

// Variant names, which the report looks up.
const (
	vRedisRate       = "redis_rate v10 Allow (go-redis pool)"
	vOursTBGoRedis   = "ours token bucket (go-redis pool)"
	vOursTBRueidis   = "ours token bucket (rueidis)"
	vOursTBUnbatched = "ours token bucket (rueidis, Unbatched)"
	vOursMulti       = "ours 3 limits tb+sc+fw (rueidis)"
	vOursMultiUnb    = "ours 3 limits tb+sc+fw (rueidis, Unbatched)"
	vPing            = "bare rueidis PING"
	vOursGCRARueidis = "ours GCRA (rueidis)"
	vSeedGoRedis     = "seed token_bucket.lua (go-redis pool, EVALSHA)"
	vSeedRueidis     = "seed token_bucket.lua (rueidis)"

	sOursTB   = "ours token_bucket"
	sOursGCRA = "ours gcra"
	sSeed     = "seed token_bucket.lua"
)

// loadVariants are the variants of the throughput table, in its order.
func loadVariants(c *clients) []variant {
	viaGoRedis := ourLimiter(goredisclient.New(c.goredis))
	viaRueidis := ourLimiter(rueidisclient.New(c.rueidis))
	unbatched := ourLimiterWith(rueidisclient.New(c.rueidis), redisstore.Options{Unbatched: true})
	return []variant{
		{vRedisRate, redisRate(c)},
		{vOursTBGoRedis, ours(viaGoRedis, ourTokenBucket)},
		{vOursTBRueidis, ours(viaRueidis, ourTokenBucket)},
		{vOursTBUnbatched, ours(unbatched, ourTokenBucket)},
		{vOursGCRARueidis, ours(viaRueidis, ourGCRA)},
		{vOursMulti, oursMulti(viaRueidis)},
		{vOursMultiUnb, oursMulti(unbatched)},
		{vPing, ping(c)},
		{vSeedGoRedis, seedGoRedis(c)},
		{vSeedRueidis, seedRueidis(c)},
	}
}

// scriptVariants are the scripts whose cost inside Redis is measured, each
// run alone so that the EVALSHA statistics are its own. All go through
// rueidis except redis_rate, which needs go-redis.
func scriptVariants(c *clients) []variant {
	viaRueidis := ourLimiter(rueidisclient.New(c.rueidis))
	return []variant{
		{sOursTB, ours(viaRueidis, ourTokenBucket)},
		{sOursGCRA, ours(viaRueidis, ourGCRA)},
		{"ours fixed_window", ours(viaRueidis, ourFixedWindow)},
		{"ours sliding_counter", ours(viaRueidis, ourSlidingCounter)},
		{"ours sliding_log", ours(viaRueidis, ourSlidingLog)},
		{"ours 3 limits in one check (tb + sc + fw)", oursMulti(viaRueidis)},
		{sSeed, seedRueidis(c)},
		{"redis_rate v10 (GCRA)", redisRate(c)},
	}
}
