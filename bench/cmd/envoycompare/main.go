// Command envoycompare measures `tokenlimit serve --redis` side by side with
// envoyproxy/ratelimit on one redis-server and one gRPC load generator:
// ShouldRateLimit with one descriptor {user: user-N} per request, spread
// over -users users, from -callers concurrent callers over -conns HTTP/2
// connections per service. The load generator's client is a minimal one of
// its own (rlsClient: prepared requests, each answer's HTTP status,
// grpc-status and overall_code checked), so that it takes less of the
// machine's CPUs from the services than grpc-go's client. The two services
// take turns in short slices within one run; each run's figures are the
// sums of its slices, and the table shows the medians of the runs.
//
//	go install github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36
//	cd bench && go run ./cmd/envoycompare -envoy $(go env GOPATH)/bin/service_cmd
//
// Scenarios: "admitted" (a fixed window of a million per second per user:
// every request is admitted, so every one reaches Redis) and "over" (one
// per hour per user over 100 users: after the first request of each user,
// every request is over the limit; both services with their over-limit
// caches on: envoy's LOCAL_CACHE_SIZE_IN_BYTES, tokenlimit's local_cache).
//
// Per service and cell it reports decisions/s, p50/p99 latency, the CPU
// time per decision of the service, of redis-server and of the load
// generator itself (from /proc), the service's heap allocations per
// decision (go_memstats_mallocs_total, where it exports it), and the Redis
// commands per decision (INFO commandstats). tokenlimit's
// decisions that fell back to a failure mode (tokenlimit_decisions_total
// with a fail_open or fail_closed result) are counted: a cell with any is
// not a measurement of Redis, and is flagged.
//
// With -callgrind N it counts tokenlimit's instructions per decision
// instead, under valgrind (callgrind.go); with -index-headers the load
// generator indexes its header fields in HPACK's dynamic table, as Envoy
// does, instead of sending them as literals never indexed.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tokenlimit/tokenlimit/bench/internal/redisserver"
	"github.com/tokenlimit/tokenlimit/bench/internal/runstat"
	"github.com/tokenlimit/tokenlimit/bench/internal/servechild"
)

type options struct {
	envoy, repo, redisServer string
	storeTimeout             time.Duration
	callers, users, runs     int
	slice                    time.Duration
	slices                   int
	scenarios                []string
	conns                    int
	cpuProfile               string
	indexHeaders             bool
	callgrind                int
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "envoycompare:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("envoycompare", flag.ContinueOnError)
	var o options
	var scenarios string
	fs.StringVar(&o.envoy, "envoy", "service_cmd", "envoyproxy/ratelimit's service_cmd binary")
	fs.StringVar(&o.repo, "repo", "..", "the tokenlimit repository, to build cmd/tokenlimit from")
	fs.StringVar(&o.redisServer, "redis-server", "redis-server", "redis-server binary to start")
	fs.DurationVar(&o.storeTimeout, "store-timeout", 0, "tokenlimit serve --store-timeout (0: its default)")
	fs.IntVar(&o.callers, "callers", 64, "concurrent callers")
	fs.IntVar(&o.users, "users", 10_000, "users of the admitted scenario (100 in the over-limit one)")
	fs.IntVar(&o.runs, "runs", 3, "runs; the table shows medians")
	fs.DurationVar(&o.slice, "slice", 2*time.Second, "load per slice; the services alternate slice by slice")
	fs.IntVar(&o.slices, "slices", 2, "slices per service per run")
	fs.IntVar(&o.conns, "conns", 4, "HTTP/2 connections the callers share (per service)")
	fs.StringVar(&scenarios, "scenarios", "admitted,over", "scenarios: admitted, over")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write tokenlimit's CPU profile over each scenario's measured runs to this file, suffixed with the scenario's name")
	fs.BoolVar(&o.indexHeaders, "index-headers", false, "the load generator indexes its header fields in HPACK's dynamic table, as Envoy does (default: literals never indexed)")
	fs.IntVar(&o.callgrind, "callgrind", 0, "instead of comparing, count tokenlimit's instructions per decision over this many calls under valgrind's callgrind (callgrind.go)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for s := range strings.SplitSeq(scenarios, ",") {
		if s != "admitted" && s != "over" {
			return o, fmt.Errorf("-scenarios: unknown %q (want admitted, over)", s)
		}
		o.scenarios = append(o.scenarios, s)
	}
	switch {
	case o.callers < 1 || o.callers > 4096:
		return o, errors.New("-callers must be in 1..4096")
	case o.users < 100:
		return o, errors.New("-users must be at least 100")
	case o.runs < 1 || o.slices < 1 || o.conns < 1:
		return o, errors.New("-runs, -slices and -conns must be at least 1")
	case o.slice <= 0 || o.slice > time.Minute:
		return o, errors.New("-slice must be in (0, 1m]")
	case o.callgrind < 0:
		return o, errors.New("-callgrind must not be negative")
	}
	return o, nil
}

