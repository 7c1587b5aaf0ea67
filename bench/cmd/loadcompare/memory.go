package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
)

// memoryKey is the realistic key whose memory is measured.
const memoryKey = "user=12345"

// keyMemory is what one budget takes in Redis after one decision.
type keyMemory struct {
	name  string
	keys  []string // Redis keys
	kinds []string // TYPE/encoding of each
	bytes []int64  // MEMORY USAGE of each
	ttl   time.Duration
}

func (m keyMemory) total() int64 {
	var t int64
	for _, b := range m.bytes {
		t += b
	}
	return t
}

// measureMemory makes one cost-1 decision per algorithm, on an empty
// server each time, and reads MEMORY USAGE (SAMPLES 0: every element) of
// the keys it left.
func measureMemory(ctx context.Context, c *clients) ([]keyMemory, error) {
	st, err := redisstore.New(rueidisclient.New(c.rueidis), redisstore.Options{})
	if err != nil {
		return nil, err
	}
	lim, err := tokenlimit.NewLimiter(st)
	if err != nil {
		return nil, err
	}
	var out []keyMemory
	for _, l := range []tokenlimit.Limit{ourTokenBucket, ourGCRA, ourFixedWindow, ourSlidingCounter, ourSlidingLog} {
		m, err := keysAfter(ctx, c, "ours "+l.Algorithm.String(), func() error {
			_, err := lim.AllowN(ctx, memoryKey, l, 1)
			return err
		})
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	m, err := keysAfter(ctx, c, "redis_rate v10", func() error {
		_, err := redis_rate.NewLimiter(c.goredis).Allow(ctx, memoryKey, rateLimit)
		return err
	})
	if err != nil {
		return nil, err
	}
	out = append(out, m)
	m, err = keysAfter(ctx, c, "seed token_bucket.lua", func() error {
		_, err := seedRueidis(c)(ctx, memoryKey)
		return err
	})
	if err != nil {
		return nil, err
	}
	return append(out, m), nil
}

func keysAfter(ctx context.Context, c *clients, name string, decide func() error) (keyMemory, error) {
	rdb := c.goredis
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return keyMemory{}, err
	}
	if err := decide(); err != nil {
		return keyMemory{}, fmt.Errorf("%s: %w", name, err)
	}
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		return keyMemory{}, err
	}
	m := keyMemory{name: name}
	for _, k := range keys {
		n, err := rdb.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			return keyMemory{}, fmt.Errorf("MEMORY USAGE %s: %w", k, err)
		}
		typ, _ := rdb.Type(ctx, k).Result()
		enc, _ := rdb.ObjectEncoding(ctx, k).Result()
		ttl, _ := rdb.PTTL(ctx, k).Result()
		m.keys = append(m.keys, k)
		m.kinds = append(m.kinds, typ+"/"+enc)
		m.bytes = append(m.bytes, n)
		m.ttl = max(m.ttl, ttl)
	}
	if len(m.keys) == 0 {
		return keyMemory{}, fmt.Errorf("%s left no key", name)
	}
	return m, nil
}

func (m keyMemory) describe() (keys, kinds, bytes string) {
	var b []string
	for _, n := range m.bytes {
		b = append(b, fmt.Sprint(n))
	}
	return "`" + strings.Join(m.keys, "` + `") + "`", strings.Join(m.kinds, " + "), strings.Join(b, " + ")
}
