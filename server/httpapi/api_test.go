package httpapi_test

import (
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/server/httpapi"
	"github.com/tokenlimit/tokenlimit/service"
)

func TestNewRejectsBadArguments(t *testing.T) {
	t.Parallel()
	if _, err := httpapi.New(nil, httpapi.Options{}); err == nil {
		t.Error("New(nil service) succeeded")
	}
	e := newEnv(t, memBackend(), setup{})
	if _, err := httpapi.New(e.svc, httpapi.Options{MaxBodyBytes: -1}); err == nil {
		t.Error("New with a negative MaxBodyBytes succeeded")
	}
	if _, err := httpapi.New(e.svc, httpapi.Options{TrustedProxies: []netip.Prefix{{}}}); err == nil {
		t.Error("New with an invalid trusted prefix succeeded")
	}
}

// Every bad body is a 400 naming the field.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 257)
	cases := []struct {
		name, path, body string
		field, message   string
	}{
		{"empty body", "/v1/check", "", "body", "empty body"},
		{"malformed", "/v1/check", `{"descriptors": {"user": "a"`, "body", "truncated JSON"},
		{"syntax", "/v1/check", `{"descriptors": {"user": "a"}}}`, "body", "unexpected data after the JSON object"},
		{"bad token", "/v1/check", `{"cost": 1,}`, "body", "malformed JSON at byte"},
		{"unknown field", "/v1/check", `{"descriptors": {}, "costs": 3}`, "costs", "unknown field"},
		{"unknown nested field", "/v1/check", `{"requests": [{"descriptor": {}}]}`, "descriptor", "unknown field"},
		{"cost is a string", "/v1/check", `{"cost": "3"}`, "cost", "want an integer, got string"},
		{"cost is a fraction", "/v1/check", `{"cost": 1.5}`, "cost", "want an integer, got number 1.5"},
		{"descriptor not a string", "/v1/check", `{"descriptors": {"user": 7}}`, "descriptors", "want a string, got number"},
		{"body is an array", "/v1/check", `[1]`, "body", "want an object, got array"},
		{"negative cost", "/v1/check", `{"descriptors": {"user": "a"}, "cost": -1}`, "cost", "must be between 0 and"},
		{"negative cost in requests", "/v1/check", `{"requests": [{"cost": 1}, {"cost": -1}]}`, "requests[1].cost", "must be between 0 and"},
		{"descriptor too long", "/v1/check", `{"descriptors": {"user": "` + long + `"}}`, "descriptors.user", "at most 256 bytes, got 257"},
		{"descriptor too long in requests", "/v1/check", `{"requests": [{"descriptors": {"user": "` + long + `"}}]}`, "requests[0].descriptors.user", "at most 256 bytes"},
		{"both forms", "/v1/check", `{"descriptors": {}, "requests": [{}]}`, "requests", "not both"},
		{"no requests", "/v1/check", `{"requests": []}`, "requests", "at least one"},
		{"same budget twice", "/v1/check", `{"requests": [{"descriptors": {"user": "a"}}, {"descriptors": {"user": "a"}}]}`, "requests", "repeats"},
		{"reserve id too long", "/v1/reserve", `{"id": "` + long + `", "descriptors": {}}`, "id", "at most 128 bytes"},
		{"reserve negative cost", "/v1/reserve", `{"id": "r", "descriptors": {"user": "a"}, "cost": -5}`, "cost", "must be between"},
		{"settle without id", "/v1/settle", `{"actual": 3}`, "id", "required"},
		{"settle without actual", "/v1/settle", `{"id": "r"}`, "actual", "required"},
		{"settle negative", "/v1/settle", `{"id": "r", "actual": -3}`, "actual", "must be between"},
		{"settle id type", "/v1/settle", `{"id": 3, "actual": 3}`, "id", "want a string, got number"},
		{"duplicate descriptor", "/v1/check", `{"descriptors": {"user": "a", "user": "b"}}`, "descriptors.user", "appears twice"},
		{"duplicate cost", "/v1/check", `{"descriptors": {"user": "a"}, "cost": 1, "cost": 900}`, "cost", "appears twice"},
		{"duplicate in requests", "/v1/check", `{"requests": [{"descriptors": {"user": "a"}, "descriptors": {"user": "b"}}]}`, "requests[0].descriptors", "appears twice"},
		{"duplicate reserve id", "/v1/reserve", `{"id": "r1", "id": "r2", "descriptors": {}}`, "id", "appears twice"},
		{"duplicate settle actual", "/v1/settle", `{"id": "r", "actual": 1, "actual": 2}`, "actual", "appears twice"},
		{"descriptor 0xff", "/v1/check", "{\"descriptors\": {\"user\": \"\xff\"}}", "descriptors.user", "not valid UTF-8"},
		{"descriptor lone surrogate", "/v1/check", `{"descriptors": {"user": "\udcff"}}`, "descriptors.user", "not valid UTF-8"},
		{"descriptor name 0xfe", "/v1/check", "{\"descriptors\": {\"\xfe\": \"a\"}}", "descriptors", "member name is not valid UTF-8"},
	}
	e := newEnv(t, memBackend(), setup{})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wantError(t, e.post(c.path, c.body), http.StatusBadRequest, c.field, c.message)
		})
	}
}

func TestAdminBadRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t, memBackend(), setup{opts: httpapi.Options{AdminToken: "tok"}})
	auth := "Authorization: Bearer tok"
	wantError(t, e.post("/v1/admin/inspect", `{"descriptors": {"user": 1}}`, auth), http.StatusBadRequest, "descriptors", "want a string")
	wantError(t, e.post("/v1/admin/inspect", `{"limit": "x"}`, auth), http.StatusBadRequest, "limit", "unknown field")
	wantError(t, e.post("/v1/admin/reset", `{"descriptors": {"user": "`+strings.Repeat("x", 300)+`"}}`, auth), http.StatusBadRequest, "descriptors.user", "at most 256 bytes")
	wantError(t, e.post("/v1/admin/reset", `{"descriptors": {"user": "a"}, "descriptors": {"user": "b"}}`, auth), http.StatusBadRequest, "descriptors", "appears twice")
	wantError(t, e.post("/v1/admin/inspect", "{\"descriptors\": {\"user\": \"\xfe\"}}", auth), http.StatusBadRequest, "descriptors.user", "not valid UTF-8")
}

func TestBodyTooLarge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, memBackend(), setup{opts: httpapi.Options{MaxBodyBytes: 100, AdminToken: "tok"}})
	big := `{"descriptors": {"user": "` + strings.Repeat("x", 200) + `"}}`
	for _, path := range []string{"/v1/check", "/v1/reserve", "/v1/settle", "/v1/admin/inspect", "/v1/admin/reset"} {
		wantError(t, e.post(path, big, "Authorization: Bearer tok"), http.StatusRequestEntityTooLarge, "body", "larger than 100 bytes")
	}
	// Trailing data past the limit is too large, not malformed.
	wantError(t, e.post("/v1/check", `{}`+strings.Repeat(" ", 200)+`x`), http.StatusRequestEntityTooLarge, "body", "larger than 100 bytes")
	// The default is 64 KiB.
	d := newEnv(t, memBackend(), setup{})
	wantError(t, d.post("/v1/check", `{"descriptors": {"user": "`+strings.Repeat("x", 64<<10)+`"}}`), http.StatusRequestEntityTooLarge, "body", "larger than 65536 bytes")
	wantStatus(t, d.post("/v1/check", `{"descriptors": {"user": "a"}}`+strings.Repeat(" ", 60<<10)), http.StatusOK)
}

func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, memBackend(), setup{opts: httpapi.Options{AdminToken: "tok"}})
	cases := []struct{ method, path, allow string }{
		{http.MethodGet, "/v1/check", "POST"},
		{http.MethodPut, "/v1/reserve", "POST"},
		{http.MethodGet, "/v1/settle", "POST"},
		{http.MethodPost, "/v1/limits", "GET, HEAD"},
		{http.MethodGet, "/v1/admin/inspect", "POST"},
		{http.MethodDelete, "/v1/admin/reset", "POST"},
		{http.MethodPost, "/healthz", "GET, HEAD"},
		{http.MethodPost, "/readyz", "GET, HEAD"},
	}
	for _, c := range cases {
		r := e.do(c.method, c.path, "")
		wantError(t, r, http.StatusMethodNotAllowed, "method", c.method+" is not allowed on "+c.path)
		if got := r.header.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
	}
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, memBackend(), setup{})
	for _, path := range []string{"/v1/nope", "/v1/admin/nope", "/nope", "/metrics", "/v2/check"} {
		wantError(t, e.do(http.MethodGet, path, ""), http.StatusNotFound, "path", "no endpoint "+path)
	}
}

func TestRootPageAndMounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, memBackend(), setup{})
	r := e.do(http.MethodGet, "/", "")
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(r.body, "runs without its dashboard") || !strings.Contains(r.body, `href="/v1/limits"`) ||
		r.header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("root page %q (%s)", r.body, r.header.Get("Content-Type"))
	}

	text := func(s string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(s)) })
	}
	m := newEnv(t, memBackend(), setup{opts: httpapi.Options{Metrics: text("metrics"), Dashboard: text("dashboard")}})
	for path, want := range map[string]string{"/metrics": "metrics", "/": "dashboard", "/app/x.js": "dashboard"} {
		if r := m.do(http.MethodGet, path, ""); r.status != http.StatusOK || r.body != want {
			t.Errorf("GET %s: %d %q, want %q", path, r.status, r.body, want)
		}
	}
	// The API's own paths stay JSON.
	wantError(t, m.do(http.MethodGet, "/v1/nope", ""), http.StatusNotFound, "path", "no endpoint")
	wantStatus(t, m.do(http.MethodGet, "/healthz", ""), http.StatusOK)
}

func TestAdminAuth(t *testing.T) {
	t.Parallel()
	off := newEnv(t, memBackend(), setup{})
	for _, path := range []string{"/v1/admin/inspect", "/v1/admin/reset"} {
		wantError(t, off.post(path, `{}`, "Authorization: Bearer anything"), http.StatusForbidden, "Authorization", "admin endpoints are disabled")
	}
	on := newEnv(t, memBackend(), setup{opts: httpapi.Options{AdminToken: "s3cret"}})
	for _, h := range [][]string{nil, {"Authorization: Bearer wrong"}, {"Authorization: Basic czNjcmV0"},
		{"Authorization: Bearer s3cret2"}, {"Authorization: Bearer"}, {"X-Api-Key: s3cret"}} {
		for _, path := range []string{"/v1/admin/inspect", "/v1/admin/reset"} {
			r := on.post(path, `{}`, h...)
			wantError(t, r, http.StatusUnauthorized, "Authorization", "want Authorization: Bearer")
			if r.header.Get("WWW-Authenticate") != `Bearer realm="tokenlimit admin"` {
				t.Errorf("%v: WWW-Authenticate %q", h, r.header.Get("WWW-Authenticate"))
			}
		}
	}
	for _, h := range []string{"Authorization: Bearer s3cret", "Authorization: bearer  s3cret "} {
		wantStatus(t, on.post("/v1/admin/inspect", `{"descriptors": {"user": "a"}}`, h), http.StatusOK)
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, memBackend(), setup{})
	r := e.do(http.MethodGet, "/v1/limits", "")
	wantStatus(t, r, http.StatusOK)
	want := `{"config_version":1,"limits":[` +
		`{"name":"hard-cap","match":{"route":"/v1/sensitive"},"key":["user"],"algorithm":"sliding_log","quota":5,"period_ms":5000,"cost":"request","fail_open":true},` +
		`{"name":"llm-budget","key":["user"],"algorithm":"token_bucket","quota":2,"period_ms":1000,"burst":10,"cost":"by route map[/v1/chat:1 /v1/embed:3] default 1","fail_open":true}]}` + "\n"
	if r.body != want {
		t.Fatalf("limits:\n%s\nwant\n%s", r.body, want)
	}
	e.svc.Reload(quickstart(t))
	if v := e.do(http.MethodGet, "/v1/limits", "").json(t)["config_version"]; v != 2.0 {
		t.Fatalf("config_version after a reload: %v, want 2", v)
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, memBackend(), setup{})
	r := e.do(http.MethodGet, "/healthz", "")
	if r.status != http.StatusOK || r.body != `{"status":"ok"}`+"\n" {
		t.Errorf("healthz: %d %s", r.status, r.body)
	}
	r = e.do(http.MethodGet, "/readyz", "")
	if r.status != http.StatusOK || r.body != `{"status":"ok","store":"memory","breaker":"closed","degraded":false,"keys":0,"max_keys":1000000,"local_keys":0,"local_max_keys":100000,"key_space_full":false}`+"\n" {
		t.Errorf("readyz: %d %s", r.status, r.body)
	}
	if r := e.do(http.MethodHead, "/healthz", ""); r.status != http.StatusOK {
		t.Errorf("HEAD /healthz: %d", r.status)
	}
}

