// Command leaseload measures one hot key through the service, as issue 23's
// service benchmark asks: -replicas `tokenlimit serve` replicas (built
// from this repository, each a child process), -callers callers in all
// over HTTP POST /v1/check (each with its own keep-alive connection, the
// same number per replica), every call on one budget. Side by side, in
// slices that take turns (-runs rounds of -slice each), medians reported:
//
//   - embedded: each replica on its own embedded store (no budget shared:
//     the ceiling HTTP handling sets on this machine);
//   - redis: every replica on one redis-server, every decision a script
//     call there;
//   - lease (with -lease): the same with the hot limit leased
//     (lease: -lease), decided in process from leases.
//
// Two phases: "hot", a budget no caller exhausts (decisions per second,
// CPU per decision of the replicas and of redis-server, and the Redis
// commands per decision from INFO commandstats), and "fair", a budget of
// -fair-rate per second that the callers overrun (each replica's share of
// the admissions: with equal callers no replica should starve).
//
// It starts redis-server (from PATH, or -redis-server) on a free
// 127.0.0.1 port with no persistence and stops everything when done. From
// bench/:
//
//	go run ./cmd/leaseload -lease '{size: 1000, ttl: 2s}' > lease.md
//
// The hot limit is a bucket of 10,000,000 refilling 1,000,000 a second
// (a window of 10 s, the longest TTL its leases may take); the fair one
// holds a tenth of -fair-rate and refills -fair-rate a second.
//
// Figures swing with whatever else the machine runs: compare only within
// one run.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
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
	repo        string
	redisServer string
	replicas    int
	callers     int
	runs        int
	slice       time.Duration
	fairRate    int
	lease       string // the hot limit's lease: mapping, "" for no lease variant
	fairLease   string // the fair limit's lease
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "leaseload:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("leaseload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.repo, "repo", "..", "the repository whose cmd/tokenlimit is built")
	fs.StringVar(&o.redisServer, "redis-server", "redis-server", "the redis-server binary")
	fs.IntVar(&o.replicas, "replicas", 4, "serve replicas per variant")
	fs.IntVar(&o.callers, "callers", 64, "callers in all, spread evenly over the replicas")
	fs.IntVar(&o.runs, "runs", 5, "rounds; each variant gets one slice of each phase per round")
	fs.DurationVar(&o.slice, "slice", 3*time.Second, "length of one variant's slice")
	fs.IntVar(&o.fairRate, "fair-rate", 500, "the fair phase's budget, admissions per second in all (well under what the callers send)")
	fs.StringVar(&o.lease, "lease", "", "the hot limit's lease as YAML, such as {size: 1000, ttl: 2s}; empty: no lease variant")
	fs.StringVar(&o.fairLease, "fair-lease", "{size: 5, ttl: 100ms}", "the fair limit's lease, with -lease (its TTL at most the bucket's window, a tenth of a second)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.replicas < 1 || o.callers < o.replicas || o.callers%o.replicas != 0 || o.runs < 1 || o.slice <= 0 || o.fairRate < 1 {
		return o, errors.New("want -replicas >= 1, -callers a multiple of it, -runs >= 1, -slice and -fair-rate positive")
	}
	return o, nil
}

// variant is one way of running the replicas.
type variant struct {
	name     string
	redis    bool
	config   string
	replicas []*replica
}

// replica is one running `tokenlimit serve`.
type replica struct {
	addr   string
	pid    int
	stop   func()
	client *http.Client
}

