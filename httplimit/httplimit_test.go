package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/httplimit"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newLimiter(t *testing.T, c *testkit.Clock) *tokenlimit.Limiter {
	t.Helper()
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := tokenlimit.NewLimiter(st, tokenlimit.WithClock(c.Now))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// hello answers 200 "hello" and records that it ran.
type hello struct {
	mu    sync.Mutex
	calls int
}

func (h *hello) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.mu.Lock()
	h.calls++
	h.mu.Unlock()
	_, _ = io.WriteString(w, "hello")
}

func (h *hello) count() int { h.mu.Lock(); defer h.mu.Unlock(); return h.calls }

type answer struct {
	code   int
	header http.Header
	body   string
}

func serve(h http.Handler, r *http.Request) answer {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return answer{w.Code, w.Header(), w.Body.String()}
}

func get(headers ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/v1/embed", nil)
	r.RemoteAddr = "192.0.2.7:4711"
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	return r
}

func errorOf(t *testing.T, a answer) (field, message string) {
	t.Helper()
	var body struct {
		Error struct{ Field, Message string }
	}
	if err := json.Unmarshal([]byte(a.body), &body); err != nil {
		t.Fatalf("body %q: %v", a.body, err)
	}
	return body.Error.Field, body.Error.Message
}

// TestTokenBucketByHeader walks the README's bucket (capacity 10, 2 per
// second) with embeddings that cost 3, keyed by X-Api-Key.
func TestTokenBucketByHeader(t *testing.T) {
	t.Parallel()
	c := testkit.NewClock(t0)
	next := &hello{}
	mw, err := httplimit.New(newLimiter(t, c), tokenlimit.TokenBucketLimit(10, 2, time.Second), httplimit.Options{
		Name: "embed", Key: httplimit.KeyFromHeader("x-api-key"),
		Cost: func(*http.Request) (int64, error) { return 3, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(next)
	for i, remaining := range []int64{7, 4, 1} {
		a := serve(h, get("X-Api-Key", "k1"))
		want := map[string]string{
			"X-Ratelimit-Limit": "10", "X-Ratelimit-Remaining": strconv.FormatInt(remaining, 10),
			"Ratelimit-Policy": `"embed";q=10;w=5`, "Retry-After": "",
		}
		for k, v := range want {
			if a.header.Get(k) != v {
				t.Errorf("call %d: %s = %q, want %q", i, k, a.header.Get(k), v)
			}
		}
		if a.code != http.StatusOK || a.body != "hello" {
			t.Errorf("call %d: %d %q, want 200 from the next handler", i, a.code, a.body)
		}
	}
	// 1 token left, 3 needed: 1s until they are back.
	a := serve(h, get("X-Api-Key", "k1"))
	if a.code != http.StatusTooManyRequests || a.header.Get("Retry-After") != "1" || a.header.Get("Ratelimit") != `"embed";r=1;t=5` {
		t.Fatalf("fourth call: %d %v", a.code, a.header)
	}
	var body struct {
		Allowed bool
		Limits  []struct {
			Name, Key              string
			Limit, Remaining, Cost int64
			RetryAfterMs           int64 `json:"retry_after_ms"`
		}
	}
	if err := json.Unmarshal([]byte(a.body), &body); err != nil || body.Allowed || len(body.Limits) != 1 {
		t.Fatalf("429 body %q: %v", a.body, err)
	}
	if l := body.Limits[0]; l.Name != "embed" || l.Key != "k1" || l.Limit != 10 || l.Remaining != 1 || l.Cost != 3 || l.RetryAfterMs != 1000 {
		t.Errorf("429 body %+v", l)
	}
	if next.count() != 3 {
		t.Errorf("next ran %d times, want 3", next.count())
	}
	// Another key has its own budget; 1s later k1's fits again.
	if a := serve(h, get("X-Api-Key", "k2")); a.code != http.StatusOK {
		t.Errorf("k2: %d", a.code)
	}
	c.Advance(time.Second)
	if a := serve(h, get("X-Api-Key", "k1")); a.code != http.StatusOK || a.header.Get("X-Ratelimit-Remaining") != "0" {
		t.Errorf("k1 after 1s: %d %v", a.code, a.header)
	}
}

func TestBadAndMissingKeys(t *testing.T) {
	t.Parallel()
	limit := tokenlimit.FixedWindowLimit(5, time.Minute)
	next := &hello{}
	newMW := func(o httplimit.Options) http.Handler {
		mw, err := httplimit.New(newLimiter(t, testkit.NewClock(t0)), limit, o)
		if err != nil {
			t.Fatal(err)
		}
		return mw.Handler(next)
	}
	byHeader := newMW(httplimit.Options{Key: httplimit.KeyFromHeader("X-Api-Key")})
	for _, tt := range []struct {
		name    string
		h       http.Handler
		req     *http.Request
		field   string
		message string
	}{
		{"missing header", byHeader, get(), "X-Api-Key", "missing"},
		{"blank header", byHeader, get("X-Api-Key", "  "), "X-Api-Key", "missing"},
		{"key too long", byHeader, get("X-Api-Key", strings.Repeat("k", tokenlimit.MaxKeyLength+1)), "key", "at most 1024 bytes"},
		{"empty key", newMW(httplimit.Options{Key: func(*http.Request) (string, error) { return "", nil }}), get(), "key", "no key"},
		{"key error", newMW(httplimit.Options{Key: func(*http.Request) (string, error) { return "", errors.New("session expired") }}), get(), "key", "session expired"},
		{"negative cost", newMW(httplimit.Options{Cost: func(*http.Request) (int64, error) { return -1, nil }}), get(), "cost", "at least 0"},
		{"cost error", newMW(httplimit.Options{Cost: func(*http.Request) (int64, error) { return 0, errors.New("no body") }}), get(), "cost", "no body"},
		{"cost field", newMW(httplimit.Options{Cost: func(*http.Request) (int64, error) {
			return 0, &tokenlimit.FieldError{Field: "X-Cost", Reason: "want an integer"}
		}}), get(), "X-Cost", "want an integer"},
	} {
		a := serve(tt.h, tt.req)
		field, msg := errorOf(t, a)
		if a.code != http.StatusBadRequest || field != tt.field || !strings.Contains(msg, tt.message) {
			t.Errorf("%s: %d %q %q, want 400 naming %q with %q", tt.name, a.code, field, msg, tt.field, tt.message)
		}
	}
	if next.count() != 0 {
		t.Errorf("next ran %d times for bad requests", next.count())
	}

	// With a default key, requests without one share its budget.
	h := newMW(httplimit.Options{Key: httplimit.KeyFromHeader("X-Api-Key"), DefaultKey: "anonymous"})
	for i := range 6 {
		a := serve(h, get())
		if want := map[bool]int{true: http.StatusOK, false: http.StatusTooManyRequests}[i < 5]; a.code != want {
			t.Errorf("anonymous call %d: %d, want %d", i, a.code, want)
		}
	}
	if a := serve(h, get("X-Api-Key", "k")); a.code != http.StatusOK {
		t.Errorf("a keyed call after the anonymous budget is spent: %d", a.code)
	}
}

func TestKeyFromIP(t *testing.T) {
	t.Parallel()
	mw, err := httplimit.New(newLimiter(t, testkit.NewClock(t0)), tokenlimit.FixedWindowLimit(1, time.Minute), httplimit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(&hello{})
	r := get()
	if a := serve(h, r); a.code != http.StatusOK {
		t.Fatalf("first: %d", a.code)
	}
	r.RemoteAddr = "192.0.2.7:9999" // same address, another port
	if a := serve(h, r); a.code != http.StatusTooManyRequests || !strings.Contains(a.body, `"key":"192.0.2.7"`) {
		t.Errorf("same address: %d %s", a.code, a.body)
	}
	r.RemoteAddr = "[2001:db8::1]:80"
	if a := serve(h, r); a.code != http.StatusOK {
		t.Errorf("another address: %d", a.code)
	}
}

func TestNewRejectsBadArguments(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, testkit.NewClock(t0))
	good := tokenlimit.FixedWindowLimit(1, time.Second)
	for name, f := range map[string]func() (*httplimit.Middleware, error){
		"nil limiter": func() (*httplimit.Middleware, error) { return httplimit.New(nil, good, httplimit.Options{}) },
		"bad limit": func() (*httplimit.Middleware, error) {
			return httplimit.New(l, tokenlimit.Limit{}, httplimit.Options{})
		},
		"long default": func() (*httplimit.Middleware, error) {
			return httplimit.New(l, good, httplimit.Options{DefaultKey: strings.Repeat("k", 2000)})
		},
	} {
		if m, err := f(); m != nil || err == nil || !strings.HasPrefix(err.Error(), "httplimit: ") {
			t.Errorf("%s: %v, %v; want an httplimit error", name, m, err)
		}
	}
}

// TestStoreFailure stops a real Redis under the middleware: failing open,
// the request reaches the next handler unchanged (no rate-limit headers);
// failing closed, it is answered 503.
func TestStoreFailure(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	st, err := redisstore.New(rueidisclient.New(c), redisstore.Options{Prefix: "httplimit:"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := tokenlimit.NewLimiter(st)
	if err != nil {
		t.Fatal(err)
	}
	limit := tokenlimit.FixedWindowLimit(5, time.Minute)
	quiet := slog.New(slog.DiscardHandler)
	open, err := httplimit.New(l, limit, httplimit.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	closed, err := httplimit.New(l, limit, httplimit.Options{FailClosed: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	next := &hello{}
	if a := serve(open.Handler(next), get()); a.code != http.StatusOK || a.header.Get("X-Ratelimit-Limit") != "5" {
		t.Fatalf("with Redis up: %d %v", a.code, a.header)
	}
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The first calls on a dead connection may fail in any way; wait until
	// the store reports failures.
	for _, err := l.Allow(ctx, "probe", limit); err == nil; _, err = l.Allow(ctx, "probe", limit) {
		if ctx.Err() != nil {
			t.Fatal("the store still answers with Redis stopped")
		}
	}
	a := serve(open.Handler(next), get())
	if a.code != http.StatusOK || a.body != "hello" || len(a.header) != 1 { // only the next handler's Content-Type
		t.Errorf("fail open: %d %q %v, want the next handler's answer unchanged", a.code, a.body, a.header)
	}
	a = serve(closed.Handler(next), get())
	if field, msg := errorOf(t, a); a.code != http.StatusServiceUnavailable || field != "" || !strings.Contains(msg, "store failed") {
		t.Errorf("fail closed: %d %q %q", a.code, field, msg)
	}
	if next.count() != 2 {
		t.Errorf("next ran %d times, want 2", next.count())
	}
}
