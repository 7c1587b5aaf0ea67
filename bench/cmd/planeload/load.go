package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
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
	cpu       time.Duration      // this process
	redisCPU  time.Duration      // redis-server
	commands  map[string]cmdStat // INFO commandstats, the slice's delta
	// this process's heap allocations (bytes and objects) and garbage
	// collections during the slice
	allocBytes, allocs, collections int64
}

// cmdStat is one command's line of INFO commandstats: its calls and the
// microseconds redis-server spent in them.
type cmdStat struct{ calls, usec int64 }

func (t turn) perSecond() float64 { return float64(t.decisions) / t.elapsed.Seconds() }

// measure warms each variant up, then runs o.runs rounds of one turn per
// variant, the first variant alternating between rounds, and writes a line
// per turn to log.
func measure(ctx context.Context, e *env, o options, log io.Writer) ([]turn, error) {
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
			t, err := oneTurn(ctx, e, v, o, r)
			if err != nil {
				return nil, fmt.Errorf("%s, round %d: %w", v.name, r+1, err)
			}
			fmt.Fprintf(log, "round %d %-5s %7d decisions in %v: %6.0f/s, service %5.1f µs, redis-server %5.1f µs a decision; load %s\n",
				r+1, v.name, t.decisions, t.elapsed.Round(time.Millisecond), t.perSecond(),
				float64(t.cpu.Microseconds())/float64(t.decisions), float64(t.redisCPU.Microseconds())/float64(t.decisions), loadAverage())
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
		before, err := commandStats(ctx, e.admin)
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
func since(ctx context.Context, e *env, name string, before map[string]cmdStat, n int64, elapsed time.Duration) (turn, error) {
	after, err := commandStats(ctx, e.admin)
	if err != nil {
		return turn{}, err
	}
	t := turn{variant: name, decisions: n, elapsed: elapsed, commands: map[string]cmdStat{}}
	for cmd, s := range after {
		if d := s.calls - before[cmd].calls; d > 0 && cmd != "info" {
			t.commands[cmd] = cmdStat{calls: d, usec: s.usec - before[cmd].usec}
		}
	}
	return t, nil
}

// oneTurn runs v's turn of round r, under a CPU profile of this process
// with -cpuprofile.
func oneTurn(ctx context.Context, e *env, v variant, o options, r int) (turn, error) {
	before, err := commandStats(ctx, e.admin)
	if err != nil {
		return turn{}, err
	}
	// A turn starts after a full collection: it pays for collecting its
	// own garbage only, not for the turn before it.
	runtime.GC()
	stopProfile, err := startProfile(o.cpuProfile, fmt.Sprintf("%s.%d", v.name, r+1))
	if err != nil {
		return turn{}, err
	}
	var mem0, mem1 runtime.MemStats
	runtime.ReadMemStats(&mem0)
	cpu0, _ := runstat.CPUTime(0)
	rcpu0, _ := runstat.CPUTime(e.srv.Pid())
	start := time.Now()
	n, err := load(ctx, e.svc, v.keys, o.callers, o.slice)
	elapsed := time.Since(start)
	cpu1, _ := runstat.CPUTime(0)
	rcpu1, _ := runstat.CPUTime(e.srv.Pid())
	runtime.ReadMemStats(&mem1)
	if err := errors.Join(err, stopProfile()); err != nil {
		return turn{}, err
	}
	t, err := since(ctx, e, v.name, before, n, elapsed)
	t.round, t.cpu, t.redisCPU = r, cpu1-cpu0, rcpu1-rcpu0
	t.allocBytes, t.allocs = int64(mem1.TotalAlloc-mem0.TotalAlloc), int64(mem1.Mallocs-mem0.Mallocs)
	t.collections = int64(mem1.NumGC - mem0.NumGC)
	return t, err
}

// startProfile starts a CPU profile of this process written to
// prefix.suffix, and returns the function that stops it; with no prefix
// it does nothing.
func startProfile(prefix, suffix string) (stop func() error, err error) {
	if prefix == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(prefix + "." + suffix)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
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

// commandStats reads the calls and microseconds of every command from INFO
// commandstats ("cmdstat_evalsha:calls=3,usec=40,...").
func commandStats(ctx context.Context, c rueidis.Client) (map[string]cmdStat, error) {
	info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	out := map[string]cmdStat{}
	for line := range strings.Lines(info) {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var s cmdStat
		for kv := range strings.SplitSeq(fields, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				s.calls, _ = strconv.ParseInt(v, 10, 64)
			} else if v, ok := strings.CutPrefix(kv, "usec="); ok {
				s.usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = s
	}
	return out, nil
}
