package service_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/goredisclient"
	"github.com/tokenlimit/tokenlimit/service"
)

// D is a request's descriptors.
type D = map[string]string

// clock is a fake clock safe for concurrent use, one per test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// t0 is the base time of most tests: a Thursday, mid-morning UTC.
var t0 = time.Date(2026, 1, 15, 9, 30, 0, 0, time.UTC)

// stores are the two stores every service behaviour is tested on.
var stores = []string{"memory", "redis"}

// eachStore runs fn as a parallel subtest per store.
func eachStore(t *testing.T, fn func(t *testing.T, store string)) {
	t.Helper()
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			fn(t, store)
		})
	}
}

// env is a service under test with its clock, metrics and store.
type env struct {
	t     *testing.T
	svc   *service.Service
	clock *clock
	reg   *prometheus.Registry
	store tokenlimit.Store
	redis *redistest.Server // nil for the memory store
}

var prefixes atomic.Int64

// quiet discards the service's logs: store failures are expected in tests.
var quiet = slog.New(slog.DiscardHandler)

// newEnv starts a service on the named store ("memory" or "redis") enforcing
// the YAML configuration yml, at time start of a fake clock. On Redis it
// starts a redis-server of its own and decides at the fake clock's time
// (CallerTime); the store timeout is generous so that a slow machine never
// turns a check into a fail-open decision. edit, if given, changes the
// options last.
func newEnv(t *testing.T, store, yml string, start time.Time, edit ...func(*service.Options)) *env {
	t.Helper()
	cfg := parseConfig(t, yml)
	e := &env{t: t, clock: newClock(start), reg: prometheus.NewRegistry()}
	opts := service.Options{Clock: e.clock.Now, Registerer: e.reg, Logger: quiet}
	switch store {
	case "memory":
		st, err := memstore.New(memstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		opts.Store = st
	case "redis":
		e.redis = redistest.Start(t)
		opts.Store = newRedisStore(t, e.redis.Addr())
		opts.StoreTimeout = 10 * time.Second
	default:
		t.Fatalf("unknown store %q", store)
	}
	for _, f := range edit {
		f(&opts)
	}
	e.store = opts.Store
	svc, err := service.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	return e
}

// newRedisStore returns a Redis store on addr with a key prefix of its own,
// deciding at the caller's time.
func newRedisStore(t testing.TB, addr string) *redisstore.Store {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	st, err := redisstore.New(goredisclient.New(c), redisstore.Options{
		Prefix:     fmt.Sprintf("svc%d:", prefixes.Add(1)),
		CallerTime: true,
		TTLPadding: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func parseConfig(t testing.TB, yml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(yml), "test.yaml")
	if err != nil {
		t.Fatalf("configuration:\n%v", err)
	}
	return cfg
}

// check decides one request, failing the test on an error.
func (e *env) check(desc D, cost int64) service.Decision {
	e.t.Helper()
	return e.checkAll(service.Request{Descriptors: desc, Cost: cost})
}

func (e *env) checkAll(reqs ...service.Request) service.Decision {
	e.t.Helper()
	d, err := e.svc.Check(context.Background(), reqs...)
	if err != nil {
		e.t.Fatalf("Check(%+v): %v", reqs, err)
	}
	return d
}

// inspect reports the budgets desc selects without charging.
func (e *env) inspect(desc D) service.Decision {
	e.t.Helper()
	d, err := e.svc.Inspect(context.Background(), service.Request{Descriptors: desc})
	if err != nil {
		e.t.Fatalf("Inspect(%v): %v", desc, err)
	}
	return d
}

// remaining is the Remaining of limit name for desc, read with Inspect.
func (e *env) remaining(desc D, name string) int64 {
	e.t.Helper()
	return mustOutcome(e.t, e.inspect(desc), name).Remaining
}

// outcome returns the outcome of the limit named name.
func outcome(d service.Decision, name string) (service.Outcome, bool) {
	for _, o := range d.Limits {
		if o.Name == name {
			return o, true
		}
	}
	return service.Outcome{}, false
}

func mustOutcome(t testing.TB, d service.Decision, name string) service.Outcome {
	t.Helper()
	o, ok := outcome(d, name)
	if !ok {
		t.Fatalf("no outcome for limit %q in %s", name, describe(d))
	}
	return o
}

// names lists the limits of a decision, in order.
func names(d service.Decision) []string {
	out := []string{}
	for _, o := range d.Limits {
		out = append(out, o.Name)
	}
	return out
}

// describe prints a decision compactly for failure messages.
func describe(d service.Decision) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "{allowed=%v unavailable=%v", d.Allowed, d.Unavailable)
	for _, o := range d.Limits {
		fmt.Fprintf(&sb, " [%s key=%q req=%d cost=%d shadow=%v failopen=%v allowed=%v limit=%d remaining=%d retry=%v reset=%v]",
			o.Name, o.Key, o.Request, o.Cost, o.Shadow, o.FailOpen, o.Allowed, o.Limit, o.Remaining, o.RetryAfter, o.ResetAfter)
	}
	return sb.String() + "}"
}

// metric returns the value of the counter or gauge name with exactly the
// given labels in reg, or 0 if it has not been recorded. For a histogram it
// returns the sample count.
func metric(t testing.TB, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	if len(labels)%2 != 0 {
		t.Fatalf("metric %s: labels must come in name, value pairs: %q", name, labels)
	}
	want := map[string]string{}
	for i := 0; i < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if !maps.Equal(got, want) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// metricLabels lists the label sets recorded for name, as "k=v,k=v" sorted.
func metricLabels(t testing.TB, reg prometheus.Gatherer, name string) []string {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var parts []string
			for _, l := range m.GetLabel() {
				parts = append(parts, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(parts)
			out = append(out, strings.Join(parts, ","))
		}
	}
	slices.Sort(out)
	return out
}
