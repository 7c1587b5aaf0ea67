package proxy_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/plane"
	"github.com/tokenlimit/tokenlimit/proxy"
	"github.com/tokenlimit/tokenlimit/proxy/costexpr"
	"github.com/tokenlimit/tokenlimit/service"
)

// Api keys of examples/proxy.yaml.
const (
	alice = "sk-demo-alice-0001" // plan pro
	bob   = "sk-demo-bob-0002"   // plan free, a bucket of 2,000 tokens
)

// t0 is the fake clocks' start: a Thursday, mid-morning UTC.
var t0 = time.Date(2026, 1, 15, 9, 30, 0, 0, time.UTC)

// env is a proxy under test: its service on a store and a fake clock, the
// fake upstream behind it, and the settlements it reports.
type env struct {
	t       *testing.T
	clock   *testkit.Clock
	svc     *service.Service
	store   tokenlimit.Store
	redis   *redistest.Server
	plane   *plane.Plane // the quota plane, withPlane only
	up      *fakeUpstream
	upSrv   *httptest.Server
	srv     *httptest.Server
	settled chan proxy.Settlement
}

// setup configures an env.
type setup struct {
	yml     string
	proxy   func(*proxy.Options)
	store   func(tokenlimit.Store) tokenlimit.Store
	handler func(http.Handler) http.Handler
	plane   bool
}

// withPlane gives the service a quota plane in memory, on the fake clock.
func withPlane() func(*setup) { return func(s *setup) { s.plane = true } }

// withHandler wraps the proxy's handler, as a middleware in front of it.
func withHandler(wrap func(http.Handler) http.Handler) func(*setup) {
	return func(s *setup) { s.handler = wrap }
}

// withConfig replaces examples/proxy.yaml.
func withConfig(yml string) func(*setup) { return func(s *setup) { s.yml = yml } }

// withOptions edits the proxy's options.
func withOptions(edit func(*proxy.Options)) func(*setup) { return func(s *setup) { s.proxy = edit } }

// withStore wraps the store.
func withStore(wrap func(tokenlimit.Store) tokenlimit.Store) func(*setup) {
	return func(s *setup) { s.store = wrap }
}

var exampleConfig = func() string {
	data, err := os.ReadFile("../examples/proxy.yaml")
	if err != nil {
		panic(err)
	}
	return string(data)
}()

// newEnv starts a proxy on the named store ("memory", or "redis": a
// redis-server of its own deciding at the fake clock's time) enforcing
// examples/proxy.yaml with unknown keys under the default plan, in front of
// a fresh fake upstream.
func newEnv(t *testing.T, store string, edits ...func(*setup)) *env {
	t.Helper()
	s := setup{yml: exampleConfig}
	for _, edit := range edits {
		edit(&s)
	}
	cfg, err := config.ParseWith([]byte(s.yml), t.Name()+".yaml", config.Options{Compile: costexpr.Compile})
	if err != nil {
		t.Fatalf("configuration:\n%v", err)
	}
	e := &env{t: t, up: newFakeUpstream(), settled: make(chan proxy.Settlement, 100)}
	setupService := testkit.Setup{Store: store, Config: cfg, Start: t0, WrapStore: s.store}
	if s.plane {
		pl, err := plane.Open(context.Background(), plane.NewMemoryStore(), plane.Options{
			KnownPlan: func(name string) bool { return e.svc.KnownPlan(name) }, Logger: testkit.Quiet(),
			Clock: func() time.Time { return e.clock.Now() },
		})
		if err != nil {
			t.Fatal(err)
		}
		e.plane = pl
		setupService.Edit = func(o *service.Options) { o.Plane = pl }
	}
	te := testkit.NewService(t, setupService)
	e.clock, e.svc, e.store, e.redis = te.Clock, te.Service, te.Store, te.Redis
	e.upSrv = httptest.NewServer(e.up)
	t.Cleanup(e.upSrv.Close)
	upstream, _ := url.Parse(e.upSrv.URL)
	popts := proxy.Options{
		Upstream: upstream, UnknownKeys: proxy.DefaultPlanForUnknownKeys, Tokenizer: proxy.TestTokenizer, Logger: testkit.Quiet(),
		OnSettle: func(s proxy.Settlement) { e.settled <- s },
	}
	if s.proxy != nil {
		s.proxy(&popts)
	}
	p, err := proxy.New(e.svc, popts)
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = p
	if s.handler != nil {
		h = s.handler(p)
	}
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	return e
}

// post sends body to path with key (none if empty) and returns the
// response, its body read.
func (e *env) post(path, key, body string) (*http.Response, string) {
	e.t.Helper()
	resp := e.send(context.Background(), http.MethodPost, path, key, body)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("POST %s: reading the body: %v", path, err)
	}
	return resp, string(data)
}

// get is post for a GET without a body.
func (e *env) get(path, key string) (*http.Response, string) {
	e.t.Helper()
	resp := e.send(context.Background(), http.MethodGet, path, key, "")
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("GET %s: reading the body: %v", path, err)
	}
	return resp, string(data)
}

// send sends a request and returns the response, its body unread.
func (e *env) send(ctx context.Context, method, path, key, body string) *http.Response {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// waitSettled returns the next settlement the proxy reports.
func (e *env) waitSettled() proxy.Settlement {
	e.t.Helper()
	select {
	case s := <-e.settled:
		return s
	case <-time.After(10 * time.Second):
		e.t.Fatal("no settlement within 10s")
		return proxy.Settlement{}
	}
}

// noMoreSettlements fails if a settlement is waiting.
func (e *env) noMoreSettlements() {
	e.t.Helper()
	select {
	case s := <-e.settled:
		e.t.Errorf("unexpected settlement %+v", s)
	default:
	}
}

// used returns what each limit selected by (key, model) holds, read back
// from the store: capacity minus remaining, at the fake clock's time (which
// tests do not move, so nothing refills), by limit name. For the
// concurrency limit it is the number of requests in flight.
func (e *env) used(key, model string) map[string]int64 {
	e.t.Helper()
	desc := map[string]string{"api_key": key, "ip": "127.0.0.1", "route": "/v1/chat/completions"}
	if model != "" {
		desc["model"] = model
	}
	d, err := e.svc.Inspect(context.Background(), service.Request{Descriptors: desc})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]int64{}
	for _, o := range d.Limits {
		out[o.Name] = o.Limit - o.Remaining
	}
	return out
}

// sseEvents reads server-sent events from r until it ends, returning each
// event's data.
func sseEvents(r io.Reader) ([]string, error) {
	var events []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, data)
		}
	}
	return events, sc.Err()
}
