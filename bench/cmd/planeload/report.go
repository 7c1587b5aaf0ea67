package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/tokenlimit/tokenlimit/bench/internal/runstat"
)

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// report prints the run's figures as markdown.
func report(w io.Writer, o options, e *env, turns, seq []turn) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("# planeload — %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	p("- machine: %d CPUs, GOMAXPROCS %d, load average at the end %s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), loadAverage())
	p("- %d keys in %d teams in the plane on Redis (created through plane.CreateKey by 32 writers in %s: %.0f keys/s); %d keys in the YAML file's api_keys (parsed in %s)\n",
		o.keys, o.teams, e.created.Round(time.Millisecond), float64(o.keys)/e.created.Seconds(), o.yamlKeys, e.yamlParse.Round(time.Millisecond))
	p("- each decision checks one key's three limits (the key's, its team's, its plan's), %d callers spread over every key; %d turns of %s per variant, alternating, after %s of warm-up each\n\n",
		o.callers, o.runs, o.slice, o.warmup)

	p("## Decisions per second\n\n")
	p("Each turn starts after a full garbage collection (not measured), so that it pays for collecting its own garbage only; the collections that ran inside the turns are counted.\n\n")
	p("| variant | decisions/s (median) | range | service CPU µs/decision | redis-server CPU µs/decision | service heap B/decision | allocations/decision | collections in turns |\n|---|---|---|---|---|---|---|---|\n")
	cpuPer := map[string]float64{}
	for _, v := range []string{"yaml", "plane"} {
		var rate, cpu, rcpu, bytes, allocs []float64
		var collections int64
		for _, t := range turns {
			if t.variant == v {
				n := float64(t.decisions)
				rate = append(rate, t.perSecond())
				cpu = append(cpu, float64(t.cpu.Microseconds())/n)
				rcpu = append(rcpu, float64(t.redisCPU.Microseconds())/n)
				bytes = append(bytes, float64(t.allocBytes)/n)
				allocs = append(allocs, float64(t.allocs)/n)
				collections += t.collections
			}
		}
		p("| %s | %.0f | %.0f–%.0f | %.1f | %.1f | %.0f | %.1f | %d |\n", v, runstat.Median(rate), slices.Min(rate), slices.Max(rate),
			runstat.Median(cpu), runstat.Median(rcpu), runstat.Median(bytes), runstat.Median(allocs), collections)
		cpuPer[v] = runstat.Median(cpu) + runstat.Median(rcpu)
	}
	var ratios []float64
	for r := range o.runs {
		var y, pl float64
		for _, t := range turns {
			switch {
			case t.round != r:
			case t.variant == "yaml":
				y = t.perSecond()
			default:
				pl = t.perSecond()
			}
		}
		ratios = append(ratios, pl/y)
	}
	p("\nplane / yaml, the median of each round's ratio: **%.2fx** (rounds: %s; target ≥ 0.9x). ", runstat.Median(ratios), fmtRatios(ratios))
	p("Where the rounds' ratios scatter, the machine's other load decided them. From the CPU per decision (service + redis-server, medians; it swings with the load too), a machine the two saturate would give plane / yaml ≈ %.2fx.\n\n", cpuPer["yaml"]/cpuPer["plane"])

	p("## Redis commands per decision\n\n")
	p("`INFO commandstats` calls and usec divided by the decisions (INFO itself left out; usec is redis-server's time in the command, a function's commands counted in the function's too); commands a function runs inside Redis count too (the SETs and GETs of the budgets). The plane's replica follows the stream (XREAD BLOCK, then a GET of the sequence when a read times out) in both variants: about one per second, not per decision.\n\n")
	p("One decision at a time (%d per variant: the store batches nothing, so FCALL per decision is the round trips):\n\n", o.sequential)
	commandTable(p, seq)
	p("Under the load above (all turns; the store batches checks that queue behind a call in flight, so the figures follow the throughput):\n\n")
	commandTable(p, turns)

	p("## Memory per plane key\n\n")
	p("- the service: %.0f bytes of heap per key (runtime.MemStats.HeapAlloc after a GC, before and after a replica loads the %d keys)\n", e.heapPerKey, o.keys)
	p("- Redis: %.0f bytes of used_memory per key (before and after the keys were created); MEMORY USAGE per key: records %.0f, versions %.0f, the stream of writes %.0f (it keeps the last 100,000 writes)\n\n",
		e.redisPerKey, float64(e.redisParts["records"])/float64(o.keys), float64(e.redisParts["versions"])/float64(o.keys), float64(e.redisParts["log"])/float64(o.keys))
	p("Absolute figures swing with the machine's other load: compare only within one run.\n")
}

func fmtRatios(rs []float64) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmt.Sprintf("%.2f", r)
	}
	return strings.Join(s, ", ")
}

// commandTable prints each command's calls and redis-server microseconds
// per decision, per variant.
func commandTable(p func(string, ...any), turns []turn) {
	p("| command | yaml calls | plane calls | plane − yaml | yaml µs | plane µs |\n|---|---|---|---|---|---|\n")
	decisions := map[string]int64{}
	for _, t := range turns {
		decisions[t.variant] += t.decisions
	}
	type perDecision struct{ calls, usec float64 }
	per := map[string]map[string]perDecision{}
	for _, t := range turns {
		for cmd, s := range t.commands {
			if per[cmd] == nil {
				per[cmd] = map[string]perDecision{}
			}
			d := per[cmd][t.variant]
			n := float64(decisions[t.variant])
			d.calls += float64(s.calls) / n
			d.usec += float64(s.usec) / n
			per[cmd][t.variant] = d
		}
	}
	cmds := slices.Sorted(maps.Keys(per))
	var ty, tp perDecision
	for _, cmd := range cmds {
		y, pl := per[cmd]["yaml"], per[cmd]["plane"]
		ty.calls, ty.usec, tp.calls, tp.usec = ty.calls+y.calls, ty.usec+y.usec, tp.calls+pl.calls, tp.usec+pl.usec
		p("| %s | %.4f | %.4f | %+.4f | %.2f | %.2f |\n", cmd, y.calls, pl.calls, pl.calls-y.calls, y.usec, pl.usec)
	}
	p("| **all** | %.4f | %.4f | %+.4f | %.2f | %.2f |\n\n", ty.calls, tp.calls, tp.calls-ty.calls, ty.usec, tp.usec)
}
