package httpapi_test

import (
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/server/httpapi"
)

// storeCases run on every store: the embedded one and a real Redis.
var storeCases = []struct {
	name string
	run  func(t *testing.T, b backend)
}{
	{"TokenBucketSimulator", testTokenBucketSimulator},
	{"SlidingWindowSimulator", testSlidingWindowSimulator},
	{"SeveralRequestsAllOrNothing", testSeveralRequests},
	{"ShadowLimits", testShadowLimits},
	{"CostExceedsLimit", testCostExceedsLimit},
	{"ForwardAuthHeaders", testForwardAuthHeaders},
	{"ForwardAuthAmbiguousHeaders", testForwardAuthAmbiguousHeaders},
	{"ForwardAuthQuickstart", testForwardAuthQuickstart},
	{"ForwardAuthClientIP", testForwardAuthClientIP},
	{"ReserveSettle", testReserveSettle},
	{"ReserveDenied", testReserveDenied},
	{"WaitThenAdmit", testWaitThenAdmit},
	{"RequestWaits", testRequestWaits},
	{"AdminInspectReset", testAdminInspectReset},
	{"PolicyOfOverridesAndCalendars", testPolicyOfOverridesAndCalendars},
}

func TestStores(t *testing.T) {
	srv := redistest.Start(t)
	for _, b := range []backend{memBackend(), redisBackend(srv)} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range storeCases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.run(t, b)
				})
			}
		})
	}
}

// The token bucket simulator of the quickstart: capacity 10 refilling 2/s, a
// chat costs 1 and an embedding 3.
func testTokenBucketSimulator(t *testing.T, b backend) {
	e := newEnv(t, b, setup{})
	check := func(route string) response {
		return e.post("/v1/check", `{"descriptors": {"user": "alice", "route": "`+route+`"}}`)
	}
	policy := `"llm-budget";q=10;w=5`
	steps := []struct {
		route           string
		remaining       int64
		resetMs         int64
		reset, rateLmit string
	}{
		{"/v1/chat", 9, 500, "1", `"llm-budget";r=9;t=1`},
		{"/v1/embed", 6, 2000, "2", `"llm-budget";r=6;t=2`},
		{"/v1/embed", 3, 3500, "4", `"llm-budget";r=3;t=4`},
		{"/v1/embed", 0, 5000, "5", `"llm-budget";r=0;t=5`},
	}
	for i, s := range steps {
		r := check(s.route)
		wantStatus(t, r, http.StatusOK)
		wantHeaders(t, r, map[string]string{
			"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": strconv.FormatInt(s.remaining, 10),
			"X-RateLimit-Reset": s.reset, "RateLimit": s.rateLmit, "RateLimit-Policy": policy,
		})
		d := decodeDecision(t, r)
		cost := int64(3)
		if i == 0 {
			cost = 1
		}
		want := outcome{Name: "llm-budget", Level: "plan", Unit: "requests", Key: "llm-budget|user=alice", Allowed: true, Limit: 10,
			Remaining: s.remaining, Cost: cost, ResetMs: s.resetMs}
		if !d.Allowed || len(d.Limits) != 1 || d.Limits[0] != want {
			t.Fatalf("step %d: %+v, want allowed with %+v", i, d, want)
		}
	}
	// The bucket is empty: an embedding waits 1.5 s, announced as 2 s.
	r := check("/v1/embed")
	wantStatus(t, r, http.StatusTooManyRequests)
	wantHeaders(t, r, map[string]string{
		"Retry-After": "2", "X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset": "5", "RateLimit": `"llm-budget";r=0;t=5`, "RateLimit-Policy": policy,
	})
	d := decodeDecision(t, r)
	want := outcome{Name: "llm-budget", Level: "plan", Unit: "requests", Key: "llm-budget|user=alice", Limit: 10, Cost: 3, ResetMs: 5000, RetryAfterMs: 1500}
	if d.Allowed || len(d.Limits) != 1 || d.Limits[0] != want {
		t.Fatalf("denied embed: %+v, want %+v", d, want)
	}
	// 1.5 s later it fits exactly.
	e.clock.Advance(1500 * time.Millisecond)
	r = check("/v1/embed")
	wantStatus(t, r, http.StatusOK)
	wantHeaders(t, r, map[string]string{
		"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "5",
		"RateLimit": `"llm-budget";r=0;t=5`, "RateLimit-Policy": policy,
	})
}

