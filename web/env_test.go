package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/service"
	"github.com/tokenlimit/tokenlimit/service/stats"
	"github.com/tokenlimit/tokenlimit/web"
)

// testConfig is the quickstart's two simulators as limits, plus a shadow
// limit and a concurrency limit, so that every kind of outcome shows.
const testConfig = `
limits:
  - name: hard-cap
    match: {route: /v1/sensitive}
    key: [user]
    algorithm: sliding_log
    limit: 5/5s
  - name: llm-budget
    key: [user]
    algorithm: token_bucket
    capacity: 10
    refill: 2/s
    cost:
      by: route
      weights: {/v1/chat: 1, /v1/embed: 3}
      default: 1
  - name: watch
    key: [user]
    algorithm: fixed_window
    limit: 2/min
    shadow: true
`

// env is a service with the dashboard over it.
type env struct {
	t     testing.TB
	svc   *service.Service
	stats *stats.Stats
	h     http.Handler
	now   func() time.Time
}

// newEnv builds a service on a memstore and the dashboard over it. A nil
// now means real time. opts.Stats is filled in unless noStats.
func newEnv(t testing.TB, now func() time.Time, opts web.Options, noStats bool) *env {
	t.Helper()
	if now == nil {
		now = time.Now
	}
	svc := testkit.NewService(t, testkit.Setup{Store: testkit.Memory, Config: testkit.ParseConfig(t, testConfig), Clock: now}).Service
	e := &env{t: t, svc: svc, now: now}
	var err error
	if !noStats {
		e.stats = svc.Stats()
		opts.Stats = e.stats
	}
	if opts.Clock == nil {
		opts.Clock = now
	}
	if e.h, err = web.New(svc, opts); err != nil {
		t.Fatal(err)
	}
	return e
}

// check sends a request through the service, whose decision path counts
// it in e.stats.
func (e *env) check(desc map[string]string) service.Decision {
	e.t.Helper()
	d, err := e.svc.Check(context.Background(), service.Request{Descriptors: desc})
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

type answer struct {
	status int
	header http.Header
	body   string
}

// do sends a request to the dashboard; headers are "Name: value".
func (e *env) do(method, path, body string, headers ...string) answer {
	e.t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.RemoteAddr = "127.0.0.1:40000" // the dashboard's admin parts answer loopback only
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		r.Header.Set(k, strings.TrimSpace(v))
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	res := w.Result()
	b, _ := io.ReadAll(res.Body)
	return answer{res.StatusCode, res.Header, string(b)}
}

func (e *env) post(path, body string, headers ...string) answer {
	return e.do(http.MethodPost, path, body, headers...)
}

// json decodes a's body into v, failing the test unless the status is
// want.
func (a answer) json(t testing.TB, want int, v any) {
	t.Helper()
	if a.status != want {
		t.Fatalf("status %d, want %d: %s", a.status, want, a.body)
	}
	if a.header.Get("Content-Type") != "application/json" {
		t.Errorf("Content-Type %q", a.header.Get("Content-Type"))
	}
	if err := json.Unmarshal([]byte(a.body), v); err != nil {
		t.Fatalf("%v: %s", err, a.body)
	}
}

// wantError checks an error answer's status, field and message.
func (a answer) wantError(t testing.TB, status int, field, message string) {
	t.Helper()
	var b struct {
		Error struct{ Field, Message string }
	}
	a.json(t, status, &b)
	if b.Error.Field != field || !strings.Contains(b.Error.Message, message) {
		t.Errorf("error %+v, want field %q and a message containing %q", b.Error, field, message)
	}
}
