// Command httpload measures `tokenlimit serve` as a gateway sees it: the
// throughput and latency of HTTP POST /v1/check and of the Envoy RLS v3 gRPC
// ShouldRateLimit, on the embedded store and on Redis, over loopback. For
// each store and API it
//
//  1. starts a fresh service (by default `tokenlimit serve` built from this
//     repository and run as a child process; -server inprocess builds it in
//     this process instead, like cli/serve.go does; separate processes are
//     the honest default: the service has its own Go runtime, scheduler and
//     garbage collector, as in production) with the limits of
//     bench.yaml: quickstart's, with a per-user token bucket generous
//     enough that nearly every answer is 200;
//  2. calls every one of -users users once, so that every key exists;
//  3. finds the peak throughput: -clients concurrent keep-alive callers
//     (closed loop, each sends its next call when the previous answers)
//     for -peak-duration each; the peak is the best of those levels;
//  4. for each of -shares (default 50%) of that peak, sends calls open loop
//     at that rate for -duration, from a fixed schedule, and times each
//     call from its scheduled send time, so that a stall counts against
//     every call it delays (coordinated-omission-aware); HTTP also times
//     GET /healthz at the same rate, the floor of an HTTP round trip
//     without a decision.
//
// HTTP goes through a minimal HTTP/1.1 client with one keep-alive
// connection per caller (-http-client net for net/http's), gRPC through the
// generated client on one connection. The open loop's pacer sleeps with
// nanosleep(2) on its own thread (time.Sleep rounds short waits up to about
// a millisecond, which would count as latency); before each run the tool
// measures how late such a thread wakes on this machine with nothing else
// of its own running, the floor of every latency it reports.
//
// With -stores redis it starts its own redis-server on a free 127.0.0.1
// port (never a system Redis) and stops it when done. Everything runs on
// loopback and every phase is bounded in time. The load generator, the
// service and redis-server share the machine's CPUs; the tool reports the
// CPU time each of them used per call. Usage, from bench/:
//
//	go run ./cmd/httpload -runs 3 > httpload.md
//
// Figures swing widely on shared machines: compare only within one run.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tokenlimit/tokenlimit/bench/internal/redisserver"
	"github.com/tokenlimit/tokenlimit/bench/internal/servechild"
)

//go:embed bench.yaml
var benchConfig []byte

