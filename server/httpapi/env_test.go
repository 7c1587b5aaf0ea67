package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
	"github.com/tokenlimit/tokenlimit/server/httpapi"
	"github.com/tokenlimit/tokenlimit/service"
)

// base is the fake clocks' start: aligned to days, so fixed windows start
// with it.
var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// clock is a per-test fake clock, safe for the server's goroutines.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// backend makes a store for one test.
type backend struct {
	name  string
	store func(t *testing.T) tokenlimit.Store
}

func memBackend() backend {
	return backend{name: "memstore", store: func(t *testing.T) tokenlimit.Store {
		st, err := memstore.New(memstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}}
}

var prefixes atomic.Int64

// redisBackend opens stores on srv, each with its own key prefix and client,
// in caller-time mode so that the test's fake clock decides.
func redisBackend(srv *redistest.Server) backend {
	return backend{name: "redis", store: func(t *testing.T) tokenlimit.Store {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
		if err != nil {
			t.Fatalf("rueidis: %v", err)
		}
		t.Cleanup(c.Close)
		st, err := redisstore.New(rueidisclient.New(c), redisstore.Options{
			Prefix:     fmt.Sprintf("httpapi%d:", prefixes.Add(1)),
			CallerTime: true, TTLPadding: time.Hour,
		})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}}
}

// env is one test's server: a service on a store with a fake clock, behind
// the API on a real loopback HTTP server.
type env struct {
	t      *testing.T
	clock  *clock
	svc    *service.Service
	url    string
	client *http.Client // the server's own: closing another test's server never breaks it
}

// setup configures an env.
type setup struct {
	config string // YAML; empty for examples/quickstart.yaml
	opts   httpapi.Options
	store  tokenlimit.Store // overrides the backend's
	svc    func(*service.Options)
}

func newEnv(t *testing.T, b backend, s setup) *env {
	t.Helper()
	cfg := quickstart(t)
	if s.config != "" {
		var err error
		if cfg, err = config.Parse([]byte(s.config), t.Name()+".yaml"); err != nil {
			t.Fatal(err)
		}
	}
	c := &clock{t: base}
	store := s.store
	if store == nil {
		store = b.store(t)
	}
	so := service.Options{Store: store, Clock: c.Now, StoreTimeout: 5 * time.Second, Logger: quiet()}
	if s.svc != nil {
		s.svc(&so)
	}
	svc, err := service.New(cfg, so)
	if err != nil {
		t.Fatal(err)
	}
	if s.opts.Logger == nil {
		s.opts.Logger = quiet()
	}
	h, err := httpapi.New(svc, s.opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &env{t: t, clock: c, svc: svc, url: srv.URL, client: srv.Client()}
}

func quickstart(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Load("../../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// response is an answer read in full.
type response struct {
	status int
	header http.Header
	body   string
}

// json decodes the body into a generic value.
func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(r.body), &v); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", r.body, err)
	}
	return v
}

// do sends a request with the given body and headers ("Name: value").
func (e *env) do(method, path, body string, headers ...string) response {
	e.t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ": ")
		req.Header.Add(name, value)
	}
	res, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: string(b)}
}

func (e *env) post(path, body string, headers ...string) response {
	e.t.Helper()
	return e.do(http.MethodPost, path, body, headers...)
}

// wantHeaders fails unless r has exactly these values for the rate-limit
// headers; an empty value means the header must be absent.
func wantHeaders(t *testing.T, r response, want map[string]string) {
	t.Helper()
	for _, name := range []string{"Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit", "RateLimit-Policy"} {
		got, ok := r.header[http.CanonicalHeaderKey(name)]
		w := want[name]
		switch {
		case w == "" && ok:
			t.Errorf("%s: %q, want none", name, got)
		case w != "" && (len(got) != 1 || got[0] != w):
			t.Errorf("%s: %q, want %q", name, got, w)
		}
	}
}

// wantStatus fails the test unless r has the status.
func wantStatus(t *testing.T, r response, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
}

// wantError fails unless r is status with a JSON error naming field and a
// message containing msg.
func wantError(t *testing.T, r response, status int, field, msg string) {
	t.Helper()
	wantStatus(t, r, status)
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var body struct {
		Error struct {
			Field   string `json:"field"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.body), &body); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	if body.Error.Field != field || !strings.Contains(body.Error.Message, msg) {
		t.Errorf("error %+v, want field %q and a message containing %q", body.Error, field, msg)
	}
}

// decision is a decoded check or reserve answer.
type decision struct {
	Allowed       bool      `json:"allowed"`
	Unavailable   bool      `json:"unavailable"`
	KeySpaceFull  bool      `json:"key_space_full"`
	ReservationID string    `json:"reservation_id"`
	Limits        []outcome `json:"limits"`
	Error         *struct {
		Message string `json:"message"`
	} `json:"error"`
}

type outcome struct {
	Name             string `json:"name"`
	Key              string `json:"key"`
	Request          int    `json:"request"`
	Shadow           bool   `json:"shadow"`
	FailOpen         bool   `json:"fail_open"`
	Allowed          bool   `json:"allowed"`
	Limit            int64  `json:"limit"`
	Remaining        int64  `json:"remaining"`
	Cost             int64  `json:"cost"`
	ResetMs          int64  `json:"reset_ms"`
	RetryAfterMs     int64  `json:"retry_after_ms"`
	CostExceedsLimit bool   `json:"cost_exceeds_limit"`
}

func decodeDecision(t *testing.T, r response) decision {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	dec := json.NewDecoder(strings.NewReader(r.body))
	dec.DisallowUnknownFields()
	var d decision
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("decision %q: %v", r.body, err)
	}
	return d
}

// inspect returns the live state of the limits the descriptors select, by
// name, through the admin API.
func (e *env) inspect(token, descriptors string) map[string]outcome {
	e.t.Helper()
	r := e.post("/v1/admin/inspect", `{"descriptors":`+descriptors+`}`, "Authorization: Bearer "+token)
	wantStatus(e.t, r, http.StatusOK)
	var body struct {
		At     string    `json:"at"`
		Limits []outcome `json:"limits"`
	}
	if err := json.Unmarshal([]byte(r.body), &body); err != nil {
		e.t.Fatal(err)
	}
	out := map[string]outcome{}
	for _, o := range body.Limits {
		out[o.Name] = o
	}
	return out
}

// quiet is a logger that drops everything.
func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }
