package web_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/service/stats"
	"github.com/tokenlimit/tokenlimit/web"
)

var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestNewRejectsBadArguments(t *testing.T) {
	t.Parallel()
	if _, err := web.New(nil, web.Options{}); err == nil {
		t.Error("New(nil service) succeeded")
	}
	e := newEnv(t, nil, web.Options{}, false)
	for _, o := range []web.Options{{StreamInterval: -1}, {MaxSessions: -1}, {SessionIdle: -time.Second}} {
		if _, err := web.New(e.svc, o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
}

func TestPageAndAssets(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, web.Options{}, false)
	page := e.do(http.MethodGet, "/", "")
	if page.status != http.StatusOK || !strings.HasPrefix(page.header.Get("Content-Type"), "text/html") ||
		!strings.Contains(page.body, `<script src="/ui/app.js" defer>`) {
		t.Fatalf("GET /: %d %s", page.status, page.header.Get("Content-Type"))
	}
	if csp := page.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP %q", csp)
	}
	for file, ctype := range map[string]string{"app.js": "text/javascript", "app.css": "text/css", "icon.svg": "image/svg+xml"} {
		a := e.do(http.MethodGet, "/ui/"+file, "")
		etag := a.header.Get("ETag")
		if a.status != http.StatusOK || !strings.HasPrefix(a.header.Get("Content-Type"), ctype) || etag == "" ||
			a.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET /ui/%s: %d %q etag %q", file, a.status, a.header.Get("Content-Type"), etag)
		}
		if again := e.do(http.MethodGet, "/ui/"+file, "", "If-None-Match: "+etag); again.status != http.StatusNotModified {
			t.Errorf("GET /ui/%s with its ETag: %d, want 304", file, again.status)
		}
	}
	for _, path := range []string{"/ui/index.html", "/ui/nope.js", "/nope", "/index.html"} {
		if a := e.do(http.MethodGet, path, ""); a.status != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, a.status)
		}
	}
	e.do(http.MethodGet, "/ui/api/nope", "").wantError(t, http.StatusNotFound, "path", "no dashboard endpoint /ui/api/nope")
	for _, c := range []struct{ method, path, allow string }{
		{http.MethodGet, "/ui/api/sim/race", "POST"},
		{http.MethodPut, "/ui/api/inspect", "POST"},
		{http.MethodPost, "/ui/api/overview", "GET, HEAD"},
	} {
		a := e.do(c.method, c.path, "")
		a.wantError(t, http.StatusMethodNotAllowed, "method", c.method+" is not allowed")
		if a.header.Get("Allow") != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, a.header.Get("Allow"), c.allow)
		}
	}
}

// overviewAnswer is the part of /ui/api/overview the tests read.
type overviewAnswer struct {
	NowMs  int64 `json:"now_ms"`
	Health httpx.Health
	Config struct {
		Version       int64
		ReloadsOK     int64 `json:"reloads_ok"`
		ReloadsFailed int64 `json:"reloads_failed"`
		LastReload    *struct {
			Version int64
			OK      bool
			Error   string
		} `json:"last_reload"`
	}
	Live    bool
	From    int64
	Seconds int
	Limits  []struct {
		Name   string
		Counts map[string][]int64
	}
	Checks    []int64
	LatencyUs []int64 `json:"latency_us"`
}

func (o overviewAnswer) total(limit, result string) int64 {
	var n int64
	for _, l := range o.Limits {
		if l.Name == limit {
			for _, v := range l.Counts[result] {
				n += v
			}
		}
	}
	return n
}