// configFor is the configuration of a variant: the hot limit and the fair
// one, both keyed by org, leased when lease and fairLease are set.
func configFor(o options, lease, fairLease string) string {
	leaseLine := func(l string) string {
		if l == "" {
			return ""
		}
		return ", lease: " + l
	}
	return fmt.Sprintf(`limits:
  - {name: hot, match: {route: /hot}, key: [org], algorithm: token_bucket, capacity: 10000000, refill: 1000000/s, failure_mode: closed%s}
  - {name: fair, match: {route: /fair}, key: [org], algorithm: token_bucket, capacity: %d, refill: %d/s, failure_mode: closed%s}
`, leaseLine(lease), max(1, o.fairRate/10), o.fairRate, leaseLine(fairLease))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "leaseload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := servechild.Build(ctx, o.repo, dir)
	if err != nil {
		return err
	}
	redis, err := redisserver.Start(o.redisServer)
	if err != nil {
		return err
	}
	defer redis.Stop()
	variants := []*variant{{name: "embedded", config: configFor(o, "", "")}, {name: "redis", redis: true, config: configFor(o, "", "")}}
	if o.lease != "" {
		variants = append(variants, &variant{name: "lease", redis: true, config: configFor(o, o.lease, o.fairLease)})
	}
	loadBefore := loadAverage()
	for _, v := range variants {
		path := filepath.Join(dir, v.name+".yaml")
		if err := os.WriteFile(path, []byte(v.config), 0o644); err != nil {
			return err
		}
		redisURL := ""
		if v.redis {
			redisURL = "redis://" + redis.Addr()
		}
		for range o.replicas {
			r, err := startReplica(ctx, bin, path, redisURL)
			if err != nil {
				return fmt.Errorf("%s: %w", v.name, err)
			}
			defer r.stop()
			r.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.callers, MaxConnsPerHost: o.callers}, Timeout: 10 * time.Second}
			v.replicas = append(v.replicas, r)
		}
	}
	results := map[string][]slice{}
	for round := range o.runs {
		for _, phase := range []string{"hot", "fair"} {
			for _, v := range variants {
				s, err := measure(ctx, o, v, phase, redis)
				if err != nil {
					return fmt.Errorf("%s %s: %w", v.name, phase, err)
				}
				fmt.Fprintf(stderr, "round %d %-5s %-8s %8.0f decisions/s, %6.0f admitted/s, %.4f Redis calls/decision\n",
					round+1, phase, v.name, s.perSecond(), float64(s.admittedTotal())/s.elapsed.Seconds(), s.redisPerDecision())
				results[phase+"/"+v.name] = append(results[phase+"/"+v.name], s)
			}
		}
	}
	report(stdout, o, variants, results, loadBefore, loadAverage())
	return nil
}

// startReplica runs `tokenlimit serve` with the configuration at path
// (redisURL empty: the embedded store) on a free loopback port.
func startReplica(ctx context.Context, bin, path, redisURL string) (*replica, error) {
	// Fail-closed limits and a store timeout no loaded machine reaches: a
	// decision the store could not make is an error of the run (503), not
	// a local fail-open admission that would blur the figures.
	args := []string{"serve", "--config", path, "--reload-every", "0", "--listen", "127.0.0.1:0", "--grpc-listen", "", "--store-timeout", "2s"}
	if redisURL != "" {
		args = append(args, "--redis", redisURL)
	}
	c, err := servechild.Start(ctx, bin, args, servechild.HTTP)
	if err != nil {
		return nil, err
	}
	return &replica{addr: c.Addrs[servechild.HTTP], pid: c.Pid, stop: func() { _ = c.Stop() }}, nil
}

// slice is what one variant did in one slice.
type slice struct {
	elapsed    time.Duration
	decisions  []int64 // per replica
	admitted   []int64 // per replica
	serviceCPU time.Duration
	redisCPU   time.Duration
	redisCalls int64
}

func (s slice) decisionsTotal() (n int64) {
	for _, d := range s.decisions {
		n += d
	}
	return n
}

func (s slice) admittedTotal() (n int64) {
	for _, a := range s.admitted {
		n += a
	}
	return n
}

func (s slice) perSecond() float64 { return float64(s.decisionsTotal()) / s.elapsed.Seconds() }

func (s slice) redisPerDecision() float64 {
	return float64(s.redisCalls) / max(1, float64(s.decisionsTotal()))
}

// fairness is the slowest replica's admissions over the fastest's.
func (s slice) fairness() float64 {
	lo, hi := s.admitted[0], s.admitted[0]
	for _, a := range s.admitted {
		lo, hi = min(lo, a), max(hi, a)
	}
	if hi == 0 {
		return 0
	}
	return float64(lo) / float64(hi)
}

