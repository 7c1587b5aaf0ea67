package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/server/httpapi"
	"github.com/tokenlimit/tokenlimit/service"
)

// base is the fake clocks' start: aligned to days, so fixed windows start
// with it.
var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// backend is the store a test runs on: testkit.Memory, or testkit.Redis on
// a redis-server the tests of one run share (each store with its own keys).
type backend struct {
	name  string
	redis *redistest.Server
}

func memBackend() backend { return backend{name: testkit.Memory} }

func redisBackend(srv *redistest.Server) backend { return backend{name: testkit.Redis, redis: srv} }

// env is one test's server: a service on a store with a fake clock, behind
// the API on a real loopback HTTP server.
type env struct {
	t      *testing.T
	clock  *testkit.Clock
	svc    *service.Service
	url    string
	client *http.Client // the server's own: closing another test's server never breaks it
}

// setup configures an env.
type setup struct {
	config string // YAML; empty for examples/quickstart.yaml
	opts   httpapi.Options
	store  tokenlimit.Store // replaces the backend's
	svc    func(*service.Options)
}

func newEnv(t *testing.T, b backend, s setup) *env {
	t.Helper()
	cfg := quickstart(t)
	if s.config != "" {
		cfg = testkit.ParseConfig(t, s.config)
	}
	ts := testkit.Setup{Store: b.name, Config: cfg, Start: base, Redis: b.redis, Client: testkit.Rueidis, Edit: s.svc}
	if s.store != nil {
		ts.WrapStore = func(tokenlimit.Store) tokenlimit.Store { return s.store }
	}
	te := testkit.NewService(t, ts)
	if s.opts.Logger == nil {
		s.opts.Logger = testkit.Quiet()
	}
	h, err := httpapi.New(te.Service, s.opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &env{t: t, clock: te.Clock, svc: te.Service, url: srv.URL, client: srv.Client()}
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
	Level            string `json:"level"`
	LevelName        string `json:"level_name"`
	Unit             string `json:"unit"`
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