// scenario is one limit both services enforce, in both configurations.
type scenario struct {
	name   string
	users  int
	envoy  string // envoyproxy/ratelimit's config
	ours   string // tokenlimit's
	cached bool   // over-limit caches on
	// The targets, tokenlimit against envoyproxy/ratelimit: decisions/s
	// at least minRate times (0: none), service CPU per decision at most
	// maxCPU times.
	minRate, maxCPU float64
}

func scenarios(o options) map[string]scenario {
	return map[string]scenario{
		"admitted": {
			name: "admitted", users: o.users,
			envoy:   "domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n",
			ours:    "limits:\n  - name: per-user\n    key: [user]\n    algorithm: fixed_window\n    limit: 1000000/s\n",
			minRate: 2, maxCPU: 0.4,
		},
		"over": {
			name: "over", users: 100, cached: true,
			envoy:  "domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
			ours:   "limits:\n  - name: per-user\n    key: [user]\n    algorithm: fixed_window\n    limit: 1/h\n    local_cache: true\n",
			maxCPU: 0.5,
		},
	}
}

// service is one running rate-limit service.
type service struct {
	name    string
	grpc    string
	metrics string // tokenlimit's /metrics address; empty for envoy
	pprof   string // tokenlimit's /debug/pprof address, with -cpuprofile
	pid     int
	stop    func()
}

func run(args []string) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "envoycompare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin, err := servechild.Build(context.Background(), o.repo, tmp)
	if err != nil {
		return err
	}
	fmt.Printf("# envoycompare — %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Printf("- %d callers over %d HTTP/2 connections per service (the load generator's minimal gRPC client: prepared requests, every answer checked); %d runs of %d slices of %s per service, alternating; medians of the runs\n",
		o.callers, o.conns, o.runs, o.slices, o.slice)
	fmt.Printf("- load average at start: %s\n", loadavg())
	if o.storeTimeout > 0 {
		fmt.Printf("- tokenlimit serve --store-timeout %s\n", o.storeTimeout)
	}
	fmt.Println()
	if o.indexHeaders {
		fmt.Println("- the load generator indexes its header fields in HPACK's dynamic table")
		fmt.Println()
	}
	measureScenario := runScenario
	if o.callgrind > 0 {
		measureScenario = runCallgrind
	}
	for _, name := range o.scenarios {
		sc := scenarios(o)[name]
		if err := measureScenario(o, sc, bin, tmp); err != nil {
			return fmt.Errorf("scenario %s: %w", name, err)
		}
	}
	fmt.Printf("- load average at the end: %s\n", loadavg())
	return nil
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}

// tally is one service's load over some slices.
type tally struct {
	decisions, allowed, errors int64
	elapsed                    time.Duration
	lat                        []time.Duration // a sample
	serviceCPU, redisCPU       time.Duration
	loadCPU                    time.Duration // the load generator's (this process)
	redisCalls, scriptCalls    int64
	fallback                   int64 // tokenlimit decisions by a failure mode
	mallocs                    int64 // the service's heap allocations (go_memstats_mallocs_total); -1 unknown
	firstErr                   error
}

func runScenario(o options, sc scenario, bin, tmp string) error {
	redis, err := redisserver.Start(o.redisServer)
	if err != nil {
		return err
	}
	defer redis.Stop()
	dir := filepath.Join(tmp, sc.name)
	ours, err := startOurs(o, sc, bin, dir, redis.Addr())
	if err != nil {
		return err
	}
	defer ours.stop()
	envoy, err := startEnvoy(o, sc, dir, redis.Addr())
	if err != nil {
		return err
	}
	defer envoy.stop()
	svcs := []*service{ours, envoy}
	clients := make([]*rlsClient, len(svcs))
	for i, s := range svcs {
		c, err := dialRLSClient(s.grpc, sc.users, o.conns, o.indexHeaders)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		defer c.close()
		clients[i] = c
	}
	// Warm up: every key once, so "over" starts over the limit, and the
	// connections and scripts are in place.
	for i := range svcs {
		load(clients[i], o.callers, sc.users, time.Second)
	}
	runs := make([][]tally, len(svcs))
	profiled := startProfile(o, ours, sc.name)
	for range o.runs {
		sums := make([]tally, len(svcs))
		for range o.slices {
			for i, s := range svcs {
				t, err := measure(s, redis, clients[i], o, sc.users)
				if err != nil {
					return err
				}
				sums[i].add(t)
			}
		}
		for i := range svcs {
			runs[i] = append(runs[i], sums[i])
		}
	}
	if err := profiled(); err != nil {
		return err
	}
	report(sc, svcs, runs)
	return nil
}

