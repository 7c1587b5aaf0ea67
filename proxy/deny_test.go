package proxy_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/plane"
)

// TestTokenLimit429: bob's bucket of 2,000 tokens refills 2,000/min, 30ms a
// token. After a call that used 1,990, chatBody's estimate of 109 is 99
// short: 2.97s. The 429 says so in OpenAI's format; once the clock has moved
// that far the same call passes.
func TestTokenLimit429(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store)
		e.up.set(func(b *behaviour) { b.Prompt = 1981 })
		if resp, _ := e.post("/v1/chat/completions", bob, chatBody); resp.StatusCode != http.StatusOK {
			t.Fatalf("first call: status %d", resp.StatusCode)
		}
		e.waitSettled()
		resp, body := e.post("/v1/chat/completions", bob, chatBody)
		want := `{"error":{"message":"Rate limit reached for plan \"free\" limit \"tokens-per-key-model\" on tokens: Limit 2000, Used 1990, Requested 109. Please try again in 2.97s.",` +
			`"type":"tokens","param":null,"code":"rate_limit_exceeded"}}` + "\n"
		if resp.StatusCode != http.StatusTooManyRequests || body != want {
			t.Fatalf("status %d, body %s; want 429, %s", resp.StatusCode, body, want)
		}
		assertHeaders(t, resp.Header, map[string]string{
			"Content-Type": "application/json", "Retry-After": "3", "Retry-After-Ms": "2970",
			"X-Ratelimit-Limit-Tokens": "2000", "X-Ratelimit-Remaining-Tokens": "10", "X-Ratelimit-Reset-Tokens": "59.7s",
			"X-Ratelimit-Limit-Requests": "60", "X-Ratelimit-Remaining-Requests": "59", "X-Ratelimit-Reset-Requests": "1s",
		})
		if n := len(e.up.Calls()); n != 1 {
			t.Errorf("the upstream got %d calls, want 1: a denied call is not forwarded", n)
		}
		e.noMoreSettlements()
		assertUsed(t, e.used(bob, "gpt-4o"), map[string]int64{"tokens-per-key-model": 1990, "requests-per-key": 1, "in-flight-per-key": 0})

		e.clock.Advance(2970 * time.Millisecond)
		e.up.set(func(b *behaviour) { b.Prompt = 31 })
		if resp, _ := e.post("/v1/chat/completions", bob, chatBody); resp.StatusCode != http.StatusOK {
			t.Errorf("after Retry-After-Ms: status %d, want 200", resp.StatusCode)
		}
	})
}

// TestRequestTooLarge: a call whose estimate exceeds the bucket can never
// pass: 429 with x-should-retry: false and no Retry-After.
func TestRequestTooLarge(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store)
		resp, body := e.post("/v1/chat/completions", bob, strings.Replace(chatBody, `"max_tokens":100`, `"max_tokens":5000`, 1))
		want := `{"error":{"message":"Request too large for plan \"free\" limit \"tokens-per-key-model\" on tokens: Limit 2000, Requested 5009. The input or output tokens must be reduced in order to run successfully.",` +
			`"type":"tokens","param":null,"code":"rate_limit_exceeded"}}` + "\n"
		if resp.StatusCode != http.StatusTooManyRequests || body != want {
			t.Fatalf("status %d, body %s; want 429, %s", resp.StatusCode, body, want)
		}
		assertHeaders(t, resp.Header, map[string]string{"X-Should-Retry": "false", "Retry-After": "", "Retry-After-Ms": ""})
	})
}

// TestRequestLimit429: 60 requests a minute per key, whatever they cost.
func TestRequestLimit429(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store)
		for i := range 60 {
			if resp, _ := e.get("/v1/models", alice); resp.StatusCode != http.StatusOK {
				t.Fatalf("request %d: status %d", i, resp.StatusCode)
			}
			e.waitSettled()
		}
		resp, body := e.post("/v1/chat/completions", alice, chatBody)
		want := `{"error":{"message":"Rate limit reached for plan \"pro\" limit \"requests-per-key\" on requests: Limit 60, Used 60, Requested 1. Please try again in 1s.",` +
			`"type":"requests","param":null,"code":"rate_limit_exceeded"}}` + "\n"
		if resp.StatusCode != http.StatusTooManyRequests || body != want {
			t.Fatalf("status %d, body %s; want 429, %s", resp.StatusCode, body, want)
		}
		assertHeaders(t, resp.Header, map[string]string{
			"Retry-After": "1", "Retry-After-Ms": "1000",
			"X-Ratelimit-Limit-Requests": "60", "X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "1m0s",
			"X-Ratelimit-Limit-Tokens": "10000", "X-Ratelimit-Remaining-Tokens": "10000", "X-Ratelimit-Reset-Tokens": "0s",
		})
	})
}

