package proxy_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/proxy"
)

// jsonLines decodes the JSON objects of a log, one a line; other lines
// are skipped.
func jsonLines(log string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// TestObservability: settled calls count their tokens and spend under their
// prices entry, or "other" for a model without a price; upstream answers
// are counted by API and status and timed; each admitted call writes one
// access-log line with its request id, estimate, usage and limits.
func TestObservability(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := proxy.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	var logs testkit.Buffer
	e := newEnv(t, "memory", withConfig("prices:\n  gpt-4o: {input: 2.50, output: 10}\n"+exampleConfig), withOptions(func(o *proxy.Options) {
		o.Metrics, o.Logger = m, slog.New(slog.NewJSONHandler(&logs, nil))
	}))
	first, _ := e.post("/v1/chat/completions", alice, chatBody)
	e.waitSettled()
	e.post("/v1/chat/completions", alice, strings.Replace(chatBody, "gpt-4o", "mystery-1", 1))
	e.waitSettled()
	e.up.set(func(b *behaviour) { b.Status = http.StatusInternalServerError })
	e.post("/v1/chat/completions", alice, chatBody)
	e.waitSettled()
	e.up.set(func(b *behaviour) { b.Status = 0 })
	for range 4 {
		e.post("/v1/chat/completions", alice, chatBody)
		e.waitSettled()
	}
	if resp, _ := e.post("/v1/chat/completions", bob, strings.Replace(chatBody, `"max_tokens":100`, `"max_tokens":5000`, 1)); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a call above bob's bucket: status %d, want 429", resp.StatusCode)
	}

	for _, tt := range []struct {
		name   string
		labels []string // name, value pairs
		want   float64
	}{
		{"tokenlimit_proxy_tokens_total", []string{"model", "gpt-4o", "direction", "input", "class", "uncached"}, 5 * 31},
		{"tokenlimit_proxy_tokens_total", []string{"model", "gpt-4o", "direction", "input", "class", "cached"}, 0},
		{"tokenlimit_proxy_tokens_total", []string{"model", "gpt-4o", "direction", "output", "class", "text"}, 5 * 9},
		{"tokenlimit_proxy_tokens_total", []string{"model", "other", "direction", "input", "class", "uncached"}, 31},
		// 31 × $2.50/M + 9 × $10/M = 167.5 µ$, rounded up, five times:
		// exactly 0.00084, where a float sum of 0.000168s gives
		// 0.0008399999999999999.
		{"tokenlimit_proxy_spend_usd_total", []string{"model", "gpt-4o"}, 0.00084},
		{"tokenlimit_proxy_spend_usd_total", []string{"model", "other"}, 0},
		{"tokenlimit_proxy_upstream_responses_total", []string{"api", "chat", "status", "200"}, 6},
		{"tokenlimit_proxy_upstream_responses_total", []string{"api", "chat", "status", "500"}, 1},
		{"tokenlimit_proxy_upstream_seconds", []string{"api", "chat"}, 7}, // the histogram's count
	} {
		if got := testkit.Metric(t, reg, tt.name, tt.labels...); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}

	var calls, denied []map[string]any
	for _, l := range jsonLines(logs.String()) {
		switch l["msg"] {
		case "call":
			calls = append(calls, l)
		case "denied":
			denied = append(denied, l)
		}
	}
	if len(calls) != 7 {
		t.Fatalf("%d access-log lines, want 7: %v", len(calls), jsonLines(logs.String()))
	}
	if len(denied) != 1 || denied[0]["level"] != "INFO" || denied[0]["limit"] != "tokens-per-key-model" || strings.Contains(toJSON(denied[0]), bob) {
		t.Errorf("denied lines %v, want one at info naming the limit, the key redacted", denied)
	}
	c := calls[0]
	if c["request_id"] != first.Header.Get("X-Tokenlimit-Request-Id") || c["api"] != "chat" || c["status"] != float64(200) ||
		c["estimate_tokens"] != float64(chatPrompt+100) || c["tokens"] != float64(40) || c["input_tokens"] != float64(31) ||
		c["usd"] != "0.000168" || c["basis"] != "usage" || !strings.Contains(toJSON(c["limits"]), "tokens-per-key-model") ||
		strings.Contains(toJSON(c), alice) {
		t.Errorf("access log %v", c)
	}
	if calls[2]["status"] != float64(500) || calls[2]["basis"] != "refunded" {
		t.Errorf("refunded call's line %v", calls[2])
	}
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
