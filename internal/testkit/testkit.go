// Package testkit is what the tests of several packages share: a fake
// clock, the stores every behaviour is checked on, a service on one of them
// at a fake time (which the HTTP API's, the gRPC server's, the proxy's and
// the dashboard's tests put their own front on), a log buffer, a metric
// reader and a poll with a deadline.
//
// Only tests import it (external test packages: it imports the service).
package testkit

import (
	"bytes"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/goredisclient"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
	"github.com/tokenlimit/tokenlimit/service"
)

// Clock is a fake clock, safe for concurrent use: the code under test reads
// it from its own goroutines while the test sets or advances it. The zero
// Clock reads the zero time.
type Clock struct {
	mu     sync.Mutex
	t      time.Time
	timers []*fakeTimer // pending, made by Timer
}

// fakeTimer fires at time at: sends on c, or runs fn in a goroutine of
// its own when fn is set (AfterFunc).
type fakeTimer struct {
	at time.Time
	c  chan time.Time
	fn func()
}

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock { return &Clock{t: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t, backwards too, firing the timers due by t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
	c.fire()
}

// Advance moves the clock d forward (backward for a negative d), firing the
// timers due by then.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	c.fire()
}

// Timer is time.NewTimer on the clock (a service.Options.Timer): the
// channel receives the clock's time once the clock has been moved d past
// now (at once for d <= 0); stop drops the timer, reporting whether it
// had not fired.
func (c *Clock) Timer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.t.Add(d), c: make(chan time.Time, 1)}
	return t.c, c.add(t)
}

// AfterFunc is time.AfterFunc on the clock (a resilient.FailoverOptions
// AfterFunc): fn runs in a goroutine of its own once the clock has been
// moved d past now (at once for d <= 0); stop drops it, reporting whether
// it had not run.
func (c *Clock) AfterFunc(d time.Duration, fn func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.add(&fakeTimer{at: c.t.Add(d), fn: fn})
}

// add adds t, fires the timers due, and returns t's stop. c.mu is held.
func (c *Clock) add(t *fakeTimer) (stop func() bool) {
	c.timers = append(c.timers, t)
	c.fire()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		n := len(c.timers)
		c.timers = slices.DeleteFunc(c.timers, func(o *fakeTimer) bool { return o == t })
		return len(c.timers) < n
	}
}

// Timers returns how many timers made by Timer and AfterFunc are pending: a test
// waits for its code to be asleep on them before it advances the clock.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// fire fires and drops the timers due by the clock's time, in the order
// they were made. c.mu is held.
func (c *Clock) fire() {
	c.timers = slices.DeleteFunc(c.timers, func(t *fakeTimer) bool {
		if t.at.After(c.t) {
			return false
		}
		if t.fn != nil {
			go t.fn()
		} else {
			t.c <- c.t
		}
		return true
	})
}

// The stores every behaviour is checked on, by name.
const (
	Memory = "memory" // the embedded store
	Redis  = "redis"  // the Redis store on a real redis-server
)

// EachStore runs fn as a parallel subtest of t per store: Memory, then
// Redis.
func EachStore(t *testing.T, fn func(t *testing.T, store string)) {
	t.Helper()
	for _, store := range []string{Memory, Redis} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			fn(t, store)
		})
	}
}