func TestOverview(t *testing.T) {
	t.Parallel()
	c := testkit.NewClock(base)
	e := newEnv(t, c.Now, web.Options{}, false)
	// Second 0: 6 requests on the sensitive route: 5 allowed, then the
	// hard cap denies; the shadow limit would deny from the third.
	for range 6 {
		e.check(map[string]string{"user": "alice", "route": "/v1/sensitive"})
	}
	c.Advance(2 * time.Second)
	e.check(map[string]string{"user": "bob", "route": "/v1/embed"})

	var o overviewAnswer
	e.do(http.MethodGet, "/ui/api/overview?seconds=10", "").json(t, http.StatusOK, &o)
	if !o.Live || o.Seconds != 10 || o.From != base.Unix()-7 || o.NowMs != base.Add(2*time.Second).UnixMilli() {
		t.Errorf("live %v seconds %d from %d now %d", o.Live, o.Seconds, o.From, o.NowMs)
	}
	if o.Health.Store != "memory" || o.Health.Breaker != "closed" || o.Config.Version != 1 || o.Config.LastReload != nil {
		t.Errorf("health %+v config %+v", o.Health, o.Config)
	}
	var names []string
	for _, l := range o.Limits {
		names = append(names, l.Name)
		if len(l.Counts["allowed"]) != 10 || len(l.Counts) != len(stats.Results) {
			t.Errorf("%s: %d results of %d seconds", l.Name, len(l.Counts), len(l.Counts["allowed"]))
		}
	}
	if strings.Join(names, ",") != "hard-cap,llm-budget,watch" {
		t.Errorf("limits %v, want the configured ones in order", names)
	}
	for _, c := range []struct {
		limit, result string
		want          int64
	}{
		{"hard-cap", "allowed", 5}, {"hard-cap", "denied", 1},
		// A limit's own verdict: llm-budget admitted the request that
		// hard-cap denied (and so charged nothing).
		{"llm-budget", "allowed", 7}, {"llm-budget", "denied", 0},
		// The shadow limit is checked only when the enforced ones admit.
		{"watch", "shadow_allowed", 3}, {"watch", "shadow_denied", 3},
	} {
		if got := o.total(c.limit, c.result); got != c.want {
			t.Errorf("%s %s: %d, want %d", c.limit, c.result, got, c.want)
		}
	}
	if got := o.Limits[0].Counts["allowed"][7]; got != 5 {
		t.Errorf("hard-cap allowed in second 0 (index 7): %d", got)
	}
	if o.Checks[7] != 6 || o.Checks[9] != 1 || o.LatencyUs[7] < 0 {
		t.Errorf("checks %v", o.Checks)
	}

	e.stats.RecordReload(c.Now(), 1, errors.New("test.yaml:3: bad"))
	e.do(http.MethodGet, "/ui/api/overview?seconds=1", "").json(t, http.StatusOK, &o)
	if r := o.Config.LastReload; r == nil || r.OK || r.Error != "test.yaml:3: bad" || o.Config.ReloadsFailed != 1 || len(o.Checks) != 1 {
		t.Errorf("after a failed reload: %+v", o.Config)
	}

	for _, bad := range []string{"0", "301", "x", "-1"} {
		e.do(http.MethodGet, "/ui/api/overview?seconds="+bad, "").wantError(t, http.StatusBadRequest, "seconds", "want 1 to 300")
	}
}

func TestOverviewWithoutStats(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, web.Options{}, true)
	var o overviewAnswer
	e.do(http.MethodGet, "/ui/api/overview", "").json(t, http.StatusOK, &o)
	if o.Live || len(o.Limits) != 0 || o.Config.Version != 1 || o.Health.Store != "memory" {
		t.Errorf("%+v", o)
	}
}

// readEvent reads one server-sent event's data.
func readEvent(t *testing.T, r *bufio.Reader) overviewAnswer {
	t.Helper()
	var o overviewAnswer
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			if err := json.Unmarshal([]byte(data), &o); err != nil {
				t.Fatal(err)
			}
			return o
		}
	}
}