// The sliding window simulator: at most 5 requests in any 5 s on
// /v1/sensitive; the 6th is denied until the first leaves the window.
func testSlidingWindowSimulator(t *testing.T, b backend) {
	e := newEnv(t, b, setup{})
	body := `{"descriptors": {"user": "bob", "route": "/v1/sensitive"}}`
	for i := 1; i <= 5; i++ {
		r := e.post("/v1/check", body)
		wantStatus(t, r, http.StatusOK)
		left := strconv.Itoa(5 - i)
		wantHeaders(t, r, map[string]string{
			"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": left, "X-RateLimit-Reset": "5",
			"RateLimit": `"hard-cap";r=` + left + `;t=5`, "RateLimit-Policy": `"hard-cap";q=5;w=5`,
		})
		d := decodeDecision(t, r)
		if len(d.Limits) != 2 || d.Limits[0].Name != "hard-cap" || d.Limits[1].Name != "llm-budget" ||
			d.Limits[1].Remaining != int64(10-i) {
			t.Fatalf("request %d: %+v, want hard-cap and llm-budget (%d left)", i, d, 10-i)
		}
		e.clock.Advance(100 * time.Millisecond)
	}
	r := e.post("/v1/check", body)
	wantStatus(t, r, http.StatusTooManyRequests)
	// The first request, at 0 s, leaves the window at 5 s: 4.5 s from now.
	wantHeaders(t, r, map[string]string{
		"Retry-After": "5", "X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "5",
		"RateLimit": `"hard-cap";r=0;t=5`, "RateLimit-Policy": `"hard-cap";q=5;w=5`,
	})
	d := decodeDecision(t, r)
	hc := d.Limits[0]
	if d.Allowed || hc.Allowed || hc.RetryAfterMs != 4500 || hc.Remaining != 0 || !d.Limits[1].Allowed {
		t.Fatalf("6th request: %+v, want hard-cap denying for 4500 ms while llm-budget allows", d)
	}
	// Nothing was charged to llm-budget by the denied request.
	e.clock.Advance(4500 * time.Millisecond)
	r = e.post("/v1/check", body)
	wantStatus(t, r, http.StatusOK)
}

// Several descriptor sets are checked all or nothing.
func testSeveralRequests(t *testing.T, b backend) {
	const token = "admin-secret"
	e := newEnv(t, b, setup{opts: httpapi.Options{AdminToken: token}})
	// Empty carol's bucket but for 1 token.
	for range 3 {
		wantStatus(t, e.post("/v1/check", `{"descriptors": {"user": "carol", "route": "/v1/embed"}}`), http.StatusOK)
	}
	both := `{"requests": [
		{"descriptors": {"user": "dave", "route": "/v1/chat"}},
		{"descriptors": {"user": "carol", "route": "/v1/embed"}}]}`
	r := e.post("/v1/check", both)
	wantStatus(t, r, http.StatusTooManyRequests)
	wantHeaders(t, r, map[string]string{
		"Retry-After": "1", "X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "5",
		"RateLimit": `"llm-budget";r=1;t=5`, "RateLimit-Policy": `"llm-budget";q=10;w=5`,
	})
	d := decodeDecision(t, r)
	if len(d.Limits) != 2 || d.Limits[0].Request != 0 || d.Limits[1].Request != 1 ||
		d.Limits[0].Key != "llm-budget|user=dave" || !d.Limits[0].Allowed || d.Limits[1].Allowed {
		t.Fatalf("%+v: want dave's limit allowing and carol's denying", d)
	}
	// Dave was not charged.
	if got := e.inspect(token, `{"user": "dave"}`)["llm-budget"].Remaining; got != 10 {
		t.Fatalf("dave has %d left after a denied pair, want 10", got)
	}
	r = e.post("/v1/check", `{"requests": [
		{"descriptors": {"user": "dave", "route": "/v1/chat"}},
		{"descriptors": {"user": "carol", "route": "/v1/other"}}]}`)
	wantStatus(t, r, http.StatusOK)
	if got := e.inspect(token, `{"user": "dave"}`)["llm-budget"].Remaining; got != 9 {
		t.Fatalf("dave has %d left after an admitted pair, want 9", got)
	}
}