// TestStoreFailing: while the store fails, a limit that fails closed makes
// calls 503 (never forwarded); limits that fail open let them through on
// the local budget.
func TestStoreFailing(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		var closed, open testkit.FaultStore
		failClosed := strings.Replace(exampleConfig, "    cost: request\n", "    cost: request\n    failure_mode: closed\n", 1)
		ec := newEnv(t, store, withConfig(failClosed), withStore(func(s tokenlimit.Store) tokenlimit.Store { closed.Store = s; return &closed }))
		closed.Set(testkit.Down)
		resp, body := ec.post("/v1/chat/completions", alice, chatBody)
		want := `{"error":{"message":"Rate limiting is unavailable right now (a limit that fails closed could not be decided). Please retry.",` +
			`"type":"server_error","param":null,"code":"rate_limiter_unavailable"}}` + "\n"
		if resp.StatusCode != http.StatusServiceUnavailable || body != want || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("fail closed: status %d, Retry-After %q, body %s; want 503, 1, %s", resp.StatusCode, resp.Header.Get("Retry-After"), body, want)
		}
		if n := len(ec.up.Calls()); n != 0 {
			t.Errorf("fail closed: the upstream got %d calls, want none", n)
		}

		eo := newEnv(t, store, withStore(func(s tokenlimit.Store) tokenlimit.Store { open.Store = s; return &open }))
		open.Set(testkit.Down)
		if resp, _ := eo.post("/v1/chat/completions", alice, chatBody); resp.StatusCode != http.StatusOK {
			t.Errorf("fail open: status %d, want 200", resp.StatusCode)
		}
		eo.waitSettled()
	})
}

// TestHugeParamsRejected: n and the reply maximum are checked before they
// are multiplied, so that no request overflows its estimate (n × max_tokens
// wrapped to a negative cost, which reserved nothing).
func TestHugeParamsRejected(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store)
		for _, tc := range []struct{ body, param, limit, got string }{
			{`{"model":"gpt-4o","n":129,"max_tokens":1,"messages":[]}`, "n", "128", "129"},
			{`{"model":"gpt-4o","n":128,"max_tokens":72057594037927936,"messages":[]}`, "max_tokens", "1099511627776", "72057594037927936"},
			{`{"model":"gpt-4o","max_completion_tokens":9223372036854775807,"messages":[]}`, "max_completion_tokens", "1099511627776", "9223372036854775807"},
			{`{"model":"gpt-4o","max_output_tokens":1099511627777,"input":"hi"}`, "max_output_tokens", "1099511627776", "1099511627777"},
		} {
			path := "/v1/chat/completions"
			if tc.param == "max_output_tokens" {
				path = "/v1/responses"
			}
			resp, body := e.post(path, alice, tc.body)
			want := `{"error":{"message":"Invalid '` + tc.param + `': integer above maximum value. Expected a value \u003c= ` + tc.limit + `, but got ` + tc.got + ` instead.",` +
				`"type":"invalid_request_error","param":"` + tc.param + `","code":"integer_above_max_value"}}` + "\n"
			if resp.StatusCode != http.StatusBadRequest || body != want {
				t.Errorf("%s: status %d, body %s; want 400, %s", tc.body, resp.StatusCode, body, want)
			}
		}
		if n := len(e.up.Calls()); n != 0 {
			t.Errorf("the upstream got %d calls, want none", n)
		}
	})
}

// TestTeamBudgetDenialNamesTheTeam: a plane key whose team has spent its
// monthly budget is refused in each provider's shape with a message that
// names the team, the budget, what is used and when it resets.
func TestTeamBudgetDenialNamesTheTeam(t *testing.T) {
	t.Parallel()
	const yml = `
prices:
  gpt-4o: {input: 2.50, cached_input: 1.25, output: 10.00}
  claude-sonnet-4*: {input: 3, cached_input: 0.30, output: 15}
limits:
  - {name: requests-per-key, key: [api_key], algorithm: fixed_window, limit: 100/min, cost: 1}
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, withConfig(yml), withPlane())
		ctx := context.Background()
		if _, err := e.plane.CreateTeam(ctx, plane.Spec{Name: "acme", Limits: json.RawMessage(
			`[{"name": "usd-monthly", "unit": "usd", "algorithm": "fixed_window", "limit": "50.00/day", "calendar": "month"}]`)}); err != nil {
			t.Fatal(err)
		}
		_, secret, err := e.plane.CreateKey(ctx, plane.Spec{Name: "laptop", Team: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		// 5,000,000 output tokens at $10/M: the team's $50.00, all of it.
		e.up.set(func(b *behaviour) { b.Prompt, b.Completion = 0, 5_000_000 })
		if resp, body := e.post("/v1/chat/completions", secret, `{"model":"gpt-4o","max_tokens":1000,"messages":[]}`); resp.StatusCode != http.StatusOK {
			t.Fatalf("first call: %d %s", resp.StatusCode, body)
		}
		if s := e.waitSettled(); s.Spend != 50_000_000 {
			t.Fatalf("first call spent %d µ$, want 50,000,000", s.Spend)
		}
		const says = `team \"acme\" budget \"usd-monthly\" exhausted: $50.00 of $50.00 used, resets 2026-02-01T00:00:00Z (in 398h30m0s); this request needs $`
		resp, body := e.post("/v1/chat/completions", secret, chatBody)
		if resp.StatusCode != http.StatusTooManyRequests || !strings.HasPrefix(body, `{"error":{"message":"`+says) ||
			!strings.HasSuffix(body, `, so retrying sooner will not succeed.","type":"usd","param":null,"code":"insufficient_quota"}}`+"\n") {
			t.Errorf("OpenAI: status %d, body %s; want 429 saying %s", resp.StatusCode, body, says)
		}
		resp, body = e.sendWith("/v1/messages", map[string]string{"X-Api-Key": secret, "Anthropic-Version": "2023-06-01"}, msgBody)
		if resp.StatusCode != http.StatusTooManyRequests || !strings.HasPrefix(body, `{"type":"error","error":{"type":"rate_limit_error","message":"`+says) {
			t.Errorf("Anthropic: status %d, body %s; want 429 saying %s", resp.StatusCode, body, says)
		}
		e.noMoreSettlements()
	})
}