// startProfile starts taking s's CPU and allocation profiles for about as
// long as the measured runs take, with -cpuprofile; the function it returns
// waits for them and writes them to the files named by -cpuprofile,
// suffixed with the scenario's name (and ".allocs").
func startProfile(o options, s *service, scenario string) func() error {
	if o.cpuProfile == "" || s.pprof == "" {
		return func() error { return nil }
	}
	secs := max(1, int((time.Duration(2*o.runs*o.slices) * o.slice).Seconds()))
	profiles := map[string]string{"profile": o.cpuProfile + "." + scenario, "allocs": o.cpuProfile + "." + scenario + ".allocs"}
	done := make(chan error, len(profiles))
	for name, file := range profiles {
		go func() {
			resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", s.pprof, name, secs))
			if err != nil {
				done <- fmt.Errorf("%s profile: %w", name, err)
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err == nil {
				err = os.WriteFile(file, b, 0o644)
			}
			done <- err
		}()
	}
	return func() error {
		var errs []error
		for range profiles {
			errs = append(errs, <-done)
		}
		return errors.Join(errs...)
	}
}

func (t *tally) add(o tally) {
	t.decisions += o.decisions
	t.allowed += o.allowed
	t.errors += o.errors
	t.elapsed += o.elapsed
	t.lat = append(t.lat, o.lat...)
	t.serviceCPU += o.serviceCPU
	t.redisCPU += o.redisCPU
	t.loadCPU += o.loadCPU
	t.redisCalls += o.redisCalls
	t.scriptCalls += o.scriptCalls
	t.fallback += o.fallback
	if t.mallocs >= 0 {
		t.mallocs += o.mallocs
	}
	if o.mallocs < 0 {
		t.mallocs = -1
	}
	if t.firstErr == nil {
		t.firstErr = o.firstErr
	}
}

// measure runs one slice of load on s and what it cost.
func measure(s *service, redis *redisserver.Server, client *rlsClient, o options, users int) (tally, error) {
	calls0, scripts0, err := redisCalls(redis)
	if err != nil {
		return tally{}, err
	}
	fb0, m0 := scrape(s)
	svc0, _ := runstat.CPUTime(s.pid)
	red0, _ := runstat.CPUTime(redis.Pid())
	gen0, _ := runstat.CPUTime(os.Getpid())
	t := load(client, o.callers, users, o.slice)
	svc1, _ := runstat.CPUTime(s.pid)
	red1, _ := runstat.CPUTime(redis.Pid())
	gen1, _ := runstat.CPUTime(os.Getpid())
	t.loadCPU = gen1 - gen0
	calls1, scripts1, err := redisCalls(redis)
	if err != nil {
		return tally{}, err
	}
	t.serviceCPU, t.redisCPU = svc1-svc0, red1-red0
	t.redisCalls = calls1 - calls0 - 1 // the INFO of the first reading
	t.scriptCalls = scripts1 - scripts0
	fb1, m1 := scrape(s)
	t.fallback, t.mallocs = fb1-fb0, m1-m0
	if m0 < 0 || m1 < 0 {
		t.mallocs = -1
	}
	return t, nil
}

// load runs callers goroutines calling client on users in a scattered
// order for d; a call still unanswered 10 s after that is an error.
func load(client *rlsClient, callers, users int, d time.Duration) tally {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		out  tally
		stop atomic.Bool
	)
	ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Second)
	defer cancel()
	start := time.Now()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	for g := range callers {
		call := client.caller()
		wg.Go(func() {
			var local tally
			i := (g * 7717) % users
			for n := 0; !stop.Load(); n++ {
				i = (i + 7919) % users
				var t0 time.Time
				if n%8 == 0 { // a sample of the latencies
					t0 = time.Now()
				}
				ok, err := call(ctx, i)
				if n%8 == 0 {
					local.lat = append(local.lat, time.Since(t0))
				}
				switch {
				case err != nil:
					local.errors++
					if local.firstErr == nil {
						local.firstErr = err
					}
				case ok:
					local.allowed++
				}
				local.decisions++
			}
			mu.Lock()
			out.add(local)
			mu.Unlock()
		})
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	return out
}