type options struct {
	server       string // "child" or "inprocess"
	httpClient   string // "raw" or "net"
	repo         string
	configPath   string
	stores       []string
	apis         []string
	users        int
	clients      []int
	peakDuration time.Duration
	shares       []float64
	duration     time.Duration
	workers      int
	runs         int
	redisServer  string
	profileDir   string
	grpcWorkers  int
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "httpload:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("httpload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var stores, apis, clients, shares string
	fs.StringVar(&o.server, "server", "child", "child: run `tokenlimit serve` as a child process; inprocess: serve from this process")
	fs.StringVar(&o.httpClient, "http-client", "raw", "raw: a minimal HTTP/1.1 client, one connection per caller (like wrk); net: net/http's client")
	fs.StringVar(&o.repo, "repo", "..", "the tokenlimit repository, to build cmd/tokenlimit from")
	fs.StringVar(&o.configPath, "config", "", "limits to serve (default: the built-in bench.yaml)")
	fs.StringVar(&stores, "stores", "memory,redis", "stores to measure: memory, redis")
	fs.StringVar(&apis, "apis", "http,grpc", "APIs to measure: http (POST /v1/check), grpc (ShouldRateLimit)")
	fs.IntVar(&o.users, "users", 10_000, "users the load is spread over (one key each)")
	fs.StringVar(&clients, "clients", "16,64,256", "concurrent keep-alive callers of the peak search")
	fs.DurationVar(&o.peakDuration, "peak-duration", 3*time.Second, "load per level of the peak search")
	fs.StringVar(&shares, "shares", "0.5", "open-loop rates as shares of the peak; the latency target is at 0.5")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "open-loop load")
	fs.IntVar(&o.workers, "workers", 256, "open loop: most calls in flight (a call that finds all busy waits, and the wait counts)")
	fs.IntVar(&o.runs, "runs", 1, "runs of everything; the tables show medians")
	fs.StringVar(&o.redisServer, "redis-server", "redis-server", "redis-server binary to start")
	fs.IntVar(&o.grpcWorkers, "grpc-stream-workers", 0, "-server inprocess only: serve gRPC with grpc.NumStreamWorkers(N) (0: a new goroutine per call; tokenlimit serve uses 256)")
	fs.StringVar(&o.profileDir, "profile-dir", "", "write CPU profiles of the first run's top peak level here (the service's via its pprof endpoint in child mode, and this process's)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.stores, err = list(stores, "memory", "redis"); err != nil {
		return o, fmt.Errorf("-stores: %w", err)
	}
	if o.apis, err = list(apis, "http", "grpc"); err != nil {
		return o, fmt.Errorf("-apis: %w", err)
	}
	for f := range strings.SplitSeq(clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 4096 {
			return o, fmt.Errorf("-clients: %q is not a number of callers in 1..4096", f)
		}
		o.clients = append(o.clients, n)
	}
	for f := range strings.SplitSeq(shares, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || x <= 0 || x > 1 {
			return o, fmt.Errorf("-shares: %q is not a share in (0, 1]", f)
		}
		o.shares = append(o.shares, x)
	}
	switch {
	case o.server != "child" && o.server != "inprocess":
		return o, fmt.Errorf("-server: want child or inprocess, got %q", o.server)
	case o.httpClient != "raw" && o.httpClient != "net":
		return o, fmt.Errorf("-http-client: want raw or net, got %q", o.httpClient)
	case o.users < 1:
		return o, errors.New("-users must be at least 1")
	case o.peakDuration <= 0 || o.peakDuration > time.Minute:
		return o, errors.New("-peak-duration must be in (0, 1m]")
	case o.duration <= 0 || o.duration > time.Minute:
		return o, errors.New("-duration must be in (0, 1m]")
	case o.workers < 1 || o.workers > 4096:
		return o, errors.New("-workers must be in 1..4096")
	case o.grpcWorkers < 0 || o.grpcWorkers > 1024:
		return o, errors.New("-grpc-stream-workers must be in 0..1024")
	case o.grpcWorkers > 0 && o.server != "inprocess":
		return o, errors.New("-grpc-stream-workers needs -server inprocess (tokenlimit serve has no such option)")
	case o.runs < 1 || o.runs > 20:
		return o, errors.New("-runs must be in 1..20")
	}
	return o, nil
}

