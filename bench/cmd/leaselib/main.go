// Command leaselib measures one hot key decided in process through the
// library, with and without leases, side by side: -replicas limiters (each
// a tokenlimit.Limiter over its own resilient.Failover and Redis client, as
// separate replicas would be) share one redis-server, and -goroutines
// goroutines per limiter call AllowN on the same key closed loop.
//
// The variants: "store" decides every call on Redis (the Failover with no
// lease); "lease" takes leases of -size for -ttl (resilient.Policy.Lease)
// and decides from them in process. Each variant has its own key on a
// token bucket that always admits. For -runs rounds the variants alternate
// (the order flips every round), each running -duration; it reports per
// variant the medians over the rounds of decisions per second, Redis
// calls per decision (script calls, from INFO commandstats), and the CPU
// time per decision of this process and of redis-server. It starts its
// own redis-server on a free 127.0.0.1 port (never a system Redis).
// Usage, from bench/:
//
//	go run ./cmd/leaselib > lease.md
//
// Figures swing on shared machines: compare only within one run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/bench/internal/redisserver"
	"github.com/tokenlimit/tokenlimit/bench/internal/runstat"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
	"github.com/tokenlimit/tokenlimit/resilient"
)

// hotLimit always admits: a billion tokens refilling a billion a second
// never run dry under one machine's calls.
var hotLimit = tokenlimit.TokenBucketLimit(1_000_000_000, 1_000_000_000, time.Second)

type options struct {
	redisBin   string
	replicas   int
	goroutines int
	duration   time.Duration
	runs       int
	lease      tokenlimit.Lease
}

func main() {
	var o options
	flag.StringVar(&o.redisBin, "redis-server", "redis-server", "the redis-server binary")
	flag.IntVar(&o.replicas, "replicas", 4, "limiters, each with its own fault layer and Redis client")
	flag.IntVar(&o.goroutines, "goroutines", 16, "goroutines calling per limiter")
	flag.DurationVar(&o.duration, "duration", 3*time.Second, "how long each variant runs per round")
	flag.IntVar(&o.runs, "runs", 5, "rounds; each runs both variants once")
	flag.Int64Var(&o.lease.Size, "size", 1000, "the lease's size")
	flag.DurationVar(&o.lease.TTL, "ttl", time.Second, "the lease's TTL")
	flag.Parse()
	if o.replicas < 1 || o.goroutines < 1 || o.runs < 1 || o.duration <= 0 {
		fatal(errors.New("-replicas, -goroutines, -runs and -duration must be positive"))
	}
	if err := o.lease.Validate(hotLimit); err != nil {
		fatal(fmt.Errorf("-size, -ttl: %w", err))
	}
	if err := run(o); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "leaselib:", err)
	os.Exit(1)
}

// variant is one way of deciding: its replicas and its results per round.
type variant struct {
	name     string
	key      string
	limiters []*tokenlimit.Limiter
	closers  []func()
	slices   []slice
}

// slice is one round of one variant.
type slice struct {
	decisions, errors int64
	took              time.Duration
	commands          int64
	selfCPU, redisCPU time.Duration
}

func (s slice) rate() float64 { return float64(s.decisions) / s.took.Seconds() }

func (s slice) per(d time.Duration) time.Duration {
	if s.decisions == 0 {
		return 0
	}
	return d / time.Duration(s.decisions)
}

func run(o options) error {
	loadBefore, _ := os.ReadFile("/proc/loadavg")
	srv, err := redisserver.Start(o.redisBin)
	if err != nil {
		return err
	}
	defer srv.Stop()
	var variants []*variant
	for _, v := range []struct {
		name  string
		lease tokenlimit.Lease
	}{{"store", tokenlimit.Lease{}}, {"lease", o.lease}} {
		vr, err := newVariant(v.name, srv.Addr(), o.replicas, v.lease)
		if err != nil {
			return err
		}
		defer vr.close()
		variants = append(variants, vr)
	}
	for _, v := range variants { // scripts loaded, keys made, first leases taken
		if s := v.load(srv, o.goroutines, 300*time.Millisecond); s.errors > 0 {
			return fmt.Errorf("%s: warm-up: %d errors", v.name, s.errors)
		}
	}
	for r := range o.runs {
		order := variants
		if r%2 == 1 {
			order = []*variant{variants[1], variants[0]}
		}
		for _, v := range order {
			v.slices = append(v.slices, v.load(srv, o.goroutines, o.duration))
		}
	}
	loadAfter, _ := os.ReadFile("/proc/loadavg")
	report(os.Stdout, o, variants, strings.TrimSpace(string(loadBefore)), strings.TrimSpace(string(loadAfter)))
	return nil
}