const shadowConfig = `
limits:
  - name: strict
    key: [user]
    algorithm: fixed_window
    limit: 2/1m
  - name: trial
    key: [user]
    algorithm: fixed_window
    limit: 1/1m
    shadow: true
`

// Shadow limits are reported but never deny, and never set the headers.
func testShadowLimits(t *testing.T, b backend) {
	e := newEnv(t, b, setup{config: shadowConfig})
	body := `{"descriptors": {"user": "erin"}}`
	for i, trialAllows := range []bool{true, false} {
		r := e.post("/v1/check", body)
		wantStatus(t, r, http.StatusOK)
		left := strconv.Itoa(1 - i)
		wantHeaders(t, r, map[string]string{
			"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": left, "X-RateLimit-Reset": "60",
			"RateLimit": `"strict";r=` + left + `;t=60`, "RateLimit-Policy": `"strict";q=2;w=60`,
		})
		d := decodeDecision(t, r)
		if len(d.Limits) != 2 || d.Limits[1].Name != "trial" || !d.Limits[1].Shadow || d.Limits[1].Allowed != trialAllows {
			t.Fatalf("request %d: %+v, want the shadow limit trial allowed=%v", i, d, trialAllows)
		}
	}
	r := e.post("/v1/check", body)
	wantStatus(t, r, http.StatusTooManyRequests)
	wantHeaders(t, r, map[string]string{
		"Retry-After": "60", "X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "60",
		"RateLimit": `"strict";r=0;t=60`, "RateLimit-Policy": `"strict";q=2;w=60`,
	})
}

const tokensConfig = `
limits:
  - name: tokens
    key: [user]
    algorithm: fixed_window
    limit: 100/1d
    cost: request
  - name: requests
    key: [user]
    algorithm: gcra
    rate: 60/min
    max_burst: 9
    cost: 1
`

// A cost above the capacity is denied with no Retry-After: waiting cannot
// help.
func testCostExceedsLimit(t *testing.T, b backend) {
	e := newEnv(t, b, setup{config: tokensConfig})
	r := e.post("/v1/check", `{"descriptors": {"user": "fay"}, "cost": 101}`)
	wantStatus(t, r, http.StatusTooManyRequests)
	wantHeaders(t, r, map[string]string{
		"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "100", "X-RateLimit-Reset": "0",
		"RateLimit": `"tokens";r=100;t=0`, "RateLimit-Policy": `"tokens";q=100;w=86400`,
	})
	d := decodeDecision(t, r)
	if d.Allowed || !d.Limits[0].CostExceedsLimit || d.Limits[0].RetryAfterMs != 0 {
		t.Fatalf("%+v: want tokens denied as cost_exceeds_limit", d)
	}
	// GCRA's window: 10 requests (max_burst 9 + 1) refill in 10 s.
	r = e.post("/v1/check", `{"descriptors": {"user": "fay"}, "cost": 98}`)
	wantStatus(t, r, http.StatusOK)
	wantHeaders(t, r, map[string]string{
		"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "86400",
		"RateLimit": `"tokens";r=2;t=86400`, "RateLimit-Policy": `"tokens";q=100;w=86400`,
	})
	r = e.post("/v1/check", `{"descriptors": {"user": "fay"}}`)
	wantHeaders(t, r, map[string]string{
		"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "86400",
		"RateLimit": `"tokens";r=1;t=86400`, "RateLimit-Policy": `"tokens";q=100;w=86400`,
	})
	r = e.post("/v1/check", `{"descriptors": {"user": "gil"}}`)
	wantHeaders(t, r, map[string]string{
		"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "9", "X-RateLimit-Reset": "1",
		"RateLimit": `"requests";r=9;t=1`, "RateLimit-Policy": `"requests";q=10;w=10`,
	})
}

