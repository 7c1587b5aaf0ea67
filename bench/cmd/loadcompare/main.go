// Command loadcompare measures, in one run on a redis-server of its own, the
// Redis side of tokenlimit beside go-redis/redis_rate and the source
// documents' token-bucket script, and prints the figures as markdown:
//
//   - decisions per second at 1, 16, 64 and 256 concurrent callers, for
//     redis_rate v10 Allow, our token bucket through go-redis and through
//     rueidis, our GCRA through rueidis, and the seed token_bucket.lua
//     through go-redis and rueidis;
//   - each script's cost inside Redis (INFO commandstats, EVALSHA's
//     usec_per_call), each script run alone so that the figure is its own;
//   - the memory one idle key takes (MEMORY USAGE) per algorithm.
//
// It starts redis-server (from PATH, or -redis-server) on a free 127.0.0.1
// port with no persistence, and stops it when done; it never touches another
// Redis. Every load cell is bounded in time (-duration). Usage, from bench/:
//
//	go run ./cmd/loadcompare -runs 3 > results.md
//
// Figures swing widely on shared machines: compare only within one run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tokenlimit/tokenlimit/bench/internal/redisserver"
)

type config struct {
	redisServer string
	runs        int
	duration    time.Duration
	slice       time.Duration
	warmup      time.Duration
	callers     []int
	keys        int
	scriptCalls int
	only        map[string]bool
	variants    string
	cpuProfile  string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "loadcompare:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("loadcompare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	var callers, only string
	fs.StringVar(&c.redisServer, "redis-server", "redis-server", "redis-server binary to start")
	fs.IntVar(&c.runs, "runs", 3, "runs of every measurement; the tables show medians")
	fs.DurationVar(&c.duration, "duration", 2*time.Second, "measured time of one load cell")
	fs.DurationVar(&c.slice, "slice", 500*time.Millisecond, "the variants take turns in slices of this length")
	fs.DurationVar(&c.warmup, "warmup", 300*time.Millisecond, "unmeasured load per variant before each concurrency level")
	fs.StringVar(&callers, "callers", "1,16,64,256", "concurrent callers of the load cells")
	fs.IntVar(&c.keys, "keys", 10_000, "keys the load is spread over")
	fs.IntVar(&c.scriptCalls, "script-calls", 20_000, "calls per script-cost measurement")
	fs.StringVar(&only, "only", "load,scripts,anatomy,memory", "measurements to make")
	fs.StringVar(&c.variants, "variants", "", "measure only the load and script variants whose names contain this text")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write this tool's CPU profile (the client side) to this file")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	for f := range strings.SplitSeq(callers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 4096 {
			return c, fmt.Errorf("-callers: %q is not a number of callers in 1..4096", f)
		}
		c.callers = append(c.callers, n)
	}
	c.only = map[string]bool{}
	for f := range strings.SplitSeq(only, ",") {
		switch f = strings.TrimSpace(f); f {
		case "load", "scripts", "anatomy", "memory":
			c.only[f] = true
		default:
			return c, fmt.Errorf("-only: unknown measurement %q (want load, scripts, anatomy, memory)", f)
		}
	}
	switch {
	case c.runs < 1:
		return c, errors.New("-runs must be at least 1")
	case c.duration <= 0 || c.duration > time.Minute:
		return c, errors.New("-duration must be in (0, 1m]")
	case c.slice <= 0:
		return c, errors.New("-slice must be positive")
	case c.keys < 1:
		return c, errors.New("-keys must be at least 1")
	case c.scriptCalls < 16:
		return c, errors.New("-script-calls must be at least 16")
	}
	return c, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	srv, err := redisserver.Start(cfg.redisServer)
	if err != nil {
		return err
	}
	defer srv.Stop()
	c, err := newClients(ctx, srv.Addr())
	if err != nil {
		return err
	}
	defer c.close()
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	progress := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	progress("redis-server on %s; %d run(s)", srv.Addr(), cfg.runs)

	w := &report{out: stdout}
	w.header(cfg, machine(cfg.redisServer))
	keys := keyNames(cfg.keys)

	if cfg.only["load"] {
		variants := pick(loadVariants(c), cfg.variants)
		cells := make([][][]cell, len(variants)) // [variant][callers][run]
		for v := range cells {
			cells[v] = make([][]cell, len(cfg.callers))
		}
		slices := max(1, int(cfg.duration/cfg.slice))
		for r := range cfg.runs {
			if err := c.goredis.FlushAll(ctx).Err(); err != nil {
				return err
			}
			for ci, n := range cfg.callers {
				for _, v := range variants { // connections and keys
					runLoad(ctx, v.decide, n, cfg.warmup, keys)
				}
				// The variants take turns in short slices, in an order that
				// rotates, so that the machine's other load, which comes and
				// goes, weighs on all of them alike.
				acc := make([]cell, len(variants))
				for s := range slices {
					for k := range variants {
						v := (k + s + r) % len(variants)
						acc[v].merge(runLoad(ctx, variants[v].decide, n, cfg.duration/time.Duration(slices), keys))
						if ctx.Err() != nil {
							return ctx.Err()
						}
					}
				}
				for v, got := range acc {
					progress("run %d  callers %3d  %-48s %8.0f/s  p99 %v  errors %d", r+1, n, variants[v].name, got.perSecond(), got.hist.quantile(0.99), got.errors)
					if got.errors > 0 {
						return fmt.Errorf("%s with %d callers: %d errors, first: %w", variants[v].name, n, got.errors, got.firstErr)
					}
					cells[v][ci] = append(cells[v][ci], got)
				}
			}
		}
		w.load(cfg, variants, cells)
	}

	if cfg.only["scripts"] {
		variants := pick(scriptVariants(c), cfg.variants)
		costs := make([][]scriptCost, len(variants))
		var sets []float64
		set := func(ctx context.Context, key string) (bool, error) {
			return true, c.rueidis.Do(ctx, c.rueidis.B().Set().Key("rl:set:{"+key+"}").Value("1764480000123456").Build()).Error()
		}
		for r := range cfg.runs {
			for v := range variants {
				got, err := measureScript(ctx, c.goredis, variants[v].decide, cfg.scriptCalls, keys)
				if err != nil {
					return fmt.Errorf("%s: %w", variants[v].name, err)
				}
				progress("run %d  script %-44s %6.2f µs/decision  %6.2f µs/call  %.2f calls/decision", r+1, variants[v].name, got.usecPerDecision, got.usecPerCall, got.perDecision)
				costs[v] = append(costs[v], got)
			}
			us, err := measureSet(ctx, c.goredis, set, cfg.scriptCalls, keys)
			if err != nil {
				return fmt.Errorf("SET: %w", err)
			}
			sets = append(sets, us)
		}
		w.scripts(cfg, variants, costs, sets)
	}

	if cfg.only["anatomy"] {
		rows, err := anatomyRows(ctx, c)
		if err != nil {
			return fmt.Errorf("script anatomy: %w", err)
		}
		costs := make([][]float64, len(rows))
		for r := range cfg.runs {
			for i, row := range rows {
				us, err := measureAnatomy(ctx, c.goredis, row, cfg.scriptCalls, keys)
				if err != nil {
					rows[i].err = err
					continue
				}
				progress("run %d  anatomy %6.2f µs/call  %s", r+1, us, row.name)
				costs[i] = append(costs[i], us)
			}
		}
		w.anatomy(cfg, rows, costs)
	}

	if cfg.only["memory"] {
		mem, err := measureMemory(ctx, c)
		if err != nil {
			return err
		}
		w.memory(mem)
	}
	w.footer()
	return w.err
}

// machineInfo describes where the figures come from.
type machineInfo struct {
	cpus        int
	gomaxprocs  int
	goVersion   string
	redis       string
	cpuModel    string
	loadAtStart string
}

func machine(redisServer string) machineInfo {
	m := machineInfo{cpus: runtime.NumCPU(), gomaxprocs: runtime.GOMAXPROCS(0), goVersion: runtime.Version()}
	if out, err := exec.Command(redisServer, "--version").Output(); err == nil {
		m.redis = strings.TrimSpace(string(out))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpuModel = strings.TrimSpace(v)
				break
			}
		}
	}
	m.loadAtStart = loadAverage()
	return m
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// pick returns the variants whose names contain text.
func pick(vs []variant, text string) []variant {
	return slices.DeleteFunc(vs, func(v variant) bool { return !strings.Contains(v.name, text) })
}
