package proxy_test

import (
	"log/slog"
	"strconv"
	"testing"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/proxy"
)

// splitConfig limits one key as providers do: input tokens per minute
// without cached reads (Anthropic's ITPM), output tokens per minute, and a
// CEL cost expression weighting output tokens by model.
const splitConfig = `
api_keys:
  sk-split-0001: {user: ann}
limits:
  - name: itpm
    key: [api_key]
    algorithm: token_bucket
    capacity: 10000
    refill: 10000/min
    cost: uncached_input_tokens
  - name: otpm
    key: [api_key]
    algorithm: token_bucket
    capacity: 2000
    refill: 2000/min
    cost: output_tokens
  - name: weighted
    key: [api_key]
    algorithm: fixed_window
    limit: 100000/min
    cost: {expr: 'model.startsWith("claude") ? input_tokens + 5 * output_tokens : input_tokens + 4 * output_tokens'}
`

const splitKey = "sk-split-0001"

// TestSplitLimitsWithSDKs: the official SDKs call through the proxy, whose
// fake upstream reports every token class (Anthropic: 31 input tokens
// beside 5 written to and 10 read from the cache, 9 output; OpenAI: 31
// input of which 10 cached, 9 output of which 4 reasoning), on both stores.
// The input-tokens limit settles to the uncached input, the output-tokens
// limit to the output, the expression to its value on the real usage; the
// SDKs see Anthropic's input- and output-tokens headers (OpenAI's tokens
// headers) from those limits, after the settlement. A stream settles the
// same.
func TestSplitLimitsWithSDKs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, script, model string
		want                map[string]int64
		headers             map[string]string
	}{
		{"anthropic", anthropicSDK(t), "claude-sonnet-4-5",
			map[string]int64{"itpm": 46 - 10, "otpm": 9, "weighted": 46 + 5*9},
			map[string]string{
				"anthropic-ratelimit-input-tokens-limit": "10000", "anthropic-ratelimit-input-tokens-remaining": strconv.Itoa(10000 - 36),
				"anthropic-ratelimit-output-tokens-limit": "2000", "anthropic-ratelimit-output-tokens-remaining": strconv.Itoa(2000 - 9),
				"anthropic-ratelimit-tokens-limit": "2000", "anthropic-ratelimit-tokens-remaining": strconv.Itoa(2000 - 9),
			}},
		{"openai", sdkScript(t, "openai-sdk", "openai"), "gpt-4o",
			map[string]int64{"itpm": 31 - 10, "otpm": 9, "weighted": 31 + 4*9},
			map[string]string{"x-ratelimit-limit-tokens": "2000", "x-ratelimit-remaining-tokens": strconv.Itoa(2000 - 9)}},
	} {
		for _, scenario := range []string{"headers", "stream"} {
			t.Run(tt.name+"/"+scenario, func(t *testing.T) {
				t.Parallel()
				testkit.EachStore(t, func(t *testing.T, store string) {
					var logs testkit.Buffer
					e := newEnv(t, store, withConfig(splitConfig), withOptions(func(o *proxy.Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) }))
					e.up.set(func(b *behaviour) { b.CacheWrite, b.CacheRead, b.Reasoning = 5, 10, 4 })
					r := runSDK(t, e, tt.script, scenario, splitKey, 0)
					if r.Status != 0 || r.Text == "" {
						t.Fatalf("the SDK's call failed: %+v", r)
					}
					s := e.waitSettled()
					if s.Basis != proxy.ByUsage {
						t.Fatalf("settled %+v, want by usage", s)
					}
					used := e.used(splitKey, tt.model)
					for name, want := range tt.want {
						if used[name] != want {
							t.Errorf("%s holds %d, want %d (all: %v)", name, used[name], want, used)
						}
					}
					if scenario == "stream" {
						return // its headers went out before its usage
					}
					for name, want := range tt.headers {
						if got := r.Headers[name]; got != want {
							t.Errorf("the SDK saw %s: %q, want %q (all: %v)", name, got, want, r.Headers)
						}
					}
					if tt.name == "openai" {
						for _, name := range []string{"anthropic-ratelimit-input-tokens-limit", "x-ratelimit-limit-input-tokens"} {
							if v, ok := r.Headers[name]; ok {
								t.Errorf("an OpenAI call got %s: %q", name, v)
							}
						}
					}
				})
			})
		}
	}
}