const allDescriptorsConfig = `
limits:
  - name: everything
    key: [api_key, user, model, tenant, route, ip]
    algorithm: token_bucket
    capacity: 100
    refill: 10/s
    cost: request
`

// Forward-auth reads every descriptor from the headers.
func testForwardAuthHeaders(t *testing.T, b backend) {
	const token = "admin-secret"
	e := newEnv(t, b, setup{config: allDescriptorsConfig, opts: httpapi.Options{AdminToken: token}})
	r := e.do(http.MethodGet, "/v1/forward-auth", "",
		"Authorization: Bearer sk-live-123", "X-Api-Key: ignored-when-bearer", "X-User: hana", "X-Model: gpt-x",
		"X-Tenant: acme", "X-Forwarded-Uri: /v1/chat/completions?stream=true", "X-Cost: 40")
	wantStatus(t, r, http.StatusOK)
	wantHeaders(t, r, map[string]string{
		"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "60", "X-RateLimit-Reset": "4",
		"RateLimit": `"everything";r=60;t=4`, "RateLimit-Policy": `"everything";q=100;w=10`,
	})
	if !strings.HasPrefix(r.body, `{"allowed":true,"limits":[{"name":"everything",`) || r.header.Get("X-Tokenlimit-Body") != "" {
		t.Errorf("allowed forward-auth body %q (X-Tokenlimit-Body %q), want the decision", r.body, r.header.Get("X-Tokenlimit-Body"))
	}
	got := e.inspect(token, `{"api_key": "sk-live-123", "user": "hana", "model": "gpt-x", "tenant": "acme",
		"route": "/v1/chat/completions", "ip": "127.0.0.1"}`)["everything"]
	if got.Remaining != 60 {
		t.Fatalf("inspect: %+v, want 60 left on the budget forward-auth charged", got)
	}
	// X-Api-Key and X-Original-URI (NGINX), any method; a denial is 429 with
	// the decision as JSON, or 403 when asked, with that body in a header too.
	headers := []string{"X-Api-Key: sk-live-123", "X-User: hana", "X-Model: gpt-x", "X-Tenant: acme",
		"X-Original-URI: /v1/chat/completions", "X-Cost: 61"}
	r = e.do(http.MethodPut, "/v1/forward-auth", "", headers...)
	wantStatus(t, r, http.StatusTooManyRequests)
	wantHeaders(t, r, map[string]string{
		"Retry-After": "1", "X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "60", "X-RateLimit-Reset": "4",
		"RateLimit": `"everything";r=60;t=4`, "RateLimit-Policy": `"everything";q=100;w=10`,
	})
	if !strings.HasPrefix(r.body, `{"allowed":false,"limits":[{"name":"everything",`) || r.header.Get("Content-Type") != "application/json" {
		t.Errorf("denied body %q (%s)", r.body, r.header.Get("Content-Type"))
	}
	r = e.do(http.MethodGet, "/v1/forward-auth?deny_status=403", "", headers...)
	wantStatus(t, r, http.StatusForbidden)
	if r.header.Get("Retry-After") != "1" {
		t.Errorf("403 denial: Retry-After %q, want 1", r.header.Get("Retry-After"))
	}
	if got := r.header.Get("X-Tokenlimit-Body"); got == "" || got+"\n" != r.body {
		t.Errorf("403 denial: X-Tokenlimit-Body %q, want the body %q", got, r.body)
	}
}

