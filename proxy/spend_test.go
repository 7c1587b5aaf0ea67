package proxy_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/proxy"
)

// spendConfig prices two models (dollars per million tokens) and gives each
// api key $5.00 a day.
const spendConfig = `
prices:
  gpt-4o: {input: 2.50, cached_input: 1.25, output: 10.00}
  claude-sonnet-4*: {input: 3, cached_input: 0.30, output: 15}
limits:
  - {name: spend-per-key, key: [api_key], unit: usd, algorithm: fixed_window, limit: 5.00/day}
  - {name: tokens-per-key, key: [api_key], algorithm: token_bucket, capacity: 100000, refill: 100000/min}
api_keys:
  sk-demo-alice-0001: {user: alice}
`

// TestSpendSettledToTheMicroDollar: each API, plain and streamed, reserves
// the price of its estimate and settles to the exact price of its usage, in
// micro-dollars, on both stores; every answer shows the spend left.
//
// The upstream reports 31 input tokens of which 10 cached (chat and
// Responses) or, for Messages, 31 input tokens beside 5 written to and 100
// read from the cache; 9 output tokens. So:
//
//	gpt-4o:   21 × $2.50/M + 10 × $1.25/M + 9 × $10/M = 52.5 + 12.5 + 90 = 155 µ$
//	claude:   (31+5) × $3/M + 100 × $0.30/M + 9 × $15/M = 108 + 30 + 135 = 273 µ$
func TestSpendSettledToTheMicroDollar(t *testing.T) {
	t.Parallel()
	chat := `{"model":"gpt-4o","max_tokens":100,"messages":[{"role":"user","content":"Say hello"}]}`
	responses := `{"model":"gpt-4o","max_output_tokens":100,"input":"Say hello"}`
	streamed := func(body string) string { return strings.Replace(body, `{`, `{"stream":true,`, 1) }
	for _, tt := range []struct {
		name, path, body string
		reserved, spend  int64
	}{
		// chatPrompt 9 × $2.50/M + 100 × $10/M = 1022.5, rounded up.
		{"chat", "/v1/chat/completions", chat, 1023, 155},
		{"streamed chat", "/v1/chat/completions", streamed(chat), 1023, 155},
		{"responses", "/v1/responses", responses, 1023, 155},
		{"streamed responses", "/v1/responses", streamed(responses), 1023, 155},
		{"messages", "/v1/messages", msgBody, -1, 273},
		{"streamed messages", "/v1/messages", streamed(msgBody), -1, 273},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			testkit.EachStore(t, func(t *testing.T, store string) {
				e := newEnv(t, store, withConfig(spendConfig))
				e.up.set(func(b *behaviour) { b.CacheWrite, b.CacheRead = 5, 10 })
				if tt.path == "/v1/messages" {
					e.up.set(func(b *behaviour) { b.CacheRead = 100 })
				}
				resp := e.send(context.Background(), http.MethodPost, tt.path, alice, tt.body)
				_, body := e.readAll(resp)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d: %s", resp.StatusCode, body)
				}
				s := e.waitSettled()
				reserved := tt.reserved
				if reserved < 0 { // msgPrompt × $3/M + 100 × $15/M
					reserved = (msgPrompt(t)*3_000_000 + 100*15_000_000 + 999_999) / 1_000_000
				}
				if s.Spend != tt.spend || s.ReservedSpend != reserved || s.Basis != proxy.ByUsage {
					t.Errorf("settlement %+v, want %d µ$ reserved, %d µ$ spent by usage", s, reserved, tt.spend)
				}
				if got := e.used(alice, "")["spend-per-key"]; got != tt.spend {
					t.Errorf("the store holds %d µ$ spent, want %d", got, tt.spend)
				}
				if !strings.Contains(tt.body, `"stream"`) {
					assertHeaders(t, resp.Header, map[string]string{
						"X-Ratelimit-Limit-Usd": "5.00", "X-Ratelimit-Remaining-Usd": formatMicro(5_000_000 - tt.spend),
					})
				} else if resp.Header.Get("X-Ratelimit-Remaining-Usd") != formatMicro(5_000_000-reserved) {
					t.Errorf("a stream's headers show %s left, want the reservation's %s", resp.Header.Get("X-Ratelimit-Remaining-Usd"), formatMicro(5_000_000-reserved))
				}
			})
		})
	}
}