const failureModesConfig = `
limits:
  - name: closed-cap
    match: {route: /v1/pay}
    key: [user]
    algorithm: sliding_log
    limit: 5/10s
    failure_mode: closed
  - name: open-budget
    key: [user]
    algorithm: token_bucket
    capacity: 10
    refill: 1/s
`

// While the store fails: fail-closed limits answer 503, fail-open ones are
// decided locally, /readyz is degraded; all recover with the store.
func TestStoreFailing(t *testing.T) {
	t.Parallel()
	store := &testkit.FaultStore{Store: testkit.MemStore(t), Info: testkit.Remote}
	b := memBackend()
	e := newEnv(t, b, setup{config: failureModesConfig, store: store, opts: httpapi.Options{AdminToken: "tok"},
		svc: func(o *service.Options) {
			o.BreakerThreshold = 1
			o.BreakerCooldown = time.Second
		}})
	wantStatus(t, e.post("/v1/check", `{"descriptors": {"user": "a", "route": "/v1/pay"}}`), http.StatusOK)
	store.Set(testkit.Down)

	r := e.post("/v1/check", `{"descriptors": {"user": "a", "route": "/v1/pay"}}`)
	wantStatus(t, r, http.StatusServiceUnavailable)
	wantHeaders(t, r, nil)
	d := decodeDecision(t, r)
	if d.Allowed || !d.Unavailable || d.Error == nil || !strings.Contains(d.Error.Message, "fail-closed") ||
		len(d.Limits) != 1 || d.Limits[0].Name != "closed-cap" {
		t.Fatalf("fail-closed: %s", r.body)
	}
	r = e.do(http.MethodGet, "/readyz", "")
	if r.status != http.StatusServiceUnavailable || r.body != `{"status":"degraded","store":"redis","breaker":"open","degraded":true,"keys":0,"max_keys":0,"local_keys":0,"local_max_keys":100000,"key_space_full":false,"error":"tokenlimit: check: connection refused"}`+"\n" {
		t.Errorf("readyz while failing: %d %s", r.status, r.body)
	}
	wantStatus(t, e.do(http.MethodGet, "/healthz", ""), http.StatusOK)
	// Forward-auth says so in its JSON body.
	r = e.do(http.MethodGet, "/v1/forward-auth", "", "X-User: a", "X-Forwarded-Uri: /v1/pay")
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, `"unavailable":true`) {
		t.Errorf("forward-auth while failing: %d %q", r.status, r.body)
	}

	// The fail-open limit is decided on the local budget, started where the
	// store left it: 9 of 10 after the first check.
	r = e.post("/v1/check", `{"descriptors": {"user": "a"}}`)
	wantStatus(t, r, http.StatusOK)
	wantHeaders(t, r, map[string]string{
		"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "8", "X-RateLimit-Reset": "2",
		"RateLimit": `"open-budget";r=8;t=2`, "RateLimit-Policy": `"open-budget";q=10;w=10`,
	})
	if d := decodeDecision(t, r); len(d.Limits) != 1 || !d.Limits[0].FailOpen {
		t.Fatalf("fail-open: %s", r.body)
	}
	// Admin calls that need the store answer 503.
	wantError(t, e.post("/v1/admin/reset", `{"descriptors": {"user": "a"}}`, "Authorization: Bearer tok"), http.StatusServiceUnavailable, "", "store failed")
	wantError(t, e.post("/v1/admin/inspect", `{"descriptors": {"user": "a"}}`, "Authorization: Bearer tok"), http.StatusServiceUnavailable, "", "store failed")

	store.Set(testkit.Healthy)
	e.clock.Advance(time.Second)
	wantStatus(t, e.post("/v1/check", `{"descriptors": {"user": "a", "route": "/v1/pay"}}`), http.StatusOK)
	if r := e.do(http.MethodGet, "/readyz", ""); r.status != http.StatusOK {
		t.Errorf("readyz after recovery: %d %s", r.status, r.body)
	}
}