// A header that names the route, identity or cost may be given once: a
// second value (or a second route header naming another route) was written
// by the client, and forward-auth refuses it rather than believe either.
func testForwardAuthAmbiguousHeaders(t *testing.T, b backend) {
	e := newEnv(t, b, setup{})
	cases := []struct {
		field   string
		headers []string
	}{
		{"X-Forwarded-Uri", []string{"X-User: a", "X-Original-URI: /v1/embed", "X-Forwarded-Uri: /v1/chat"}},
		{"X-Original-Uri", []string{"X-User: a", "X-Original-URI: /v1/embed", "X-Original-URI: /v1/chat"}},
		{"X-Cost", []string{"X-User: a", "X-Cost: 1", "X-Cost: 3"}},
		{"X-User", []string{"X-User: a", "X-User: b"}},
	}
	for _, c := range cases {
		r := e.do(http.MethodGet, "/v1/forward-auth", "", c.headers...)
		wantStatus(t, r, http.StatusBadRequest)
		if !strings.Contains(r.body, `"field":"`+c.field+`"`) {
			t.Errorf("%v: body %s, want field %s", c.headers, r.body, c.field)
		}
	}
	// The same route under both names is one route: the embed weight.
	r := e.do(http.MethodGet, "/v1/forward-auth", "", "X-User: a", "X-Original-URI: /v1/embed", "X-Forwarded-Uri: /v1/embed?x=1")
	wantStatus(t, r, http.StatusOK)
	if got := r.header.Get("X-RateLimit-Remaining"); got != "7" {
		t.Errorf("remaining %s, want 7 (the embed weight 3 charged once)", got)
	}
}

// Forward-auth on the quickstart: the route's query string is not part of
// the route, so the embed weight applies.
func testForwardAuthQuickstart(t *testing.T, b backend) {
	e := newEnv(t, b, setup{})
	for _, left := range []string{"7", "4", "1"} {
		r := e.do(http.MethodGet, "/v1/forward-auth", "", "X-User: ivy", "X-Forwarded-Uri: /v1/embed?x=1")
		wantStatus(t, r, http.StatusOK)
		if got := r.header.Get("X-RateLimit-Remaining"); got != left {
			t.Fatalf("remaining %s, want %s", got, left)
		}
	}
	r := e.do(http.MethodPost, "/v1/forward-auth", "", "X-User: ivy", "X-Forwarded-Uri: /v1/embed")
	wantStatus(t, r, http.StatusTooManyRequests)
	wantHeaders(t, r, map[string]string{
		"Retry-After": "1", "X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "5",
		"RateLimit": `"llm-budget";r=1;t=5`, "RateLimit-Policy": `"llm-budget";q=10;w=5`,
	})
}

const perIPConfig = `
limits:
  - name: per-ip
    key: [ip]
    algorithm: fixed_window
    limit: 10/1m
`

// X-Forwarded-For counts only when the peer is a trusted proxy.
func testForwardAuthClientIP(t *testing.T, b backend) {
	const token = "admin-secret"
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	cases := []struct {
		name    string
		trusted []netip.Prefix
		xff     []string
		client  string
	}{
		{"untrusted peer", nil, []string{"X-Forwarded-For: 203.0.113.7"}, "127.0.0.1"},
		{"trusted peer", loopback, []string{"X-Forwarded-For: 203.0.113.7"}, "203.0.113.7"},
		{"rightmost untrusted hop", loopback, []string{"X-Forwarded-For: 198.51.100.1, 203.0.113.7, 127.0.0.9"}, "203.0.113.7"},
		{"several headers", loopback, []string{"X-Forwarded-For: 198.51.100.1", "X-Forwarded-For: 203.0.113.8"}, "203.0.113.8"},
		{"trusted peer, no header", loopback, nil, "127.0.0.1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, b, setup{config: perIPConfig, opts: httpapi.Options{AdminToken: token, TrustedProxies: c.trusted}})
			wantStatus(t, e.do(http.MethodGet, "/v1/forward-auth", "", c.xff...), http.StatusOK)
			if got := e.inspect(token, `{"ip": "`+c.client+`"}`)["per-ip"]; got.Remaining != 9 || got.Key != "per-ip|ip="+c.client {
				t.Fatalf("%+v: want the charge on %s", got, c.client)
			}
		})
	}
}

