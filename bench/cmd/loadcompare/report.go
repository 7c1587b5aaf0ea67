package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/tokenlimit/tokenlimit/bench/internal/runstat"
)

// report writes the markdown; the first write error sticks in err.
type report struct {
	out io.Writer
	err error
}

func (w *report) printf(format string, a ...any) {
	if w.err == nil {
		_, w.err = fmt.Fprintf(w.out, format, a...)
	}
}

func (w *report) header(cfg config, m machineInfo) {
	w.printf("# loadcompare — %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	w.printf("- machine: %d CPUs (%s), GOMAXPROCS %d, load average at start %s\n", m.cpus, m.cpuModel, m.gomaxprocs, m.loadAtStart)
	w.printf("- %s; %s; the tool and redis-server share the machine, on loopback\n", m.goVersion, m.redis)
	w.printf("- %d run(s), medians shown; each load cell is %s of load, taken in %s slices that alternate with the other variants' (after %s of warm-up per variant); keys user=100000..user=%d; limit %d/s, burst %d\n",
		cfg.runs, cfg.duration, cfg.slice, cfg.warmup, 100000+cfg.keys-1, perSecond, burst)
	w.printf("- clients: go-redis %s with its default pool (PoolSize 10 x GOMAXPROCS = %d); rueidis %s with its defaults (auto-pipelining), client-side caching off; redis_rate %s\n\n",
		moduleVersion("github.com/redis/go-redis/v9"), 10*m.gomaxprocs, moduleVersion("github.com/redis/rueidis"), moduleVersion("github.com/go-redis/redis_rate/v10"))
}

func (w *report) footer() {
	w.printf("Load average at the end: %s. Absolute figures swing with the machine's other load: compare only within one run.\n", loadAverage())
}

func kilo(x float64) string {
	if x >= 1000 {
		return fmt.Sprintf("%.1fk", x/1000)
	}
	return fmt.Sprintf("%.0f", x)
}

func verdict(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**not met**"
}

func (w *report) load(cfg config, variants []variant, cells [][][]cell) {
	med := make([][]float64, len(variants)) // [variant][callers]
	p99 := make([][]float64, len(variants))
	p50 := make([][]float64, len(variants))
	minAllowed := 1.0
	for v := range variants {
		med[v] = make([]float64, len(cfg.callers))
		p99[v] = make([]float64, len(cfg.callers))
		p50[v] = make([]float64, len(cfg.callers))
		for ci := range cfg.callers {
			var rates, tails, mids []float64
			for _, c := range cells[v][ci] {
				rates = append(rates, c.perSecond())
				tails = append(tails, float64(c.hist.quantile(0.99)))
				mids = append(mids, float64(c.hist.quantile(0.5)))
				if c.decisions > 0 {
					minAllowed = min(minAllowed, float64(c.allowed)/float64(c.decisions))
				}
			}
			med[v][ci], p99[v][ci], p50[v][ci] = runstat.Median(rates), runstat.Median(tails), runstat.Median(mids)
		}
	}
	cols := func() {
		w.printf("| variant |")
		for _, n := range cfg.callers {
			w.printf(" %d |", n)
		}
		w.printf("\n|---|")
		for range cfg.callers {
			w.printf("---:|")
		}
		w.printf("\n")
	}

	w.printf("## Decisions per second by concurrent callers\n\n")
	cols()
	for v := range variants {
		w.printf("| %s |", variants[v].name)
		for ci := range cfg.callers {
			w.printf(" %s |", kilo(med[v][ci]))
		}
		w.printf("\n")
	}
	w.printf("\nAllowed decisions: at least %.1f%% of every cell's (so every variant ran its write path).\n\n", 100*minAllowed)

	w.printf("### Ratios (same run)\n\n")
	index := map[string]int{}
	for v := range variants {
		index[variants[v].name] = v
	}
	ratio := func(num, den string, ci int) (float64, bool) {
		n, ok1 := index[num]
		d, ok2 := index[den]
		if !ok1 || !ok2 || med[d][ci] == 0 {
			return 0, false
		}
		return med[n][ci] / med[d][ci], true
	}
	ratios := []struct{ name, num, den string }{
		{"ours token bucket (rueidis) / redis_rate", vOursTBRueidis, vRedisRate},
		{"ours token bucket (rueidis) / bare rueidis PING", vOursTBRueidis, vPing},
		{"ours 3 limits / ours 1 limit (rueidis)", vOursMulti, vOursTBRueidis},
		{"ours token bucket: batched / Unbatched", vOursTBRueidis, vOursTBUnbatched},
		{"ours 3 limits: batched / Unbatched", vOursMulti, vOursMultiUnb},
		{"Unbatched: ours token bucket / redis_rate", vOursTBUnbatched, vRedisRate},
		{"ours GCRA (rueidis) / redis_rate", vOursGCRARueidis, vRedisRate},
		{"ours token bucket (go-redis) / redis_rate", vOursTBGoRedis, vRedisRate},
		{"seed script: rueidis / go-redis pool", vSeedRueidis, vSeedGoRedis},
		{"ours token bucket (rueidis) / seed script (rueidis)", vOursTBRueidis, vSeedRueidis},
	}
	w.printf("| ratio |")
	for _, n := range cfg.callers {
		w.printf(" %d |", n)
	}
	w.printf("\n|---|")
	for range cfg.callers {
		w.printf("---:|")
	}
	w.printf("\n")
	for _, r := range ratios {
		if _, ok := ratio(r.num, r.den, 0); !ok {
			continue
		}
		w.printf("| %s |", r.name)
		for ci := range cfg.callers {
			x, _ := ratio(r.num, r.den, ci)
			w.printf(" %.2fx |", x)
		}
		w.printf("\n")
	}
	p50Ratio := func(num, den string, ci int) (float64, bool) {
		n, ok1 := index[num]
		d, ok2 := index[den]
		if !ok1 || !ok2 || p50[d][ci] == 0 {
			return 0, false
		}
		return p50[n][ci] / p50[d][ci], true
	}
	w.targets(cfg.callers, ratio, p50Ratio)

	for _, q := range []struct {
		name string
		v    [][]float64
	}{{"p50", p50}, {"p99", p99}} {
		w.printf("\n### %s latency of one decision\n\n", q.name)
		cols()
		for v := range variants {
			w.printf("| %s |", variants[v].name)
			for ci := range cfg.callers {
				w.printf(" %s |", time.Duration(q.v[v][ci]).Round(time.Microsecond))
			}
			w.printf("\n")
		}
	}
	w.printf("\n")
}

// loadTargets are the load cells' targets: a ratio of two variants'
// medians at a number of callers, at least bound (for a latency, at most).
var loadTargets = []struct {
	name     string
	callers  int
	num, den string
	latency  bool // a p50 ratio, at most bound; else a rate ratio, at least bound
	bound    float64
}{
	{"ours token bucket (rueidis) / redis_rate, 64 callers: ≥ 3x", 64, vOursTBRueidis, vRedisRate, false, 3},
	{"ours GCRA (rueidis) / redis_rate, 64 callers: ≥ 3x", 64, vOursGCRARueidis, vRedisRate, false, 3},
	{"ours token bucket (rueidis) / bare rueidis PING, 64 callers: ≥ 0.6x", 64, vOursTBRueidis, vPing, false, 0.6},
	{"ours 3 limits / ours 1 limit (rueidis), 64 callers: ≥ 0.8x", 64, vOursMulti, vOursTBRueidis, false, 0.8},
	{"p50 latency, ours token bucket (rueidis): batched / Unbatched, 1 caller: ≤ 1.05x", 1, vOursTBRueidis, vOursTBUnbatched, true, 1.05},
}

// targets prints the verdicts of the load targets this run measured.
func (w *report) targets(callers []int, rate, p50 func(num, den string, ci int) (float64, bool)) {
	header := false
	for _, t := range loadTargets {
		ci := slices.Index(callers, t.callers)
		if ci < 0 {
			continue
		}
		of := rate
		if t.latency {
			of = p50
		}
		x, ok := of(t.num, t.den, ci)
		if !ok {
			continue
		}
		if !header {
			w.printf("\n### Targets (same run)\n\n| target | measured | |\n|---|---:|---|\n")
			header = true
		}
		met := x >= t.bound
		if t.latency {
			met = x <= t.bound
		}
		w.printf("| %s | %.2fx | %s |\n", t.name, x, verdict(met))
	}
}

func (w *report) scripts(cfg config, variants []variant, costs [][]scriptCost, sets []float64) {
	w.printf("## Script cost inside Redis\n\n")
	w.printf("FCALL's and EVALSHA's `usec` and `calls` from `INFO commandstats` after `CONFIG RESETSTAT`, each script alone: %d decisions by 16 callers over %d keys, after %d unmeasured ones that create the keys. Our store batches checks that queue behind a call in flight, so a call may decide several: **µs per decision** is the figure to compare. Median of %d run(s), range in brackets.\n\n",
		cfg.scriptCalls, cfg.keys, cfg.scriptCalls, cfg.runs)
	w.printf("| script | µs per decision | vs seed token_bucket.lua | µs per call | calls per decision | reloads |\n|---|---:|---:|---:|---:|---:|\n")
	med := make([]float64, len(variants))
	seed, tb, gcra := -1, -1, -1
	for v := range variants {
		var us []float64
		for _, c := range costs[v] {
			us = append(us, c.usecPerDecision)
		}
		med[v] = runstat.Median(us)
		switch variants[v].name {
		case sSeed:
			seed = v
		case sOursTB:
			tb = v
		case sOursGCRA:
			gcra = v
		}
	}
	for v := range variants {
		lo, hi := med[v], med[v]
		var evals int64
		var perCall, per []float64
		for _, c := range costs[v] {
			lo, hi = min(lo, c.usecPerDecision), max(hi, c.usecPerDecision)
			evals += c.evals
			perCall = append(perCall, c.usecPerCall)
			per = append(per, c.perDecision)
		}
		ratio := "—"
		if seed >= 0 && med[seed] > 0 {
			ratio = fmt.Sprintf("%.2fx", med[v]/med[seed])
		}
		w.printf("| %s | %.2f [%.2f–%.2f] | %s | %.2f | %.2f | %d |\n", variants[v].name, med[v], lo, hi, ratio, runstat.Median(perCall), runstat.Median(per), evals)
	}
	w.printf("| plain SET (reference) | %.2f | | | | |\n\n", runstat.Median(sets))
	if seed >= 0 && tb >= 0 && gcra >= 0 && med[seed] > 0 {
		rt, rg := med[tb]/med[seed], med[gcra]/med[seed]
		w.printf("Ours / the seed script per decision (the engine's first target: ≤ 0.6x). Token bucket: %.2fx, %s; GCRA: %.2fx, %s.\n\n",
			rt, verdict(rt <= 0.6), rg, verdict(rg <= 0.6))
	}
}

func (w *report) memory(mem []keyMemory) {
	w.printf("## Memory per idle key\n\n")
	w.printf("`MEMORY USAGE key SAMPLES 0` after one cost-1 decision on `%s` on an empty server.\n\n", memoryKey)
	w.printf("| budget | Redis key(s) | type/encoding | bytes | TTL |\n|---|---|---|---:|---:|\n")
	var rate int64
	for _, m := range mem {
		if strings.HasPrefix(m.name, "redis_rate") {
			rate = m.total()
		}
	}
	for _, m := range mem {
		keys, kinds, bytes := m.describe()
		if len(m.bytes) > 1 {
			bytes += fmt.Sprintf(" = %d", m.total())
		}
		w.printf("| %s | %s | %s | %s | %s |\n", m.name, keys, kinds, bytes, m.ttl.Round(time.Millisecond))
	}
	w.printf("\nTarget: token bucket and GCRA no worse than %d bytes (redis_rate's key measures %d here).", idleKeyBytes, rate)
	for _, m := range mem {
		if m.name == "ours token_bucket" || m.name == "ours gcra" {
			w.printf(" %s: %d, %s.", strings.TrimPrefix(m.name, "ours "), m.total(), verdict(m.total() <= idleKeyBytes))
		}
	}
	w.printf("\n\n")
}

// idleKeyBytes is the memory per idle key the Redis store is not to exceed:
// what a token bucket's and a GCRA key took before batching and Functions.
const idleKeyBytes = 72

// moduleVersion is the version of module path built into this binary.
func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	return "(unknown version)"
}

func (w *report) anatomy(cfg config, rows []anatomyRow, costs [][]float64) {
	w.printf("## Anatomy of our token-bucket script\n\n")
	w.printf("Variants of the engine's script, each alone, measured like the script cost table (the same keys and arguments as ours token_bucket). Median of %d run(s), range in brackets.\n\n", cfg.runs)
	w.printf("| variant | µs per call |\n|---|---:|\n")
	for i, row := range rows {
		if len(costs[i]) == 0 {
			w.printf("| %s | not measured: %v |\n", row.name, row.err)
			continue
		}
		lo, hi := costs[i][0], costs[i][0]
		for _, c := range costs[i] {
			lo, hi = min(lo, c), max(hi, c)
		}
		w.printf("| %s | %.2f [%.2f–%.2f] |\n", row.name, runstat.Median(costs[i]), lo, hi)
	}
	w.printf("\n")
}