// formatMicro writes µ$ below $5 as the headers do: "4.999845".
func formatMicro(micro int64) string {
	s := strings.TrimRight(itoa(1_000_000 + micro%1_000_000)[1:], "0")
	for len(s) < 2 {
		s += "0"
	}
	return itoa(micro/1_000_000) + "." + s
}

// TestSpendBudgetDenies: a key whose day's $5.00 is nearly spent is denied
// the next call with 429, amounts in dollars; a model without a price is
// refused with 400 while a limit in usd applies, and served once a "*"
// entry prices it.
func TestSpendBudgetDenies(t *testing.T) {
	t.Parallel()
	spendOnly := strings.Replace(spendConfig, "  - {name: tokens-per-key, key: [api_key], algorithm: token_bucket, capacity: 100000, refill: 100000/min}\n", "", 1)
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, withConfig(spendOnly))
		// 499,000 output tokens at $10/M: $4.99 of the $5.00.
		e.up.set(func(b *behaviour) { b.Prompt, b.Completion = 0, 499_000 })
		if resp, body := e.post("/v1/chat/completions", alice, `{"model":"gpt-4o","max_tokens":1000,"messages":[]}`); resp.StatusCode != http.StatusOK {
			t.Fatalf("first call: %d %s", resp.StatusCode, body)
		}
		if s := e.waitSettled(); s.Spend != 4_990_000 {
			t.Fatalf("first call spent %d µ$, want 4,990,000", s.Spend)
		}
		e.up.set(func(b *behaviour) { b.Prompt, b.Completion = 31, 9 })
		// chatPrompt 9 × $2.50/M + 2000 × $10/M = 20022.5 µ$: more than the $0.01
		// left, until midnight: too long to retry.
		resp, body := e.post("/v1/chat/completions", alice, `{"model":"gpt-4o","max_tokens":2000,"messages":[{"role":"user","content":"Say hello"}]}`)
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body,
			`"message":"budget \"spend-per-key\" exhausted: $4.99 of $5.00 used, resets 2026-01-16T00:00:00Z (in 14h30m0s); this request needs $0.020023, `) ||
			resp.Header.Get("X-Ratelimit-Remaining-Usd") != "0.01" {
			t.Errorf("status %d, body %s, headers %v; want a 429 in dollars", resp.StatusCode, body, resp.Header)
		}

		resp, body = e.post("/v1/chat/completions", alice, `{"model":"mystery-1","max_tokens":10,"messages":[]}`)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `"code":"model_not_priced"`) {
			t.Errorf("unpriced model: status %d, body %s; want 400 model_not_priced", resp.StatusCode, body)
		}
		if n := len(e.up.Calls()); n != 1 {
			t.Errorf("the upstream got %d calls, want 1", n)
		}
	})
	e := newEnv(t, "memory", withConfig(strings.Replace(spendConfig, "prices:\n", "prices:\n  \"*\": {input: 1, output: 2}\n", 1)))
	e.up.set(func(b *behaviour) { b.Prompt, b.Completion = 1000, 1000 })
	if resp, body := e.post("/v1/chat/completions", alice, `{"model":"mystery-1","max_tokens":10,"messages":[]}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("default price: %d %s", resp.StatusCode, body)
	}
	if s := e.waitSettled(); s.Spend != 3000 {
		t.Errorf("priced by *: spent %d µ$, want 1000 × $1/M + 1000 × $2/M = 3000", s.Spend)
	}
}