// Logs never hold an api key in full.
func TestLogsRedactAPIKeys(t *testing.T) {
	t.Parallel()
	var buf testkit.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEnv(t, memBackend(), setup{config: allDescriptorsConfig, opts: httpapi.Options{Logger: log, AdminToken: "tok"}})
	const key = "sk-live-0123456789abcdef"
	e.do(http.MethodGet, "/v1/forward-auth", "", "Authorization: Bearer "+key, "X-Cost: 200")
	e.post("/v1/check", `{"descriptors": {"api_key": "`+key+`"}, "cost": 200}`)
	e.post("/v1/admin/reset", `{"descriptors": {"api_key": "`+key+`"}}`, "Authorization: Bearer tok")
	out := buf.String()
	if strings.Count(out, "sk-l…(24 bytes)") != 3 {
		t.Errorf("want 3 log lines naming the key as sk-l…(24 bytes):\n%s", out)
	}
	if strings.Contains(out, key) || strings.Contains(out, "tok\"") {
		t.Errorf("a secret is in the logs:\n%s", out)
	}

	// A store failure quoting the budget's key is logged without the api key:
	// budget keys hold only its digest.
	var failLog testkit.Buffer
	store := &testkit.FaultStore{Store: testkit.MemStore(t), Info: testkit.Remote}
	f := newEnv(t, memBackend(), setup{config: allDescriptorsConfig, store: store,
		opts: httpapi.Options{Logger: slog.New(slog.NewJSONHandler(&failLog, nil)), AdminToken: "tok"}})
	store.Set(testkit.Down)
	desc := `{"descriptors": {"api_key": "` + key + `", "user": "u", "model": "m", "tenant": "t", "route": "/r", "ip": "192.0.2.1"}}`
	wantStatus(t, f.post("/v1/admin/reset", desc, "Authorization: Bearer tok"), http.StatusServiceUnavailable)
	out = failLog.String()
	if !strings.Contains(out, "|user=u") || strings.Contains(out, key) || strings.Contains(out, key[:8]) {
		t.Errorf("store failure log should name the budget without the api key:\n%s", out)
	}
}

// TestKeySpaceFull: with the embedded store full, a request that needs a
// new key is a 429 whose body says the key space is full (never admitted,
// whatever the failure mode), one already stored is still decided, and
// /readyz stays ready but says so.
func TestKeySpaceFull(t *testing.T) {
	t.Parallel()
	st, err := memstore.New(memstore.Options{MaxKeys: 1})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, memBackend(), setup{config: failureModesConfig, store: st})
	wantStatus(t, e.post("/v1/check", `{"descriptors": {"user": "a"}}`), http.StatusOK)
	r := e.post("/v1/check", `{"descriptors": {"user": "b"}}`)
	wantStatus(t, r, http.StatusTooManyRequests)
	d := decodeDecision(t, r)
	if d.Allowed || !d.KeySpaceFull || d.Error == nil || !strings.Contains(d.Error.Message, "key space is full") {
		t.Errorf("a new user in a full store: %s, want 429 saying the key space is full", r.body)
	}
	if got := r.header.Get("Retry-After"); got != "" {
		t.Errorf("Retry-After %q on a key-space-full answer, want none (no budget was consulted)", got)
	}
	wantStatus(t, e.post("/v1/check", `{"descriptors": {"user": "a"}}`), http.StatusOK)
	r = e.do(http.MethodGet, "/readyz", "")
	if r.status != http.StatusOK || !strings.Contains(r.body, `"status":"key_space_full"`) || !strings.Contains(r.body, `"keys":1,"max_keys":1`) {
		t.Errorf("readyz with the store full: %d %s, want 200 saying key_space_full", r.status, r.body)
	}
}