// measure loads v's replicas for one slice of phase, callers spread evenly.
func measure(ctx context.Context, o options, v *variant, phase string, redis *redisserver.Server) (slice, error) {
	body := []byte(`{"descriptors": {"org": "acme-` + v.name + `", "route": "/` + phase + `"}}`)
	s := slice{decisions: make([]int64, len(v.replicas)), admitted: make([]int64, len(v.replicas))}
	pids := []int{redis.Pid()}
	for _, r := range v.replicas {
		pids = append(pids, r.pid)
	}
	cpuBefore := cpuTimes(pids)
	callsBefore, err := commandCalls(redis)
	if err != nil {
		return s, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.slice)
	defer cancel()
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	perReplica := o.callers / len(v.replicas)
	counts := make([]struct{ decisions, admitted atomic.Int64 }, len(v.replicas))
	for i, r := range v.replicas {
		for range perReplica {
			wg.Go(func() {
				for ctx.Err() == nil {
					allowed, err := check(ctx, r, body)
					if err != nil {
						if ctx.Err() == nil {
							firstErr.CompareAndSwap(nil, &err)
						}
						return
					}
					counts[i].decisions.Add(1)
					if allowed {
						counts[i].admitted.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	s.elapsed = time.Since(start)
	if e := firstErr.Load(); e != nil {
		return s, *e
	}
	for i := range counts {
		s.decisions[i], s.admitted[i] = counts[i].decisions.Load(), counts[i].admitted.Load()
	}
	cpuAfter := cpuTimes(pids)
	s.redisCPU = cpuAfter[0] - cpuBefore[0]
	for i := 1; i < len(pids); i++ {
		s.serviceCPU += cpuAfter[i] - cpuBefore[i]
	}
	callsAfter, err := commandCalls(redis)
	if err != nil {
		return s, err
	}
	s.redisCalls = callsAfter - callsBefore
	return s, nil
}

// check posts one decision and reports whether it was admitted.
func check(ctx context.Context, r *replica, body []byte) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+r.addr+"/v1/check", bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return false, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusTooManyRequests:
		return false, nil
	}
	return false, fmt.Errorf("POST /v1/check: %d %s", resp.StatusCode, b)
}

func cpuTimes(pids []int) []time.Duration {
	out := make([]time.Duration, len(pids))
	for i, p := range pids {
		out[i], _ = runstat.CPUTime(p)
	}
	return out
}

// decisionCommands are the commands a decision (or a lease) costs Redis:
// script and function calls. The rest (the quota plane's XREAD BLOCK,
// health probes' PINGs, INFO) runs whatever the load.
var decisionCommands = []string{"fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval", "eval_ro"}

// commandCalls sums the calls of decisionCommands redis-server has run
// (INFO commandstats).
func commandCalls(redis *redisserver.Server) (int64, error) {
	info, err := redis.Do("INFO", "commandstats")
	if err != nil {
		return 0, err
	}
	var n int64
	for line := range strings.Lines(info) {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || !slices.Contains(decisionCommands, strings.TrimPrefix(name, "cmdstat_")) {
			continue
		}
		calls, _, _ := strings.Cut(stats, ",")
		c, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO commandstats: %q: %w", line, err)
		}
		n += c
	}
	return n, nil
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func report(w io.Writer, o options, variants []*variant, results map[string][]slice, loadBefore, loadAfter string) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("# One hot key through the service: %d replicas, %d callers over HTTP", o.replicas, o.callers)
	p("")
	p("%d CPUs, %s; %d rounds of %s slices, variants taking turns; load average %s before, %s after.", runtime.NumCPU(), runtime.Version(), o.runs, o.slice, loadBefore, loadAfter)
	if o.lease != "" {
		p("Leases: hot `%s`, fair `%s`.", o.lease, o.fairLease)
	}
	p("")
	p("## Hot: a budget no caller exhausts (medians)")
	p("")
	p("| variant | decisions/s | vs embedded | replicas' CPU µs/decision | redis CPU µs/decision | Redis calls/decision |")
	p("|---|---:|---:|---:|---:|---:|")
	embedded := median(results["hot/embedded"], slice.perSecond)
	for _, v := range variants {
		ss := results["hot/"+v.name]
		rate := median(ss, slice.perSecond)
		p("| %s | %.0f | %.2fx | %.1f | %.1f | %.4f |", v.name, rate, rate/embedded,
			median(ss, func(s slice) float64 { return float64(s.serviceCPU.Microseconds()) / float64(s.decisionsTotal()) }),
			median(ss, func(s slice) float64 { return float64(s.redisCPU.Microseconds()) / float64(s.decisionsTotal()) }),
			median(ss, slice.redisPerDecision))
	}
	p("")
	p("## Fair: %d admissions a second for all, overrun (medians)", o.fairRate)
	p("")
	p("| variant | admitted/s | denied | slowest / fastest replica's admissions | shares per replica (last round) |")
	p("|---|---:|---:|---:|---|")
	for _, v := range variants {
		ss := results["fair/"+v.name]
		last := ss[len(ss)-1]
		shares := make([]string, len(last.admitted))
		for i, a := range last.admitted {
			shares[i] = fmt.Sprintf("%.1f%%", 100*float64(a)/max(1, float64(last.admittedTotal())))
		}
		p("| %s | %.0f | %.0f%% | %.2f | %s |", v.name, median(ss, func(s slice) float64 { return float64(s.admittedTotal()) / s.elapsed.Seconds() }),
			median(ss, func(s slice) float64 {
				return 100 * (1 - float64(s.admittedTotal())/max(1, float64(s.decisionsTotal())))
			}),
			median(ss, slice.fairness), strings.Join(shares, " "))
	}
	p("")
	p("The embedded variant's replicas have a budget each, so its fair row admits %d times the budget; it is there for its hot row, the ceiling of HTTP handling. A fair row with few denials was not overrun: its shares then say how the callers were served, not how the budget was split.", o.replicas)
}

func median(ss []slice, f func(slice) float64) float64 {
	xs := make([]float64, len(ss))
	for i, s := range ss {
		xs[i] = f(s)
	}
	return runstat.Median(xs)
}