// newVariant makes replicas limiters on the redis-server at addr, each
// over its own client and fault layer deciding under lease.
func newVariant(name, addr string, replicas int, lease tokenlimit.Lease) (*variant, error) {
	v := &variant{name: name, key: "hot:" + name}
	for range replicas {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			return nil, err
		}
		v.closers = append(v.closers, c.Close)
		st, err := redisstore.New(rueidisclient.New(c), redisstore.Options{})
		if err != nil {
			return nil, err
		}
		f, err := resilient.NewFailover(st, resilient.FailoverOptions{
			Options: resilient.Options{Timeout: time.Second}, // the failure modes stay out of the figures
			Policy:  resilient.Policy{Limit: "hot", Lease: lease},
		})
		if err != nil {
			return nil, err
		}
		v.closers = append(v.closers, func() { _ = f.Close(context.Background()) })
		lim, err := tokenlimit.NewLimiter(f)
		if err != nil {
			return nil, err
		}
		v.limiters = append(v.limiters, lim)
	}
	return v, nil
}

func (v *variant) close() {
	for i := len(v.closers) - 1; i >= 0; i-- {
		v.closers[i]()
	}
}

// load calls AllowN from goroutines per limiter for d and measures it.
func (v *variant) load(srv *redisserver.Server, goroutines int, d time.Duration) slice {
	cmd0, self0, redis0 := commands(srv), selfCPU(), redisCPU(srv)
	var decisions, errs atomic.Int64
	ctx := context.Background()
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for _, lim := range v.limiters {
		for range goroutines {
			wg.Go(func() {
				var n, e int64
				for time.Now().Before(deadline) {
					r, err := lim.AllowN(ctx, v.key, hotLimit, 1)
					if err != nil || !r.Allowed {
						e++
						continue
					}
					n++
				}
				decisions.Add(n)
				errs.Add(e)
			})
		}
	}
	wg.Wait()
	took := time.Since(start)
	return slice{decisions: decisions.Load(), errors: errs.Load(), took: took,
		commands: commands(srv) - cmd0, selfCPU: selfCPU() - self0, redisCPU: redisCPU(srv) - redis0}
}

func selfCPU() time.Duration {
	d, _ := runstat.CPUTime(0)
	return d
}

// scriptCalls are the commands that run the store's code: one per store
// call (the commands a script runs inside are not counted).
var scriptCalls = []string{"fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval", "eval_ro"}

// commands returns the store calls redis-server has answered (INFO
// commandstats, scriptCalls), 0 if unknown.
func commands(srv *redisserver.Server) int64 {
	var n int64
	for _, name := range scriptCalls {
		stats := infoField(srv, "commandstats", "cmdstat_"+name) // calls=3,usec=40,...
		for kv := range strings.SplitSeq(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				c, _ := strconv.ParseInt(v, 10, 64)
				n += c
			}
		}
	}
	return n
}

// redisCPU returns redis-server's CPU time so far (INFO cpu), 0 if unknown.
func redisCPU(srv *redisserver.Server) time.Duration {
	sys, _ := strconv.ParseFloat(infoField(srv, "cpu", "used_cpu_sys"), 64)
	user, _ := strconv.ParseFloat(infoField(srv, "cpu", "used_cpu_user"), 64)
	return time.Duration((sys + user) * float64(time.Second))
}

// infoField returns field of INFO section, "" if unknown.
func infoField(srv *redisserver.Server, section, field string) string {
	info, err := srv.Do("INFO", section)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == field {
			return v
		}
	}
	return ""
}

func report(w io.Writer, o options, variants []*variant, loadBefore, loadAfter string) {
	fmt.Fprintf(w, "one hot key through the library: %d limiters x %d goroutines on one redis-server, lease %d for %s; %d rounds of %s per variant, alternating\n\n",
		o.replicas, o.goroutines, o.lease.Size, o.lease.TTL, o.runs, o.duration)
	fmt.Fprintf(w, "load average before: %s; after: %s\n\n", loadBefore, loadAfter)
	fmt.Fprintln(w, "| variant | decisions/s (median) | Redis calls/decision | process CPU/decision | redis CPU/decision | errors | decisions/s per round |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	medians := map[string]float64{}
	for _, v := range variants {
		var rates, cmds []float64
		var self, redis []time.Duration
		var errs int64
		var each []string
		for _, s := range v.slices {
			rates = append(rates, s.rate())
			cmds = append(cmds, float64(s.commands)/float64(max(1, s.decisions)))
			self, redis = append(self, s.per(s.selfCPU)), append(redis, s.per(s.redisCPU))
			errs += s.errors
			each = append(each, fmt.Sprintf("%.0f", s.rate()))
		}
		medians[v.name] = runstat.Median(rates)
		fmt.Fprintf(w, "| %s | %.0f | %.4f | %s | %s | %d | %s |\n", v.name, medians[v.name], runstat.Median(cmds),
			runstat.Median(self), runstat.Median(redis), errs, strings.Join(each, ", "))
	}
	if medians["store"] > 0 {
		fmt.Fprintf(w, "\nwith leases / without: %.2fx decisions/s\n", medians["lease"]/medians["store"])
	}
}