// Reservations: a retried reserve returns the same answer and charges once;
// settle refunds the difference once; unknown and expired ids are 404.
func testReserveSettle(t *testing.T, b backend) {
	const token = "admin-secret"
	e := newEnv(t, b, setup{config: tokensConfig, opts: httpapi.Options{AdminToken: token}})
	left := func() int64 { return e.inspect(token, `{"user": "jo"}`)["tokens"].Remaining }
	req := `{"id": "call-1", "descriptors": {"user": "jo"}, "cost": 40}`
	var first string
	for i := range 2 {
		r := e.post("/v1/reserve", req)
		wantStatus(t, r, http.StatusOK)
		wantHeaders(t, r, map[string]string{
			"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "9", "X-RateLimit-Reset": "1",
			"RateLimit": `"requests";r=9;t=1`, "RateLimit-Policy": `"requests";q=10;w=10`,
		})
		d := decodeDecision(t, r)
		if d.ReservationID != "call-1" || !d.Allowed || d.Limits[0].Remaining != 60 {
			t.Fatalf("reserve %d: %+v, want call-1 allowed with 60 tokens left", i, d)
		}
		if i == 0 {
			first = r.body
		} else if r.body != first {
			t.Fatalf("retried reserve answered %s, first %s", r.body, first)
		}
		if got := left(); got != 60 {
			t.Fatalf("after reserve %d: %d tokens left, want 60 (one charge)", i, got)
		}
	}
	for i, already := range []bool{false, true} {
		r := e.post("/v1/settle", `{"id": "call-1", "actual": 10}`)
		wantStatus(t, r, http.StatusOK)
		if want := `{"settled":true,"already":` + strconv.FormatBool(already) + "}\n"; r.body != want {
			t.Fatalf("settle %d: %s, want %s", i, r.body, want)
		}
		if got := left(); got != 90 {
			t.Fatalf("after settle %d: %d tokens left, want 90 (30 refunded once)", i, got)
		}
	}
	wantError(t, e.post("/v1/settle", `{"id": "nope", "actual": 1}`), http.StatusNotFound, "id", "no reservation")

	// A reservation without id gets one; after the TTL it cannot be settled.
	d := decodeDecision(t, e.post("/v1/reserve", `{"descriptors": {"user": "jo"}, "cost": 5}`))
	if len(d.ReservationID) != 32 {
		t.Fatalf("generated reservation id %q, want 32 hex digits", d.ReservationID)
	}
	e.clock.Advance(11 * time.Minute)
	wantError(t, e.post("/v1/settle", `{"id": "`+d.ReservationID+`", "actual": 1}`), http.StatusNotFound, "id", "expired")
	if got := left(); got != 85 {
		t.Fatalf("the expired reservation of 5 should stand: %d left, want 85", got)
	}
}

// A denied reservation answers 429, and its retry answers the same without
// charging.
func testReserveDenied(t *testing.T, b backend) {
	const token = "admin-secret"
	e := newEnv(t, b, setup{config: tokensConfig, opts: httpapi.Options{AdminToken: token}})
	wantStatus(t, e.post("/v1/check", `{"descriptors": {"user": "kim"}, "cost": 95}`), http.StatusOK)
	for range 2 {
		r := e.post("/v1/reserve", `{"id": "big", "descriptors": {"user": "kim"}, "cost": 10}`)
		wantStatus(t, r, http.StatusTooManyRequests)
		wantHeaders(t, r, map[string]string{
			"Retry-After": "86400", "X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "5", "X-RateLimit-Reset": "86400",
			"RateLimit": `"tokens";r=5;t=86400`, "RateLimit-Policy": `"tokens";q=100;w=86400`,
		})
		if d := decodeDecision(t, r); d.ReservationID != "big" || d.Allowed {
			t.Fatalf("%+v: want reservation big denied", d)
		}
	}
	if got := e.inspect(token, `{"user": "kim"}`); got["tokens"].Remaining != 5 || got["requests"].Remaining != 9 {
		t.Fatalf("%+v: the denied reservation charged something", got)
	}
}

