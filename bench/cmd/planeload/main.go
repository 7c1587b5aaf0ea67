// Command planeload measures the quota plane at scale on a redis-server of
// its own, and prints the figures as markdown (issue 20's performance
// contract):
//
//   - decisions per second of one service checking a key's three limits
//     (the key's, its team's, its plan's), with the key and its limits
//     given in the YAML file ("yaml": api_keys lists -yaml-keys keys, as
//     many as -keys by default, so that both variants keep as many budgets
//     on Redis and in the service) or by the plane ("plane": -keys plane
//     keys on Redis), -callers concurrent callers spread over every key,
//     the two variants taking turns in slices of -slice, -runs times, each
//     turn after a full garbage collection; medians, the CPU per decision of
//     this process and of redis-server, and this process's allocations per
//     decision; with -cpuprofile, this process's CPU profile of each turn;
//   - the Redis commands each variant sends per decision and the time
//     redis-server spent in them (INFO commandstats deltas), under the load
//     and one decision at a time (where the store batches nothing): the
//     plane's key lookup must add none;
//   - memory per plane key: the service's heap (runtime.MemStats after a
//     GC, before and after a replica loads every key) and Redis'
//     (used_memory before and after the keys are created, and MEMORY
//     USAGE of the plane's hashes and stream).
//
// The keys are created through the plane (plane.CreateKey: one Lua script
// each) by 32 writers. It starts redis-server (from PATH, or
// -redis-server) on a free 127.0.0.1 port with no persistence and stops it
// when done. Two to four minutes on 2 CPUs with the defaults (creating
// the keys takes most of it). From bench/:
//
//	go run ./cmd/planeload > plane.md
//
// Figures swing with whatever else the machine runs: compare only within
// one run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

type options struct {
	redisServer string
	keys        int
	yamlKeys    int
	sequential  int
	teams       int
	callers     int
	runs        int
	slice       time.Duration
	warmup      time.Duration
	cpuProfile  string
	failOpen    int
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "planeload:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("planeload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.redisServer, "redis-server", "redis-server", "redis-server binary to start")
	fs.IntVar(&o.keys, "keys", 100_000, "api keys, in the YAML file and in the plane")
	fs.IntVar(&o.yamlKeys, "yaml-keys", 0, "api keys in the YAML file; 0 for as many as -keys (the same number of budgets on Redis in both variants)")
	fs.IntVar(&o.sequential, "sequential", 2000, "decisions per variant made one at a time to count Redis commands (no batching)")
	fs.IntVar(&o.teams, "teams", 100, "teams the keys are spread over")
	fs.IntVar(&o.callers, "callers", 64, "concurrent callers")
	fs.IntVar(&o.runs, "runs", 9, "turns of each variant; the tables show medians")
	fs.DurationVar(&o.slice, "slice", time.Second, "measured time of one turn")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured load per variant before the first turn")
	fs.IntVar(&o.failOpen, "fail-open-keys", 0, "the service's FailOpenKeys (0: its default)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write this process's CPU profile of each turn to this prefix, suffixed .<variant>.<round> (go tool pprof merges several)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.yamlKeys == 0 {
		o.yamlKeys = o.keys
	}
	switch {
	case o.keys < 1 || o.keys > 1_000_000:
		return o, errors.New("-keys must be in 1..1000000")
	case o.yamlKeys < 1 || o.yamlKeys > 1_000_000:
		return o, errors.New("-yaml-keys must be in 1..1000000")
	case o.sequential < 1:
		return o, errors.New("-sequential must be at least 1")
	case o.teams < 1 || o.teams > min(o.keys, o.yamlKeys):
		return o, errors.New("-teams must be in 1..min(keys, yaml-keys)")
	case o.callers < 1 || o.callers > 4096:
		return o, errors.New("-callers must be in 1..4096")
	case o.runs < 1:
		return o, errors.New("-runs must be at least 1")
	case o.slice <= 0 || o.slice > time.Minute:
		return o, errors.New("-slice must be in (0, 1m]")
	case o.warmup < 0:
		return o, errors.New("-warmup must not be negative")
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	env, err := setUp(ctx, o, stderr)
	if err != nil {
		return err
	}
	defer env.close()
	fmt.Fprintf(stderr, "load: %d callers, %d turns of %s per variant\n", o.callers, o.runs, o.slice)
	turns, err := measure(ctx, env, o, stderr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "counting commands: %d decisions per variant, one at a time\n", o.sequential)
	seq, err := sequential(ctx, env, o)
	if err != nil {
		return err
	}
	report(stdout, o, env, turns, seq)
	return nil
}