// MemStore returns a fresh embedded store with default options.
func MemStore(tb testing.TB) *memstore.Store {
	tb.Helper()
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// Client is the Redis client a test's Redis store runs on.
type Client int

const (
	// GoRedis is go-redis, the zero Client.
	GoRedis Client = iota
	// Rueidis is rueidis, the client tokenlimit serve uses.
	Rueidis
)

// prefixes numbers the Redis stores of a test binary, so that stores
// sharing one redis-server never share keys.
var prefixes atomic.Int64

// RedisStore returns a Redis store on the redis-server at addr over client,
// with a key prefix of its own, deciding at the caller's (fake) time and
// keeping keys an hour past their windows, so that a fake clock ahead of
// the server's never sees them expire early. The client closes when tb
// ends.
func RedisStore(tb testing.TB, addr string, client Client) *redisstore.Store {
	tb.Helper()
	var c redisstore.Scripter
	switch client {
	case GoRedis:
		rc := redis.NewClient(&redis.Options{Addr: addr})
		tb.Cleanup(func() { rc.Close() })
		c = goredisclient.New(rc)
	case Rueidis:
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			tb.Fatalf("rueidis: %v", err)
		}
		tb.Cleanup(rc.Close)
		c = rueidisclient.New(rc)
	default:
		tb.Fatalf("unknown Redis client %d", client)
	}
	st, err := redisstore.New(c, redisstore.Options{
		Prefix: fmt.Sprintf("t%d:", prefixes.Add(1)), CallerTime: true, TTLPadding: time.Hour,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// Quiet is a logger that discards everything: store failures are expected
// in tests.
func Quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// ParseConfig parses a configuration given as YAML, failing tb on an
// error.
func ParseConfig(tb testing.TB, yml string) *config.Config {
	tb.Helper()
	cfg, err := config.Parse([]byte(yml), tb.Name()+".yaml")
	if err != nil {
		tb.Fatalf("configuration:\n%v", err)
	}
	return cfg
}

// Setup describes a service for NewService. Only Store and Config are
// required.
type Setup struct {
	// Store is Memory or Redis.
	Store string
	// Config is the configuration the service enforces.
	Config *config.Config
	// Start is the fake clock's time at the start.
	Start time.Time
	// Clock, if set, is the service's clock instead of the fake one (which
	// nothing reads then): time.Now for a test on real time.
	Clock func() time.Time
	// Redis is the redis-server of a Redis store; nil starts one for the
	// test alone.
	Redis *redistest.Server
	// Client is the Redis store's client.
	Client Client
	// WrapStore, if set, wraps the store the service is given.
	WrapStore func(tokenlimit.Store) tokenlimit.Store
	// Metrics registers the service's metrics on Env.Registry.
	Metrics bool
	// Edit, if set, changes the service's options last.
	Edit func(*service.Options)
}

// Env is a service under test on one store at a fake time.
type Env struct {
	// Service decides.
	Service *service.Service
	// Clock is the service's clock.
	Clock *Clock
	// Store is the store the service was given (wrapped, if it was).
	Store tokenlimit.Store
	// Redis is the Redis store's server, nil on the embedded store.
	Redis *redistest.Server
	// Registry holds the service's metrics; nil unless Setup.Metrics.
	Registry *prometheus.Registry
}

// NewService starts a service as s describes it, logging nothing. Its
// store timeout is 10 s, so that a slow machine never turns a check into a
// failure-mode decision; s.Edit may change that.
func NewService(tb testing.TB, s Setup) *Env {
	tb.Helper()
	e := &Env{Clock: NewClock(s.Start)}
	opts := service.Options{Clock: s.Clock, Logger: Quiet(), StoreTimeout: 10 * time.Second}
	if s.Metrics {
		e.Registry = prometheus.NewRegistry()
		opts.Registerer = e.Registry
	}
	if opts.Clock == nil {
		opts.Clock, opts.Timer, opts.AfterFunc = e.Clock.Now, e.Clock.Timer, e.Clock.AfterFunc
	}
	switch s.Store {
	case Memory:
		opts.Store = MemStore(tb)
	case Redis:
		e.Redis = s.Redis
		if e.Redis == nil {
			e.Redis = redistest.Start(tb)
		}
		opts.Store = RedisStore(tb, e.Redis.Addr(), s.Client)
	default:
		tb.Fatalf("unknown store %q", s.Store)
	}
	if s.WrapStore != nil {
		opts.Store = s.WrapStore(opts.Store)
	}
	if s.Edit != nil {
		s.Edit(&opts)
	}
	e.Store = opts.Store
	svc, err := service.New(s.Config, opts)
	if err != nil {
		tb.Fatal(err)
	}
	e.Service = svc
	return e
}

// Buffer collects what several goroutines write, a server's log say, while
// the test reads it. The zero Buffer is empty and ready for use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Metric returns the value of the counter or gauge name with exactly the
// given labels (name, value pairs) in reg, or 0 if it has not been
// recorded. For a histogram it
// returns the sample count.
func Metric(tb testing.TB, reg prometheus.Gatherer, name string, labels ...string) float64 {
	tb.Helper()
	if len(labels)%2 != 0 {
		tb.Fatalf("metric %s: labels must come in name, value pairs: %q", name, labels)
	}
	want := map[string]string{}
	for i := 0; i < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	families, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
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

// Eventually polls cond every 10 ms until it holds, failing tb with what
// once within has passed without it.
func Eventually(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not reached within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with a deadline
	}
}

// GoTool finds the program name that go install module puts in Go's bin
// directory (GOBIN, or GOPATH/bin), looking on PATH first. Missing, it
// skips tb loudly, or fails it when CI is true: scripts/test.sh installs
// every tool the tests use.
func GoTool(tb testing.TB, name, module string) string {
	tb.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output(); err == nil {
		dirs := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(dirs) > 1 {
			dirs[1] = filepath.Join(dirs[1], "bin")
		}
		for _, d := range dirs {
			if d == "" {
				continue
			}
			if st, err := os.Stat(filepath.Join(d, name)); err == nil && st.Mode().IsRegular() {
				return filepath.Join(d, name)
			}
		}
	}
	msg := name + " not found: go install " + module + " (scripts/test.sh does)"
	if os.Getenv("CI") == "true" {
		tb.Fatal(msg)
	}
	tb.Skip("SKIPPED, " + msg)
	return ""
}
