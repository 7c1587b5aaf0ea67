package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// cmdStat is one command's line of INFO commandstats.
type cmdStat struct {
	calls       int64
	usec        int64
	usecPerCall float64
}

// commandStats reads INFO commandstats: "cmdstat_evalsha:calls=3,usec=40,
// usec_per_call=13.33,rejected_calls=0,failed_calls=0" per command.
func commandStats(ctx context.Context, rdb *redis.Client) (map[string]cmdStat, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	stats := map[string]cmdStat{}
	for line := range strings.Lines(info) {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var s cmdStat
		for kv := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				s.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				s.usec, _ = strconv.ParseInt(v, 10, 64)
			case "usec_per_call":
				s.usecPerCall, _ = strconv.ParseFloat(v, 64)
			}
		}
		stats[strings.TrimPrefix(name, "cmdstat_")] = s
	}
	return stats, nil
}

// scriptCost is one script's cost inside Redis. The store's code runs as
// FCALL (Redis Functions) or EVALSHA; the seed script and redis_rate as
// EVALSHA: both commands' statistics count.
type scriptCost struct {
	usecPerCall     float64 // µs per FCALL or EVALSHA
	perDecision     float64 // calls per decision: 1 is one round trip
	usecPerDecision float64 // the calls' µs per decision
	evals           int64   // reloads: EVAL after NOSCRIPT, FUNCTION LOAD
	decisions       int64
}

// measureScript empties the server, makes n decisions to create the keys
// (not counted), resets the statistics, makes n more with 16 callers, and
// reads FCALL's and EVALSHA's statistics: the script alone ran in between.
func measureScript(ctx context.Context, rdb *redis.Client, decide decider, n int, keys []string) (scriptCost, error) {
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return scriptCost{}, err
	}
	if _, err := runCalls(ctx, decide, n, keys); err != nil {
		return scriptCost{}, err
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return scriptCost{}, err
	}
	done, err := runCalls(ctx, decide, n, keys)
	if err != nil {
		return scriptCost{}, err
	}
	stats, err := commandStats(ctx, rdb)
	if err != nil {
		return scriptCost{}, err
	}
	calls := stats["evalsha"].calls + stats["fcall"].calls
	usec := stats["evalsha"].usec + stats["fcall"].usec
	if calls == 0 {
		return scriptCost{}, fmt.Errorf("no EVALSHA or FCALL in INFO commandstats")
	}
	return scriptCost{
		usecPerCall:     float64(usec) / float64(calls),
		perDecision:     float64(calls) / float64(done),
		usecPerDecision: float64(usec) / float64(done),
		evals:           stats["eval"].calls + stats["function|load"].calls,
		decisions:       done,
	}, nil
}

// measureSet is measureScript's reference: n plain SETs of a short value.
func measureSet(ctx context.Context, rdb *redis.Client, set decider, n int, keys []string) (float64, error) {
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return 0, err
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return 0, err
	}
	if _, err := runCalls(ctx, set, n, keys); err != nil {
		return 0, err
	}
	stats, err := commandStats(ctx, rdb)
	if err != nil {
		return 0, err
	}
	return stats["set"].usecPerCall, nil
}

// runCalls makes n decisions with 16 callers and returns how many were made;
// any error stops it.
func runCalls(ctx context.Context, decide decider, n int, keys []string) (int64, error) {
	const callers = 16
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	errs := make(chan error, callers)
	per := n / callers
	for g := range callers {
		go func() {
			i := g * 7717
			for range per {
				i = (i + 7919) % len(keys)
				if _, err := decide(ctx, keys[i]); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range callers {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	if first != nil {
		return 0, fmt.Errorf("script calls: %w", first)
	}
	return int64(per * callers), nil
}