func TestOverviewStream(t *testing.T) {
	t.Parallel()
	done := make(chan struct{})
	e := newEnv(t, nil, web.Options{StreamInterval: 20 * time.Millisecond, Done: done}, false)
	srv := httptest.NewServer(e.h)
	defer srv.Close()
	res, err := http.Get(srv.URL + "/ui/api/overview/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	r := bufio.NewReader(res.Body)
	if first := readEvent(t, r); first.Seconds != stats.Seconds || !first.Live {
		t.Errorf("first event: %d seconds, live %v", first.Seconds, first.Live)
	}
	e.check(map[string]string{"user": "carol", "route": "/v1/chat"})
	deadline := time.Now().Add(5 * time.Second)
	for {
		o := readEvent(t, r)
		if o.Seconds != 3 {
			t.Fatalf("an update holds %d seconds, want 3", o.Seconds)
		}
		if o.total("llm-budget", "allowed") == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stream never showed the check")
		}
	}
	close(done) // the server shuts down: the stream ends
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, r)
		ended <- err
	}()
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("the stream ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end when Done was closed")
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, web.Options{}, false)
	var b struct {
		ConfigVersion int64 `json:"config_version"`
		Limits        []httpx.Limit
	}
	e.do(http.MethodGet, "/ui/api/limits", "").json(t, http.StatusOK, &b)
	if b.ConfigVersion != 1 || len(b.Limits) != 3 || b.Limits[0].Name != "hard-cap" || b.Limits[1].Burst != 10 ||
		b.Limits[0].Match["route"] != "/v1/sensitive" || !b.Limits[2].Shadow {
		t.Errorf("%+v", b)
	}
}

type stateAnswer struct {
	AtMs   int64 `json:"at_ms"`
	Limits []struct {
		Name, Key, Algorithm, Policy string
		Shadow                       bool
		Limit, Remaining, Used       int64
		Level                        *float64
		ResetAfterMs                 int64 `json:"reset_after_ms"`
		Entries                      []struct {
			AgoMs int64 `json:"ago_ms"`
			Cost  int64
		}
	}
}

