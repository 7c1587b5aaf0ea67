package proxy_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/proxy"
)

// TestTokenClasses: the usage of each API, plain and streamed, is split
// into input (cached or not), cached input, cache write, output and
// reasoning tokens, on both stores; the access log line carries them and
// the tokens charged. The upstream reports 31 input tokens of which 10
// cached and 9 output tokens of which 4 reasoning (chat, Responses), or
// for Messages 31 input tokens beside 5 written to and 10 read from the
// cache: 46 input tokens in all.
func TestTokenClasses(t *testing.T) {
	t.Parallel()
	chat := `{"model":"gpt-4o","max_tokens":100,"messages":[{"role":"user","content":"Say hello"}]}`
	responses := `{"model":"gpt-4o","max_output_tokens":100,"input":"Say hello"}`
	streamed := func(body string) string { return strings.Replace(body, `{`, `{"stream":true,`, 1) }
	for _, tt := range []struct {
		name, path, body string
		want             proxy.Settlement
	}{
		{"chat", "/v1/chat/completions", chat, proxy.Settlement{Actual: 40, Input: 31, Cached: 10, Output: 9, Reasoning: 4}},
		{"streamed chat", "/v1/chat/completions", streamed(chat), proxy.Settlement{Actual: 40, Input: 31, Cached: 10, Output: 9, Reasoning: 4}},
		{"responses", "/v1/responses", responses, proxy.Settlement{Actual: 40, Input: 31, Cached: 10, Output: 9, Reasoning: 4}},
		{"streamed responses", "/v1/responses", streamed(responses), proxy.Settlement{Actual: 40, Input: 31, Cached: 10, Output: 9, Reasoning: 4}},
		{"messages", "/v1/messages", msgBody, proxy.Settlement{Actual: 55, Input: 46, Cached: 10, CacheWrite: 5, Output: 9}},
		{"streamed messages", "/v1/messages", streamed(msgBody), proxy.Settlement{Actual: 55, Input: 46, Cached: 10, CacheWrite: 5, Output: 9}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			testkit.EachStore(t, func(t *testing.T, store string) {
				var logs testkit.Buffer
				e := newEnv(t, store, withOptions(func(o *proxy.Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) }))
				e.up.set(func(b *behaviour) { b.CacheWrite, b.CacheRead, b.Reasoning = 5, 10, 4 })
				if resp, body := e.post(tt.path, alice, tt.body); resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d: %s", resp.StatusCode, body)
				}
				s := e.waitSettled()
				w := tt.want
				if s.Actual != w.Actual || s.Input != w.Input || s.Cached != w.Cached || s.CacheWrite != w.CacheWrite || s.Output != w.Output ||
					s.Reasoning != w.Reasoning || s.Basis != proxy.ByUsage {
					t.Errorf("settled %+v, want %+v by usage", s, w)
				}
				var line map[string]any
				for _, l := range jsonLines(logs.String()) {
					if l["msg"] == "call" {
						line = l
					}
				}
				for field, v := range map[string]int64{"tokens": w.Actual, "input_tokens": w.Input, "cached_input_tokens": w.Cached,
					"cache_write_tokens": w.CacheWrite, "output_tokens": w.Output, "reasoning_tokens": w.Reasoning} {
					if line[field] != float64(v) {
						t.Errorf("access log %s = %v, want %d (line %v)", field, line[field], v, line)
					}
				}
			})
		})
	}
}

// TestTokenClassesClamped: a usage whose cached part is larger than its
// input (40 of 31) or whose reasoning is larger than its output is
// believed about the wholes: the parts are clamped to them, and counted in
// tokenlimit_proxy_usage_corrected_total{rule="clamped"}; a usage with a
// negative field is ignored and counted as rule="ignored".
func TestTokenClassesClamped(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := proxy.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, "memory", withOptions(func(o *proxy.Options) { o.Metrics = m }))
	e.up.set(func(b *behaviour) { b.CacheRead, b.Reasoning = 40, 50 })
	if resp, body := e.post("/v1/chat/completions", alice, chatBody); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if s := e.waitSettled(); s.Actual != 40 || s.Input != 31 || s.Cached != 31 || s.Output != 9 || s.Reasoning != 9 {
		t.Errorf("settled %+v, want 31 input all cached, 9 output all reasoning", s)
	}
	corrected := func(rule string) float64 {
		return testkit.Metric(t, reg, "tokenlimit_proxy_usage_corrected_total", "rule", rule)
	}
	if c, i := corrected("clamped"), corrected("ignored"); c != 1 || i != 0 {
		t.Errorf("usage corrected: clamped %v, ignored %v; want 1, 0", c, i)
	}
	e.up.set(func(b *behaviour) { b.CacheRead, b.Reasoning, b.Completion = 0, 0, -9 })
	if resp, body := e.post("/v1/chat/completions", alice, chatBody); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if s := e.waitSettled(); s.Basis != proxy.ByCount {
		t.Errorf("a negative usage settled %+v, want counted", s)
	}
	if c, i := corrected("clamped"), corrected("ignored"); c != 1 || i != 1 {
		t.Errorf("usage corrected: clamped %v, ignored %v; want 1, 1", c, i)
	}
}
