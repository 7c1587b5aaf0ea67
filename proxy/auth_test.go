package proxy_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/plane"
	"github.com/tokenlimit/tokenlimit/proxy"
)

// sendWith sends body to path with the given headers, and returns the
// response with its body read.
func (e *env) sendWith(path string, header map[string]string, body string) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, string(data)
}

// errorCode is the code of an OpenAI error body, or "".
func errorCode(body string) string {
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	json.Unmarshal([]byte(body), &e)
	return e.Error.Code
}

// usedOf returns what the plane key id has used of each limit that applies
// to it.
func (e *env) usedOf(id string) map[string]int64 {
	e.t.Helper()
	usage, err := e.svc.KeyUsage(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]int64{}
	for _, u := range usage {
		out[u.Name] = u.Used
	}
	return out
}

// TestPlaneKeysAuthenticate: a plane key's secret, sent as a Bearer token
// or as x-api-key, is served under the key's, its team's and its plan's
// limits; the secret never goes upstream nor into a log line; a revoked,
// disabled or expired key is refused with 401, and so is any other key
// under RejectUnknownKeys.
func TestPlaneKeysAuthenticate(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		var logs testkit.Buffer
		e := newEnv(t, store, withPlane(), withOptions(func(o *proxy.Options) {
			o.UnknownKeys = proxy.RejectUnknownKeys
			o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}))
		ctx := context.Background()
		if _, err := e.plane.CreateTeam(ctx, plane.Spec{Name: "acme", Plan: "pro", Limits: json.RawMessage(
			`[{"name": "team-requests", "algorithm": "fixed_window", "limit": "100/min", "cost": 1}]`)}); err != nil {
			t.Fatal(err)
		}
		k, secret, err := e.plane.CreateKey(ctx, plane.Spec{Name: "ci", Team: "acme", Limits: json.RawMessage(
			`[{"name": "key-tokens", "algorithm": "token_bucket", "capacity": 500, "refill": "500/min", "cost": "request"}]`)})
		if err != nil {
			t.Fatal(err)
		}

		if resp, body := e.post("/v1/chat/completions", secret, chatBody); resp.StatusCode != http.StatusOK {
			t.Fatalf("a plane key, Bearer: status %d, body %s", resp.StatusCode, body)
		}
		if s := e.waitSettled(); s.Actual != 40 || s.Basis != proxy.ByUsage {
			t.Errorf("settlement %+v, want 40 tokens by usage", s)
		}
		assertUsed(t, e.usedOf(k.ID), map[string]int64{"key-tokens": 40, "team-requests": 1, "plan-pro-daily": 40, "requests-per-key": 1})

		resp, body := e.sendWith("/v1/messages", map[string]string{"X-Api-Key": secret, "Anthropic-Version": "2023-06-01"}, msgBody)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("a plane key, x-api-key: status %d, body %s", resp.StatusCode, body)
		}
		e.waitSettled()
		assertUsed(t, e.usedOf(k.ID), map[string]int64{"key-tokens": 80, "team-requests": 2, "requests-per-key": 2})
		for i, c := range e.up.Calls() {
			if c.Authorization != "" || c.APIKey != "" {
				t.Errorf("upstream call %d got Authorization %q, x-api-key %q: want no credential (no UpstreamAPIKey)", i, c.Authorization, c.APIKey)
			}
		}

		_, disabled, err := e.plane.CreateKey(ctx, plane.Spec{Name: "off", Disabled: true})
		if err != nil {
			t.Fatal(err)
		}
		_, expiring, err := e.plane.CreateKey(ctx, plane.Spec{Name: "short", ExpiresAt: t0.Add(time.Minute).Format(time.RFC3339)})
		if err != nil {
			t.Fatal(err)
		}
		if resp, _ := e.post("/v1/chat/completions", expiring, chatBody); resp.StatusCode != http.StatusOK {
			t.Fatalf("a key before its expiry: status %d", resp.StatusCode)
		}
		e.waitSettled()
		e.clock.Advance(time.Minute)
		if err := e.plane.DeleteKey(ctx, k.ID, plane.AnyVersion); err != nil {
			t.Fatal(err)
		}
		calls := len(e.up.Calls())
		for _, c := range []struct{ what, key, says string }{
			{"revoked", secret, "does not know that key"},
			{"disabled", disabled, "is disabled"},
			{"expired", expiring, "has expired"},
			{"unknown", "sk-nobody", "does not know that key"},
			{"absent", "", "didn't provide an API key"},
		} {
			resp, body := e.post("/v1/chat/completions", c.key, chatBody)
			if resp.StatusCode != http.StatusUnauthorized || errorCode(body) != "invalid_api_key" || !strings.Contains(body, c.says) {
				t.Errorf("%s key: status %d, body %s; want 401 invalid_api_key saying %q", c.what, resp.StatusCode, body, c.says)
			}
		}
		if got := len(e.up.Calls()); got != calls {
			t.Errorf("the upstream got %d calls for refused keys", got-calls)
		}
		e.noMoreSettlements()

		for _, s := range []string{secret, disabled, expiring} {
			if strings.Contains(logs.String(), s[len(plane.SecretPrefix):len(plane.SecretPrefix)+8]) {
				t.Fatalf("a log line holds (part of) a secret:\n%s", logs.String())
			}
		}
		if !strings.Contains(logs.String(), `"key":"`+k.ID+`"`) || !strings.Contains(logs.String(), `"msg":"authentication failed"`) {
			t.Errorf("want access log lines naming the key %s and the failed authentications:\n%s", k.ID, logs.String())
		}
	})
}