func list(s string, allowed ...string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(allowed, f) {
			return nil, fmt.Errorf("unknown %q (want %s)", f, strings.Join(allowed, ", "))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// cell is one store x API of one run.
type cell struct {
	store, api string
	levels     []*tally // closed loop, by opts.clients
	peak       int      // index of the best level
	peakCPU    []time.Duration
	open       []*tally // by opts.shares
	openCPU    [][]time.Duration
	floor      []*tally // HTTP only: GET /healthz at the open loops' rates
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	progress := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	tmp, err := os.MkdirTemp("", "httpload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	configPath := o.configPath
	if configPath == "" {
		configPath = filepath.Join(tmp, "bench.yaml")
		if err := os.WriteFile(configPath, benchConfig, 0o644); err != nil {
			return err
		}
	}
	m := machineInfo(o)
	var bin string
	if o.server == "child" {
		progress("building cmd/tokenlimit")
		if bin, err = servechild.Build(ctx, o.repo, tmp); err != nil {
			return err
		}
	}
	var redis *redisserver.Server
	if slices.Contains(o.stores, "redis") {
		if redis, err = redisserver.Start(o.redisServer); err != nil {
			return err
		}
		defer redis.Stop()
		progress("redis-server on %s", redis.Addr())
	}

	var cells [][]*cell // [run][store x api]
	var wake [][]time.Duration
	for r := range o.runs {
		lag := wakeLag(ctx, 10_000, 2*time.Second)
		progress("run %d  wake-up lag of an idle pacer: p50 %v  p99 %v  p99.9 %v", r+1, quantile(lag, 0.5), quantile(lag, 0.99), quantile(lag, 0.999))
		wake = append(wake, lag)
		var row []*cell
		for _, store := range o.stores {
			for _, api := range o.apis {
				c, err := measure(ctx, o, r, store, api, bin, configPath, redis, progress)
				if err != nil {
					return fmt.Errorf("%s on %s: %w", api, store, err)
				}
				row = append(row, c)
			}
		}
		cells = append(cells, row)
	}
	m.loadAfter = loadavg()
	writeReport(stdout, o, m, wake, cells)
	return nil
}

// measure runs one store x API on a fresh service.
func measure(ctx context.Context, o options, r int, store, api, bin, configPath string, redis *redisserver.Server, progress func(string, ...any)) (*cell, error) {
	redisAddr, redisPid := "", -1
	if store == "redis" {
		if _, err := redis.Do("FLUSHALL"); err != nil {
			return nil, err
		}
		redisAddr, redisPid = redis.Addr(), redis.Pid()
	}
	var (
		t      *target
		err    error
		server = -1 // the service's pid for CPU times; 0 is this process
	)
	if o.server == "child" {
		url := ""
		if redisAddr != "" {
			url = "redis://" + redisAddr + "/0"
		}
		t, err = startChild(ctx, bin, configPath, url)
	} else {
		cfg, cerr := loadConfigFile(configPath)
		if cerr != nil {
			return nil, cerr
		}
		t, err = startInProcess(cfg, redisAddr, o.grpcWorkers)
		server = 0
	}
	if err != nil {
		return nil, err
	}
	if o.server == "child" {
		server = t.pid
	}
	defer func() {
		if err := t.stop(); err != nil {
			progress("stopping the service: %v", err)
		}
	}()

	var call, health factory
	switch {
	case api == "http" && o.httpClient == "raw":
		call, health = rawCallers(t.httpAddr, o.users)
	case api == "http":
		check, healthz, closeIdle := netHTTPCallers(t.httpAddr, o.users, max(o.workers, slices.Max(o.clients)))
		defer closeIdle()
		call, health = shared(check), shared(healthz)
	case api == "grpc":
		check, closeConn, err := grpcCaller(t.grpcAddr, o.users)
		if err != nil {
			return nil, err
		}
		defer closeConn()
		call = shared(check)
	}
	if w := warm(ctx, call, o.users); w.errors > 0 {
		return nil, fmt.Errorf("warm-up: %d errors, first: %w", w.errors, w.firstErr)
	}
	closedLoop(ctx, call, o.clients[0], o.users, 300*time.Millisecond) // connections, GC sizing

	c := &cell{store: store, api: api}
	pids := []int{0, server, redisPid} // client, service, redis
	if o.server == "inprocess" {
		pids[1] = -1 // the service is this process: only the total is known
	}
	for li, n := range o.clients {
		var prof *profile
		if r == 0 && li == len(o.clients)-1 && o.profileDir != "" {
			prof = startProfiles(ctx, o, t, store, api)
		}
		meter := startCPU(pids...)
		got := closedLoop(ctx, call, n, o.users, o.peakDuration)
		cpu := meter.stop()
		if prof != nil {
			if err := prof.stop(); err != nil {
				progress("profile: %v", err)
			}
		}
		progress("run %d  %-6s %-4s  %3d clients  %8.0f calls/s  p50 %v  p99 %v  allowed %d/%d  errors %d",
			r+1, store, api, n, got.perSecond(), quantile(got.lat, 0.5), quantile(got.lat, 0.99), got.allowed, got.calls, got.errors)
		if got.errors > 0 {
			return nil, fmt.Errorf("%d clients: %d errors, first: %w", n, got.errors, got.firstErr)
		}
		got.lat = compact(got.lat)
		c.levels = append(c.levels, got)
		if got.perSecond() > c.levels[c.peak].perSecond() {
			c.peak = li
		}
		if li == c.peak {
			c.peakCPU = cpu
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	for _, share := range o.shares {
		rate := share * c.levels[c.peak].perSecond()
		meter := startCPU(pids...)
		open := openLoop(ctx, call, rate, o.duration, o.workers, o.users)
		c.openCPU = append(c.openCPU, meter.stop())
		c.open = append(c.open, open)
		progress("run %d  %-6s %-4s  open loop %6.0f/s  p50 %v  p99 %v  p99.9 %v  (from send: p99 %v)  allowed %d/%d  errors %d",
			r+1, store, api, rate, quantile(open.lat, 0.5), quantile(open.lat, 0.99), quantile(open.lat, 0.999),
			quantile(open.service, 0.99), open.allowed, open.calls, open.errors)
		if open.errors > 0 {
			return nil, fmt.Errorf("open loop: %d errors, first: %w", open.errors, open.firstErr)
		}
		if health == nil {
			continue
		}
		floor := openLoop(ctx, health, rate, o.duration, o.workers, o.users)
		c.floor = append(c.floor, floor)
		progress("run %d  %-6s %-4s  GET /healthz at %6.0f/s  p50 %v  p99 %v  p99.9 %v",
			r+1, store, api, rate, quantile(floor.lat, 0.5), quantile(floor.lat, 0.99), quantile(floor.lat, 0.999))
		if floor.errors > 0 {
			return nil, fmt.Errorf("GET /healthz: %d errors, first: %w", floor.errors, floor.firstErr)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return c, ctx.Err()
}

// compact keeps the quantiles a report needs of a closed-loop level and
// drops the rest of its samples.
func compact(d []time.Duration) []time.Duration {
	return []time.Duration{quantile(d, 0.5), quantile(d, 0.99)}
}

// profile is a CPU profile of this process and, in child mode, of the
// service, over one peak level.
type profile struct {
	file    *os.File
	service chan error
}

func startProfiles(ctx context.Context, o options, t *target, store, api string) *profile {
	p := &profile{service: make(chan error, 1)}
	if err := os.MkdirAll(o.profileDir, 0o755); err == nil {
		name := filepath.Join(o.profileDir, fmt.Sprintf("%s-%s-%s-client.pprof", o.server, store, api))
		if o.server == "inprocess" {
			name = filepath.Join(o.profileDir, fmt.Sprintf("inprocess-%s-%s.pprof", store, api))
		}
		if f, err := os.Create(name); err == nil && pprof.StartCPUProfile(f) == nil {
			p.file = f
		}
	}
	if t.pprofAddr == "" {
		p.service <- nil
		return p
	}
	secs := max(1, int(o.peakDuration.Seconds()-0.5))
	name := filepath.Join(o.profileDir, fmt.Sprintf("child-%s-%s-service.pprof", store, api))
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", t.pprofAddr, secs), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			p.service <- err
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(name)
		if err != nil {
			p.service <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		p.service <- err
	}()
	return p
}

func (p *profile) stop() error {
	if p.file != nil {
		pprof.StopCPUProfile()
		p.file.Close()
	}
	return <-p.service
}

// machine describes where the figures were made.
type machine struct {
	cpus             int
	model, goVersion string
	redis, commit    string
	loadBefore       string
	loadAfter        string
	server           string
}

func machineInfo(o options) machine {
	m := machine{cpus: runtime.NumCPU(), goVersion: runtime.Version(), loadBefore: loadavg(), server: o.server}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for l := range strings.Lines(string(b)) {
			if strings.HasPrefix(l, "model name") {
				_, m.model, _ = strings.Cut(l, ":")
				m.model = strings.TrimSpace(m.model)
				break
			}
		}
	}
	if out, err := execOutput(o.redisServer, "--version"); err == nil {
		m.redis = out
	}
	if out, err := execOutput("git", "-C", o.repo, "describe", "--always", "--dirty"); err == nil {
		m.commit = out
	}
	return m
}

func loadavg() string {
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