func TestInspectAndReset(t *testing.T) {
	t.Parallel()
	c := testkit.NewClock(base)
	off := newEnv(t, c.Now, web.Options{}, false)
	off.post("/ui/api/inspect", `{}`, "Authorization: Bearer x").wantError(t, http.StatusForbidden, "Authorization", "endpoints are disabled")
	off.post("/ui/api/reset", `{}`).wantError(t, http.StatusForbidden, "Authorization", "endpoints are disabled")

	e := newEnv(t, c.Now, web.Options{AdminToken: "s3cret"}, false)
	for _, h := range []string{"", "Authorization: Bearer wrong", "Authorization: Basic s3cret", "Authorization: s3cret"} {
		e.post("/ui/api/inspect", `{}`, h).wantError(t, http.StatusUnauthorized, "Authorization", "Bearer <admin token>")
	}
	auth := "Authorization: Bearer s3cret"
	remote := httptest.NewRequest(http.MethodPost, "/ui/api/inspect", strings.NewReader(`{}`))
	remote.Header.Set("Authorization", "Bearer s3cret")
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, remote)
	if w.Code != http.StatusForbidden {
		t.Errorf("inspect from a non-loopback client with the token: %d, want 403", w.Code)
	}
	e.check(map[string]string{"user": "alice", "route": "/v1/embed"}) // 3 tokens
	e.check(map[string]string{"user": "alice", "route": "/v1/sensitive"})
	c.Advance(250 * time.Millisecond) // half a token back

	var s stateAnswer
	e.post("/ui/api/inspect", `{"descriptors": {"user": "alice", "route": "/v1/sensitive"}}`, auth).json(t, http.StatusOK, &s)
	if len(s.Limits) != 3 || s.AtMs != c.Now().UnixMilli() {
		t.Fatalf("%+v", s)
	}
	cap, bucket, watch := s.Limits[0], s.Limits[1], s.Limits[2]
	if cap.Name != "hard-cap" || cap.Key != "hard-cap|user=alice" || cap.Algorithm != "sliding_log" || cap.Used != 1 || cap.Remaining != 4 ||
		cap.Policy != "sliding_log 5/5s" || cap.Level != nil || cap.ResetAfterMs != 4750 {
		t.Errorf("hard-cap %+v", cap)
	}
	if len(cap.Entries) != 1 || cap.Entries[0].AgoMs != 250 || cap.Entries[0].Cost != 1 {
		t.Errorf("hard-cap's log entries %+v, want one of cost 1, 250 ms ago", cap.Entries)
	}
	// 10 - 3 - 1 + 0.5 = 6.5 tokens; whole again in 3.5 tokens / 2 per s.
	if bucket.Name != "llm-budget" || bucket.Level == nil || *bucket.Level != 6.5 || bucket.Remaining != 6 || bucket.ResetAfterMs != 1750 ||
		bucket.Policy != "token_bucket 2/1s burst 10" {
		t.Errorf("llm-budget %+v level %v", bucket, bucket.Level)
	}
	if !watch.Shadow || watch.Used != 2 {
		t.Errorf("watch %+v", watch)
	}

	e.post("/ui/api/reset", `{"descriptors": {"user": "alice"}, "limit": "nope"}`, auth).wantError(t, http.StatusNotFound, "limit", "no limit named nope")
	var r struct{ Reset []string }
	e.post("/ui/api/reset", `{"descriptors": {"user": "alice"}, "limit": "llm-budget"}`, auth).json(t, http.StatusOK, &r)
	if fmt.Sprint(r.Reset) != "[llm-budget|user=alice]" {
		t.Errorf("reset %v", r.Reset)
	}
	e.post("/ui/api/inspect", `{"descriptors": {"user": "alice", "route": "/v1/sensitive"}}`, auth).json(t, http.StatusOK, &s)
	if s.Limits[1].Remaining != 10 || s.Limits[0].Remaining != 4 {
		t.Errorf("after resetting llm-budget: %+v", s.Limits)
	}
	e.post("/ui/api/reset", `{"descriptors": {"user": "nobody-here", "route": "/x"}, "limit": ""}`, auth).json(t, http.StatusOK, &r)
	if len(r.Reset) != 2 { // llm-budget and watch select every user
		t.Errorf("reset %v", r.Reset)
	}

	e.post("/ui/api/inspect", `{"descriptors": {"user": 3}}`, auth).wantError(t, http.StatusBadRequest, "descriptors", "want a string, got number")
	e.post("/ui/api/inspect", `{"descriptors": {}, "limit": "x"}`, auth).wantError(t, http.StatusBadRequest, "limit", "unknown field")
	e.post("/ui/api/inspect", `{"descriptor": {}}`, auth).wantError(t, http.StatusBadRequest, "descriptor", "unknown field")
	e.post("/ui/api/inspect", `{"descriptors": {"user": "`+strings.Repeat("x", 300)+`"}}`, auth).wantError(t, http.StatusBadRequest, "descriptors.user", "at most 256 bytes")
	e.post("/ui/api/inspect", `{"descriptors": {}`, auth).wantError(t, http.StatusBadRequest, "body", "truncated JSON")
	e.post("/ui/api/inspect", `{} {}`, auth).wantError(t, http.StatusBadRequest, "body", "unexpected data")
	e.post("/ui/api/inspect", `{"descriptors": {"user": "a", "user": "b"}}`, auth).wantError(t, http.StatusBadRequest, "descriptors.user", "appears twice")
	e.post("/ui/api/inspect", "{\"descriptors\": {\"user\": \"\xff\"}}", auth).wantError(t, http.StatusBadRequest, "descriptors.user", "not valid UTF-8")
	e.post("/ui/api/inspect", `{"descriptors": {"a": "`+strings.Repeat("x", 17<<10)+`"}}`, auth).wantError(t, http.StatusRequestEntityTooLarge, "body", "larger than")
}