// TestUpstreamSeesOnlyItsKey: with UpstreamAPIKey, each call goes out with
// that key alone, in its dialect's header, whatever credentials the client
// sent (a plane secret, a key of api_keys, a stray x-api-key).
func TestUpstreamSeesOnlyItsKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "memory", withPlane(), withOptions(func(o *proxy.Options) { o.UpstreamAPIKey = "sk-upstream-only" }))
	_, secret, err := e.plane.CreateKey(context.Background(), plane.Spec{Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what, path, body string
		header           map[string]string
		want             upstreamCall
	}{
		{"plane key, Bearer", "/v1/chat/completions", chatBody, map[string]string{"Authorization": "Bearer " + secret, "X-Api-Key": secret},
			upstreamCall{Authorization: "Bearer sk-upstream-only"}},
		{"plane key, x-api-key", "/v1/messages", msgBody, map[string]string{"X-Api-Key": secret, "Anthropic-Version": "2023-06-01"},
			upstreamCall{APIKey: "sk-upstream-only"}},
		{"api_keys key and a stray x-api-key", "/v1/chat/completions", chatBody, map[string]string{"Authorization": "Bearer " + alice, "X-Api-Key": "sk-stray"},
			upstreamCall{Authorization: "Bearer sk-upstream-only"}},
		{"api_keys key, Anthropic, with Authorization", "/v1/messages", msgBody, map[string]string{"Authorization": "Bearer " + alice, "Anthropic-Version": "2023-06-01"},
			upstreamCall{APIKey: "sk-upstream-only"}},
	} {
		if resp, body := e.sendWith(c.path, c.header, c.body); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d, body %s", c.what, resp.StatusCode, body)
		}
		e.waitSettled()
		calls := e.up.Calls()
		if got := calls[len(calls)-1]; got.Authorization != c.want.Authorization || got.APIKey != c.want.APIKey {
			t.Errorf("%s: the upstream got Authorization %q, x-api-key %q; want %q, %q", c.what, got.Authorization, got.APIKey, c.want.Authorization, c.want.APIKey)
		}
	}
}

