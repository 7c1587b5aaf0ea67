package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
)

// The script anatomy: where the time of our token-bucket check goes inside
// Redis, measured by running variants of it, each alone, like the script
// cost table. The engine's script is captured as the store sends it (its
// source comes with the EVAL that follows the first NOSCRIPT), so the
// figures follow the engine's current Lua.

// recorder is a Scripter that remembers the last script source, keys and
// arguments it passed on.
type recorder struct {
	next redisstore.Scripter
	mu   sync.Mutex
	src  string
	keys []string
	args []string
}

func (r *recorder) EvalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	r.note("", keys, args)
	return r.next.EvalSHA(ctx, sha, keys, args)
}

func (r *recorder) Eval(ctx context.Context, src string, keys, args []string) ([]int64, error) {
	r.note(src, keys, args)
	return r.next.Eval(ctx, src, keys, args)
}

func (r *recorder) note(src string, keys, args []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if src != "" {
		r.src = src
	}
	r.keys, r.args = keys, args
}

// anatomyRow is one variant: how to call it, and which command's statistics
// hold its cost.
type anatomyRow struct {
	name    string
	command string // "evalsha" or "fcall"
	decide  decider
	err     error // why the row could not be measured
}

// anatomyRows builds the variants around our token-bucket check.
func anatomyRows(ctx context.Context, c *clients) ([]anatomyRow, error) {
	rec := &recorder{next: rueidisclient.New(c.rueidis)}
	st, err := redisstore.New(rec, redisstore.Options{})
	if err != nil {
		return nil, err
	}
	if err := c.goredis.ScriptFlush(ctx).Err(); err != nil {
		return nil, err
	}
	results := make([]tokenlimit.Result, 1)
	if _, err := st.Check(ctx, time.Now(), []tokenlimit.Item{{Key: memoryKey, Limit: ourTokenBucket, Cost: 1}}, results); err != nil {
		return nil, err
	}
	if rec.src == "" {
		return nil, errors.New("the store sent no script source after SCRIPT FLUSH")
	}
	if err := c.loadSeed(ctx); err != nil { // SCRIPT FLUSH dropped it
		return nil, err
	}
	full, args := rec.src, rec.args
	keyOf := func(key string) string { return st.Key(key, tokenlimit.TokenBucket) }

	evalsha := func(src string) decider {
		sha, err := c.goredis.ScriptLoad(ctx, src).Result()
		if err != nil {
			return func(context.Context, string) (bool, error) { return false, err }
		}
		return func(ctx context.Context, key string) (bool, error) {
			cmd := c.rueidis.B().Evalsha().Sha1(sha).Numkeys(1).Key(keyOf(key)).Arg(args...).Build()
			return true, c.rueidis.Do(ctx, cmd).Error()
		}
	}
	rows := []anatomyRow{
		{name: "`return 1`: the floor of any EVALSHA", command: "evalsha", decide: evalsha("return 1")},
		{name: "TIME, GET, SET PX and a 5-value reply, no arithmetic: the floor of a server-time read-modify-write with a TTL", command: "evalsha",
			decide: evalsha("redis.call('TIME')\nredis.call('GET', KEYS[1])\nredis.call('SET', KEYS[1], '1764480000123456', 'PX', '1000')\nreturn {1, 0, 99, 0, 10000}\n")},
	}

	// The script a one-item check sends ends with the call of its entry
	// point, "return check(KEYS, ARGV)": without it, the script
	// only builds its functions.
	trimmed := strings.TrimRight(full, "\n")
	if cut := strings.LastIndex(trimmed, "\n"); cut < 0 || !strings.HasPrefix(trimmed[cut+1:], "return ") {
		rows = append(rows, anatomyRow{name: "the engine's function definitions alone", err: errors.New("the script the store sends does not end with the call of its entry point")})
	} else {
		rows = append(rows, anatomyRow{name: "the engine's script without the call of its entry point, then `return 1`: building its functions", command: "evalsha", decide: evalsha(trimmed[:cut] + "\nreturn 1\n")})
	}
	rows = append(rows, anatomyRow{name: "the engine's script as sent (EVALSHA, the fallback without Redis Functions)", command: "evalsha", decide: evalsha(full)})
	rows = append(rows, anatomyRow{name: "the engine as a Redis Function (its library, FCALL: = ours token_bucket)", command: "fcall",
		decide: ours(ourLimiterWith(rueidisclient.New(c.rueidis), redisstore.Options{Unbatched: true}), ourTokenBucket)})
	rows = append(rows, anatomyRow{name: "seed token_bucket.lua (HMGET, HMSET, PEXPIRE; caller's clock)", command: "evalsha", decide: seedRueidis(c)})
	return rows, nil
}

// measureAnatomy measures one row like measureScript, reading the
// statistics of the row's command.
func measureAnatomy(ctx context.Context, rdb *redis.Client, row anatomyRow, n int, keys []string) (float64, error) {
	if row.err != nil {
		return 0, row.err
	}
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		return 0, err
	}
	if _, err := runCalls(ctx, row.decide, n, keys); err != nil {
		return 0, err
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return 0, err
	}
	if _, err := runCalls(ctx, row.decide, n, keys); err != nil {
		return 0, err
	}
	stats, err := commandStats(ctx, rdb)
	if err != nil {
		return 0, err
	}
	s, ok := stats[row.command]
	if !ok {
		return 0, fmt.Errorf("no %s in INFO commandstats", row.command)
	}
	return s.usecPerCall, nil
}