// Admin inspect and reset, behind the admin token.
func testAdminInspectReset(t *testing.T, b backend) {
	const token = "admin-secret"
	e := newEnv(t, b, setup{opts: httpapi.Options{AdminToken: token}})
	for range 2 {
		e.post("/v1/check", `{"descriptors": {"user": "lee", "route": "/v1/sensitive"}}`)
	}
	got := e.inspect(token, `{"user": "lee", "route": "/v1/sensitive"}`)
	want := map[string]outcome{
		"hard-cap":   {Name: "hard-cap", Level: "plan", Unit: "tokens", Key: "hard-cap|user=lee", Allowed: true, Limit: 5, Remaining: 3, ResetMs: 5000},
		"llm-budget": {Name: "llm-budget", Level: "plan", Unit: "requests", Key: "llm-budget|user=lee", Allowed: true, Limit: 10, Remaining: 8, ResetMs: 1000},
	}
	if len(got) != 2 || got["hard-cap"] != want["hard-cap"] || got["llm-budget"] != want["llm-budget"] {
		t.Fatalf("inspect: %+v, want %+v", got, want)
	}
	auth := "Authorization: Bearer " + token
	r := e.post("/v1/admin/reset", `{"descriptors": {"user": "lee", "route": "/v1/sensitive"}, "limit": "hard-cap"}`, auth)
	wantStatus(t, r, http.StatusOK)
	if r.body != `{"reset":["hard-cap|user=lee"]}`+"\n" {
		t.Fatalf("reset one: %s", r.body)
	}
	if got := e.inspect(token, `{"user": "lee", "route": "/v1/sensitive"}`); got["hard-cap"].Remaining != 5 || got["llm-budget"].Remaining != 8 {
		t.Fatalf("after resetting hard-cap: %+v", got)
	}
	r = e.post("/v1/admin/reset", `{"descriptors": {"user": "lee", "route": "/v1/sensitive"}}`, auth)
	if r.body != `{"reset":["hard-cap|user=lee","llm-budget|user=lee"]}`+"\n" {
		t.Fatalf("reset all: %s", r.body)
	}
	if got := e.inspect(token, `{"user": "lee"}`); got["llm-budget"].Remaining != 10 {
		t.Fatalf("after resetting all: %+v", got)
	}
	wantError(t, e.post("/v1/admin/reset", `{"descriptors": {"user": "lee"}, "limit": "nope"}`, auth), http.StatusNotFound, "limit", "no limit named nope")
	r = e.post("/v1/admin/reset", `{"descriptors": {"user": "lee"}, "limit": "hard-cap"}`, auth)
	if r.body != `{"reset":[]}`+"\n" {
		t.Fatalf("reset of a limit the descriptors do not select: %s", r.body)
	}
}

const plansConfig = `
timezone: Europe/Berlin
limits:
  - name: tokens
    key: [api_key]
    algorithm: token_bucket
    capacity: 100
    refill: 10/s
    cost: request
plans:
  free: {monthly: 45}
  pro: {daily: 100000}
api_keys:
  k-free: {plan: free}
  k-pro:
    plan: pro
    overrides:
      tokens: {capacity: 1000, refill: 50/s}
`

// RateLimit-Policy describes the limit as it applies to the request: with
// the api key's override, and for calendar quotas the current month.
func testPolicyOfOverridesAndCalendars(t *testing.T, b backend) {
	e := newEnv(t, b, setup{config: plansConfig})
	e.clock.Advance(31 * 24 * time.Hour) // 2026-02-01 00:00 UTC, 01:00 in Berlin
	r := e.post("/v1/check", `{"descriptors": {"api_key": "k-pro"}, "cost": 1}`)
	wantHeaders(t, r, map[string]string{
		"X-RateLimit-Limit": "1000", "X-RateLimit-Remaining": "999", "X-RateLimit-Reset": "1",
		"RateLimit": `"tokens";r=999;t=1`, "RateLimit-Policy": `"tokens";q=1000;w=20`,
	})
	// February in Berlin: 28 days, ending at 2026-02-28 23:00 UTC.
	r = e.post("/v1/check", `{"descriptors": {"api_key": "k-free"}, "cost": 10}`)
	reset := strconv.Itoa(28*24*3600 - 3600)
	wantHeaders(t, r, map[string]string{
		"X-RateLimit-Limit": "45", "X-RateLimit-Remaining": "35", "X-RateLimit-Reset": reset,
		"RateLimit": `"plan-free-monthly";r=35;t=` + reset, "RateLimit-Policy": `"plan-free-monthly";q=45;w=2419200`,
	})
}