// TestAuthFailuresLimited: each client address may fail to authenticate
// AuthFailures times (3, then one every 20 s here); past that the store
// denies, and the address gets 429 for every request, a good key's too,
// until the budget allows one more failure, refunds of other calls
// notwithstanding. Another address behind a trusted proxy has its own
// budget.
func TestAuthFailuresLimited(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, withOptions(func(o *proxy.Options) {
			o.UnknownKeys = proxy.RejectUnknownKeys
			o.AuthFailures = tokenlimit.TokenBucketLimit(3, 3, time.Minute)
			o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		}))
		for i := range 3 {
			if resp, _ := e.post("/v1/chat/completions", "sk-wrong", chatBody); resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("failure %d: status %d, want 401", i+1, resp.StatusCode)
			}
		}
		resp, body := e.post("/v1/chat/completions", "sk-wrong", chatBody)
		if resp.StatusCode != http.StatusTooManyRequests || errorCode(body) != "rate_limit_exceeded" || !strings.Contains(body, proxy.AuthFailuresLimit) {
			t.Fatalf("failure 4: status %d, body %s; want 429 naming %s", resp.StatusCode, body, proxy.AuthFailuresLimit)
		}
		assertHeaders(t, resp.Header, map[string]string{"Retry-After": "20", "Retry-After-Ms": "20000", "X-Should-Retry": ""})
		if resp, _ := e.post("/v1/chat/completions", alice, chatBody); resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("a good key from the refused address: status %d, want 429", resp.StatusCode)
		}
		resp, body = e.sendWith("/v1/chat/completions", map[string]string{"Authorization": "Bearer " + alice, "X-Forwarded-For": "192.0.2.7"}, chatBody)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("another address behind a trusted proxy: status %d, body %s", resp.StatusCode, body)
		}
		if s := e.waitSettled(); s.Actual >= s.Reserved {
			t.Fatalf("settlement %+v: want a refund", s)
		}
		e.clock.Advance(19 * time.Second)
		if resp, _ := e.post("/v1/chat/completions", alice, chatBody); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("after a refund, 1 s before the budget allows a failure: status %d, Retry-After %q; want 429, 1", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		e.clock.Advance(time.Second)
		if resp, _ := e.post("/v1/chat/completions", alice, chatBody); resp.StatusCode != http.StatusOK {
			t.Fatalf("20 s on, a good key: status %d, want 200", resp.StatusCode)
		}
		e.waitSettled()
		if resp, _ := e.post("/v1/chat/completions", "sk-wrong", chatBody); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("20 s on, one failure: status %d, want 401", resp.StatusCode)
		}
		if resp, _ := e.post("/v1/chat/completions", "sk-wrong", chatBody); resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("20 s on, a second failure: status %d, want 429", resp.StatusCode)
		}
		if calls := len(e.up.Calls()); calls != 2 {
			t.Errorf("the upstream got %d calls, want the 2 admitted", calls)
		}
	})
}

// TestAuthFailuresGroupIPv6By64: IPv6 clients are counted by their /64
// (one site picks any address in it): failures from addresses of one /64
// share a budget, another /64 has its own.
func TestAuthFailuresGroupIPv6By64(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, withOptions(func(o *proxy.Options) {
			o.UnknownKeys = proxy.RejectUnknownKeys
			o.AuthFailures = tokenlimit.TokenBucketLimit(2, 2, time.Minute)
			o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		}))
		from := func(addr, key string) int {
			resp, _ := e.sendWith("/v1/chat/completions", map[string]string{"Authorization": "Bearer " + key, "X-Forwarded-For": addr}, chatBody)
			return resp.StatusCode
		}
		for _, c := range []struct {
			addr, key string
			status    int
		}{
			{"2001:db8:7:1::1", "sk-wrong", http.StatusUnauthorized},
			{"2001:db8:7:1:aaaa::2", "sk-wrong", http.StatusUnauthorized},
			{"2001:db8:7:1::3", "sk-wrong", http.StatusTooManyRequests},
			{"2001:db8:7:1::4", alice, http.StatusTooManyRequests},
			{"2001:db8:7:2::1", "sk-wrong", http.StatusUnauthorized},
		} {
			if got := from(c.addr, c.key); got != c.status {
				t.Fatalf("from %s with %s: status %d, want %d", c.addr, c.key, got, c.status)
			}
		}
	})
}

// TestRefusedSecretIsNotAnUnknownKey: under DefaultPlanForUnknownKeys a key
// that is no one's is served under the default plan, but a secret of the
// plane's form that the plane refuses (unknown, revoked) is 401: it is
// never taken for a key that nobody made.
func TestRefusedSecretIsNotAnUnknownKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "memory", withPlane())
	if resp, _ := e.post("/v1/chat/completions", "sk-nobody", chatBody); resp.StatusCode != http.StatusOK {
		t.Fatalf("an unknown key under the default plan: status %d, want 200", resp.StatusCode)
	}
	e.waitSettled()
	resp, body := e.post("/v1/chat/completions", plane.SecretPrefix+strings.Repeat("0", 64), chatBody)
	if resp.StatusCode != http.StatusUnauthorized || errorCode(body) != "invalid_api_key" {
		t.Fatalf("a secret the plane does not know: status %d, body %s; want 401 invalid_api_key", resp.StatusCode, body)
	}
}