// redisCalls returns the total of every command's calls in INFO
// commandstats (the commands scripts run included) and the script calls
// among them (EVALSHA, EVAL, FCALL).
func redisCalls(s *redisserver.Server) (total, scripts int64, err error) {
	info, err := s.Do("INFO", "commandstats")
	if err != nil {
		return 0, 0, fmt.Errorf("INFO commandstats: %w", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		total += n
		switch name {
		case "cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall":
			scripts += n
		}
	}
	return total, scripts, nil
}

// scrape reads s's /metrics: tokenlimit's count of decisions made by a
// failure mode instead of Redis (0 for envoy), and the process's heap
// allocations so far (go_memstats_mallocs_total; -1 if not exported).
func scrape(s *service) (fallback, mallocs int64) {
	mallocs = -1
	if s.metrics == "" {
		return 0, mallocs
	}
	resp, err := http.Get("http://" + s.metrics + "/metrics")
	if err != nil {
		return 0, mallocs
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		switch {
		case len(f) < 2:
		case strings.HasPrefix(line, "tokenlimit_decisions_total{") && (strings.Contains(line, "fail_open") || strings.Contains(line, "fail_closed")):
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			fallback += int64(v)
		case f[0] == "go_memstats_mallocs_total":
			v, _ := strconv.ParseFloat(f[1], 64)
			mallocs = int64(v)
		}
	}
	return fallback, mallocs
}

// startOurs starts tokenlimit serve on redisAddr with sc's configuration,
// run by the command wrap if any (such as valgrind).
func startOurs(o options, sc scenario, bin, dir, redisAddr string, wrap ...string) (*service, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "tokenlimit.yaml")
	if err := os.WriteFile(cfg, []byte(sc.ours), 0o644); err != nil {
		return nil, err
	}
	httpAddr, grpcAddr := freeAddr(), freeAddr()
	args := []string{"serve", "--config", cfg, "--reload-every", "0", "--listen", httpAddr, "--grpc-listen", grpcAddr, "--redis", "redis://" + redisAddr}
	if o.storeTimeout > 0 {
		args = append(args, "--store-timeout", o.storeTimeout.String())
	}
	pprofAddr := ""
	if o.cpuProfile != "" {
		pprofAddr = freeAddr()
		args = append(args, "--pprof-listen", pprofAddr)
	}
	cmd := exec.Command(bin, args...)
	if len(wrap) > 0 {
		cmd = exec.Command(wrap[0], append(wrap[1:], append([]string{bin}, args...)...)...)
	}
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	s, err := start("tokenlimit", cmd, grpcAddr)
	if err != nil {
		return nil, err
	}
	s.metrics, s.pprof = httpAddr, pprofAddr
	return s, nil
}

func startEnvoy(o options, sc scenario, dir, redisAddr string) (*service, error) {
	conf := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(conf, "bench.yaml"), []byte(sc.envoy), 0o644); err != nil {
		return nil, err
	}
	grpcAddr, promAddr := freeAddr(), freeAddr()
	port := func(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }
	cmd := exec.Command(o.envoy)
	cmd.Env = append(os.Environ(),
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr, "USE_STATSD=false",
		"RUNTIME_ROOT="+filepath.Join(dir, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+port(grpcAddr), "HOST=127.0.0.1", "PORT="+port(freeAddr()),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+port(freeAddr()), "LOG_LEVEL=warn",
		// Without statsd its stats go to a logging sink that writes a line
		// per observation; Prometheus is what tokenlimit serves too.
		"USE_PROMETHEUS=true", "PROMETHEUS_ADDR="+promAddr)
	if sc.cached {
		cmd.Env = append(cmd.Env, "LOCAL_CACHE_SIZE_IN_BYTES=16777216")
	}
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	s, err := start("envoyproxy/ratelimit", cmd, grpcAddr)
	if err != nil {
		return nil, err
	}
	s.metrics = promAddr
	return s, nil
}