// A limit's wait on /v1/check: a check denied with a retry-after of 1 s
// under wait: 2s is answered once that second has passed on the service's
// clock, allowed, with waited_ms; a retry-after beyond the wait is 429 at
// once.
func testWaitThenAdmit(t *testing.T, b backend) {
	e := newEnv(t, b, setup{config: `
limits:
  - {name: per-second, key: [user], algorithm: fixed_window, limit: 1/s, wait: 2s}
  - {name: per-minute, key: [team], algorithm: fixed_window, limit: 1/min, wait: 2s}
`})
	check := `{"descriptors": {"user": "ann"}}`
	wantStatus(t, e.post("/v1/check", check), http.StatusOK)
	answer := make(chan response, 1)
	go func() { answer <- e.post("/v1/check", check) }()
	testkit.Eventually(t, 10*time.Second, "the check waiting", func() bool { return e.clock.Timers() == 2 })
	select {
	case r := <-answer:
		t.Fatalf("answered %d before the budget refilled: %s", r.status, r.body)
	default:
	}
	e.clock.Advance(time.Second)
	r := <-answer
	wantStatus(t, r, http.StatusOK)
	if v := r.json(t); v["allowed"] != true || v["waited_ms"] != float64(1000) {
		t.Errorf("after waiting: %s; want allowed, waited_ms 1000", r.body)
	}
	team := `{"descriptors": {"team": "t"}}`
	wantStatus(t, e.post("/v1/check", team), http.StatusOK)
	r = e.post("/v1/check", team) // retry-after 59 s: beyond the wait
	wantStatus(t, r, http.StatusTooManyRequests)
	if _, ok := r.json(t)["waited_ms"]; ok {
		t.Errorf("a denial at once has waited_ms: %s", r.body)
	}
}

// testRequestWaits: a check that says "wait" waits under a limit that has
// no wait of its own, within the request's wait; a bad wait is a 400
// naming the field.
func testRequestWaits(t *testing.T, b backend) {
	e := newEnv(t, b, setup{config: `
limits:
  - {name: per-second, key: [user], algorithm: fixed_window, limit: 1/s}
`})
	wait := `{"descriptors": {"user": "bo"}, "wait": "1500ms"}`
	wantStatus(t, e.post("/v1/check", wait), http.StatusOK)
	wantStatus(t, e.post("/v1/check", `{"descriptors": {"user": "bo"}}`), http.StatusTooManyRequests) // no wait: denied at once
	answer := make(chan response, 1)
	go func() { answer <- e.post("/v1/check", wait) }()
	testkit.Eventually(t, 10*time.Second, "the check waiting", func() bool { return e.clock.Timers() == 2 })
	e.clock.Advance(time.Second)
	r := <-answer
	wantStatus(t, r, http.StatusOK)
	if v := r.json(t); v["allowed"] != true || v["waited_ms"] != float64(1000) {
		t.Errorf("after waiting: %s; want allowed, waited_ms 1000", r.body)
	}
	short := `{"descriptors": {"user": "bo"}, "wait": "500ms"}` // retry-after 1 s: beyond it
	if r := e.post("/v1/check", short); r.status != http.StatusTooManyRequests {
		t.Errorf("a wait shorter than the retry-after: %d %s, want 429 at once", r.status, r.body)
	}
	for _, bad := range []string{`"2 seconds"`, `"-1s"`, `"61s"`} {
		r := e.post("/v1/check", `{"descriptors": {"user": "bo"}, "wait": `+bad+`}`)
		wantStatus(t, r, http.StatusBadRequest)
		if f := r.json(t)["error"].(map[string]any)["field"]; f != "wait" {
			t.Errorf("wait %s: field %v, want wait", bad, f)
		}
	}
}
