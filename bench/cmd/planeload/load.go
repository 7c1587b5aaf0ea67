package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokenlimit/tokenlimit/bench/internal/runstat"
	"github.com/tokenlimit/tokenlimit/service"
)

// variant is a way of giving the three limits: the keys its callers use.
type variant struct {
	name string
	keys []string
}

// turn is one variant's measured slice.
type turn struct {
	variant   string
	round     int
	decisions int64
	elapsed   time.Duration
	cpu       time.Duration    // this process
	redisCPU  time.Duration    // redis-server
	commands  map[string]int64 // INFO commandstats calls, the slice's delta
}

func (t turn) perSecond() float64 { return float64(t.decisions) / t.elapsed.Seconds() }

// measure warms each variant up, then runs o.runs rounds of one turn per
// variant, the first variant alternating between rounds.
func measure(ctx context.Context, e *env, o options) ([]turn, error) {
	vs := []variant{{"yaml", e.yamlKeys}, {"plane", e.planeKeys}}
	for _, v := range vs {
		if _, err := load(ctx, e.svc, v.keys, o.callers, o.warmup); err != nil {
			return nil, fmt.Errorf("%s warm-up: %w", v.name, err)
		}
	}
	var turns []turn
	for r := range o.runs {
		for i := range vs {
			v := vs[(i+r)%len(vs)]
			t, err := oneTurn(ctx, e, v, o)
			if err != nil {
				return nil, fmt.Errorf("%s, round %d: %w", v.name, r+1, err)
			}
			t.round = r
			turns = append(turns, t)
		}
	}
	return turns, nil
}

// sequential makes o.sequential decisions per variant one at a time and
// returns each variant's turn: with no call in flight to queue behind, the
// store batches nothing, so its commands per decision are the round trips.
func sequential(ctx context.Context, e *env, o options) ([]turn, error) {
	var out []turn
	for _, v := range []variant{{"yaml", e.yamlKeys}, {"plane", e.planeKeys}} {
		before, err := commandCalls(ctx, e.admin)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		for i := range o.sequential {
			k := v.keys[i*7919%len(v.keys)]
			d, err := e.svc.Check(ctx, service.Request{Descriptors: map[string]string{"api_key": k}})
			if err != nil || !d.Allowed || len(d.Limits) != 3 {
				return nil, fmt.Errorf("%s: %+v, %v: want allowed under three limits", v.name, d, err)
			}
		}
		t, err := since(ctx, e, v.name, before, int64(o.sequential), time.Since(start))
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// since returns a turn of n decisions whose commands are those counted
// after minus before.
func since(ctx context.Context, e *env, name string, before map[string]int64, n int64, elapsed time.Duration) (turn, error) {
	after, err := commandCalls(ctx, e.admin)
	if err != nil {
		return turn{}, err
	}
	t := turn{variant: name, decisions: n, elapsed: elapsed, commands: map[string]int64{}}
	for cmd, calls := range after {
		if d := calls - before[cmd]; d > 0 && cmd != "info" {
			t.commands[cmd] = d
		}
	}
	return t, nil
}

func oneTurn(ctx context.Context, e *env, v variant, o options) (turn, error) {
	before, err := commandCalls(ctx, e.admin)
	if err != nil {
		return turn{}, err
	}
	cpu0, _ := runstat.CPUTime(0)
	rcpu0, _ := runstat.CPUTime(e.srv.Pid())
	start := time.Now()
	n, err := load(ctx, e.svc, v.keys, o.callers, o.slice)
	elapsed := time.Since(start)
	cpu1, _ := runstat.CPUTime(0)
	rcpu1, _ := runstat.CPUTime(e.srv.Pid())
	if err != nil {
		return turn{}, err
	}
	t, err := since(ctx, e, v.name, before, n, elapsed)
	t.cpu, t.redisCPU = cpu1-cpu0, rcpu1-rcpu0
	return t, err
}

// load runs callers goroutines checking a key's three limits for d, each
// walking keys from its own start, and returns the decisions made. A
// decision that fails or denies is an error: every limit admits all.
func load(ctx context.Context, svc *service.Service, keys []string, callers int, d time.Duration) (int64, error) {
	var total atomic.Int64
	var stop atomic.Bool
	var firstErr error
	var once sync.Once
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			i := c * len(keys) / callers
			var n int64
			for !stop.Load() && ctx.Err() == nil {
				i += 7919
				for i >= len(keys) {
					i -= len(keys)
				}
				dec, err := svc.Check(ctx, service.Request{Descriptors: map[string]string{"api_key": keys[i]}})
				if err == nil && (!dec.Allowed || len(dec.Limits) != 3) {
					err = fmt.Errorf("%+v: want allowed under three limits", dec)
				}
				if err != nil {
					once.Do(func() { firstErr = err })
					stop.Store(true)
					break
				}
				n++
			}
			total.Add(n)
		})
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return total.Load(), firstErr
}

// commandCalls reads the calls of every command from INFO commandstats
// ("cmdstat_evalsha:calls=3,usec=40,...").
func commandCalls(ctx context.Context, c rueidis.Client) (map[string]int64, error) {
	info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	out := map[string]int64{}
	for line := range strings.Lines(info) {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for kv := range strings.SplitSeq(fields, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				out[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return out, nil
}