// start runs cmd and waits until grpcAddr accepts connections.
func start(name string, cmd *exec.Cmd, grpcAddr string) (*service, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s := &service{name: name, grpc: grpcAddr, pid: cmd.Process.Pid, stop: func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", grpcAddr, time.Second)
		if err == nil {
			c.Close()
			return s, nil
		}
		select {
		case <-done:
			return nil, fmt.Errorf("%s exited at start", name)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("%s did not listen on %s within 30s", name, grpcAddr)
		}
	}
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func quantile(lat []time.Duration, q float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

// row is one service's medians in one scenario.
type row struct {
	rate, p50, p99, svcCPU, redisCPU, calls, scripts, allowed, fallback, errors float64
	mallocs                                                                     float64 // -1 unknown
	loadCPU                                                                     float64
}

func medians(runs []tally) row {
	var r [12][]float64
	for _, t := range runs {
		d := float64(max(t.decisions, 1))
		r[0] = append(r[0], float64(t.decisions)/t.elapsed.Seconds())
		r[1] = append(r[1], float64(quantile(t.lat, 0.5)))
		r[2] = append(r[2], float64(quantile(t.lat, 0.99)))
		r[3] = append(r[3], float64(t.serviceCPU)/d)
		r[4] = append(r[4], float64(t.redisCPU)/d)
		r[5] = append(r[5], float64(t.redisCalls)/d)
		r[6] = append(r[6], float64(t.allowed)/d)
		r[7] = append(r[7], float64(t.fallback))
		r[8] = append(r[8], float64(t.errors))
		r[9] = append(r[9], float64(t.scriptCalls)/d)
		r[10] = append(r[10], float64(t.mallocs)/d)
		if t.mallocs < 0 {
			r[10][len(r[10])-1] = -1
		}
		r[11] = append(r[11], float64(t.loadCPU)/d)
	}
	return row{runstat.Median(r[0]), runstat.Median(r[1]), runstat.Median(r[2]), runstat.Median(r[3]), runstat.Median(r[4]), runstat.Median(r[5]), runstat.Median(r[9]), runstat.Median(r[6]), runstat.Median(r[7]), runstat.Median(r[8]), runstat.Median(r[10]), runstat.Median(r[11])}
}

func report(sc scenario, svcs []*service, runs [][]tally) {
	fmt.Printf("## Scenario %s (%d users)\n\n", sc.name, sc.users)
	fmt.Println("| service | decisions/s | p50 | p99 | service CPU/decision | redis CPU/decision | Redis commands/decision (of them script calls) | allowed | failure-mode decisions | errors | service heap allocations/decision | load generator CPU/decision |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	rows := make([]row, len(svcs))
	for i, s := range svcs {
		r := medians(runs[i])
		rows[i] = r
		allocs := "–"
		if r.mallocs >= 0 {
			allocs = fmt.Sprintf("%.1f", r.mallocs)
		}
		fmt.Printf("| %s | %.1fk | %s | %s | %.1f µs | %.1f µs | %.3f (%.3f) | %.1f%% | %.0f | %.0f | %s | %.1f µs |\n", s.name, r.rate/1000,
			time.Duration(r.p50).Round(time.Microsecond), time.Duration(r.p99).Round(time.Microsecond),
			r.svcCPU/1000, r.redisCPU/1000, r.calls, r.scripts, 100*r.allowed, r.fallback, r.errors, allocs, r.loadCPU/1000)
		if runs[i][0].firstErr != nil {
			fmt.Printf("\nfirst error of %s: %v\n\n", s.name, runs[i][0].firstErr)
		}
	}
	o, e := rows[0], rows[1]
	fmt.Printf("\nRatios tokenlimit / envoyproxy/ratelimit: decisions/s %.2fx, service CPU per decision %.2fx, redis CPU per decision %s, p50 %.2fx\n\n",
		o.rate/e.rate, o.svcCPU/e.svcCPU, cpuRatio(o.redisCPU, e.redisCPU), o.p50/e.p50)
	fmt.Print("Targets:")
	if sc.minRate > 0 {
		fmt.Printf(" decisions/s ≥ %.1fx: %.2fx, %s;", sc.minRate, o.rate/e.rate, verdict(o.rate/e.rate >= sc.minRate))
	}
	fmt.Printf(" service CPU per decision ≤ %.1fx: %.2fx, %s.\n\n", sc.maxCPU, o.svcCPU/e.svcCPU, verdict(o.svcCPU/e.svcCPU <= sc.maxCPU))
}

// cpuRatio formats the ratio of two CPU times per decision in ns, or "–"
// when either is under 0.5 µs, too little for a ratio to mean anything:
// the over-limit scenario's Redis CPU, a few of the kernel's 10 ms ticks
// in a whole run.
func cpuRatio(ours, theirs float64) string {
	if ours < 500 || theirs < 500 {
		return "–"
	}
	return fmt.Sprintf("%.2fx", ours/theirs)
}

func verdict(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**not met**"
}
