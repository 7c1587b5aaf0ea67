package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/proxy"
)

// The official Anthropic SDK for TypeScript (@anthropic-ai/sdk, pinned in
// testdata/anthropic-sdk/package.json, installed there by scripts/test.sh)
// is the caller in these tests, run by node: testdata/anthropic-sdk/drive.mjs
// makes one call and prints what the SDK returned or raised.

// sdkResult is what a drive.mjs prints: the reply, or the error raised,
// and how long the call took (retries included).
type sdkResult struct {
	Text  string `json:"text"`
	Usage struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	} `json:"usage"`
	StopReason   string  `json:"stopReason"`
	FinishReason string  `json:"finishReason"`
	Class        string  `json:"class"`
	RateLimit    bool    `json:"rateLimit"`
	Status       int     `json:"status"`
	Type         string  `json:"type"`
	Code         string  `json:"code"`
	Message      string  `json:"message"`
	RetryAfter   *string `json:"retryAfter"`
	ShouldRetry  *string `json:"shouldRetry"`
	// Headers are the response's rate-limit headers (scenario headers).
	Headers   map[string]string `json:"headers"`
	ElapsedMs float64           `json:"elapsedMs"`
}

// defaultRetries runs an SDK with its default retries (2 for both).
const defaultRetries = -1

// sdkScript returns the path of dir's drive.mjs once node and the SDK
// (pkg, installed in dir) are there; without them the test fails under
// CI=true and is skipped, loudly, elsewhere.
func sdkScript(t *testing.T, dir, pkg string) string {
	t.Helper()
	dir, _ = filepath.Abs(filepath.Join("testdata", dir))
	_, nodeErr := exec.LookPath("node")
	_, sdkErr := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json"))
	if nodeErr != nil || sdkErr != nil {
		msg := "node or " + pkg + " missing (scripts/test.sh installs them: npm ci in " + dir + ")"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPED: " + msg)
	}
	return filepath.Join(dir, "drive.mjs")
}

// anthropicSDK returns the path of testdata/anthropic-sdk/drive.mjs.
func anthropicSDK(t *testing.T) string { return sdkScript(t, "anthropic-sdk", "@anthropic-ai/sdk") }

// runSDK runs one scenario of script against e with key, with retries
// (defaultRetries: the SDK's default).
func runSDK(t *testing.T, e *env, script, scenario, key string, retries int) sdkResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script, scenario)
	cmd.Env = append(os.Environ(), "BASE_URL="+e.srv.URL, "API_KEY="+key, "MAX_RETRIES=")
	if retries != defaultRetries {
		cmd.Env = append(cmd.Env, "MAX_RETRIES="+strconv.Itoa(retries))
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s %s: %v\n%s", script, scenario, err, stderr.String())
	}
	var r sdkResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("node %s %s printed %q: %v", script, scenario, out, err)
	}
	return r
}

func TestAnthropicSDK(t *testing.T) {
	t.Parallel()
	script := anthropicSDK(t)
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store)
		for _, scenario := range []string{"plain", "stream"} {
			r := runSDK(t, e, script, scenario, alice, 0)
			if r.Text != "Hello there, friend!" || r.Usage.InputTokens != 31 || r.Usage.OutputTokens != 9 {
				t.Errorf("%s: %+v, want the upstream's reply and usage", scenario, r)
			}
			if s := e.waitSettled(); s.Kind != proxy.Messages || s.Reserved != msgPrompt(t)+100 || s.Actual != 40 || s.Basis != proxy.ByUsage {
				t.Errorf("%s: settlement %+v, want %d reserved, 40 by usage", scenario, s, msgPrompt(t)+100)
			}
		}
		assertUsed(t, e.used(alice, "claude-sonnet-4-5"), map[string]int64{"tokens-per-key-model": 80, "requests-per-key": 2, "in-flight-per-key": 0})
	})
}

// sdkAttempts records the calls reaching the proxy; on a 429 it drops
// retry-after-ms, so that the SDK has only retry-after (seconds) to go by,
// and, if advance is set, moves the service's fake clock that far, as real
// time does while the SDK waits.
type sdkAttempts struct {
	mu      sync.Mutex
	advance bool
	at      []time.Time
	codes   []int
	wait    time.Duration
}

func (a *sdkAttempts) wrap(clk *testkit.Clock) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			a.mu.Lock()
			a.at = append(a.at, time.Now())
			a.mu.Unlock()
			next.ServeHTTP(&retryAfterOnly{ResponseWriter: w, a: a, clk: clk}, r)
		})
	}
}

type retryAfterOnly struct {
	http.ResponseWriter
	a   *sdkAttempts
	clk *testkit.Clock
}

func (w *retryAfterOnly) WriteHeader(status int) {
	w.a.mu.Lock()
	w.a.codes = append(w.a.codes, status)
	if status == http.StatusTooManyRequests {
		w.Header().Del("Retry-After-Ms")
		secs, _ := strconv.Atoi(w.Header().Get("Retry-After"))
		w.a.wait = time.Duration(secs) * time.Second
		if w.a.advance {
			w.clk.Advance(w.a.wait)
		}
	}
	w.a.mu.Unlock()
	w.ResponseWriter.WriteHeader(status)
}

func (w *retryAfterOnly) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// TestAnthropicSDKRateLimit: bob's bucket is one token short of the call's
// estimate. Without retries the SDK raises its RateLimitError with our
// message and retry-after; with them it waits what retry-after says (the
// attempts are at least that far apart) and its retry passes.
func TestAnthropicSDKRateLimit(t *testing.T) {
	t.Parallel()
	script := anthropicSDK(t)
	testkit.EachStore(t, func(t *testing.T, store string) {
		var a sdkAttempts
		var clk atomic.Pointer[testkit.Clock] // the env's, once it is made
		e := newEnv(t, store, withHandler(func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.wrap(clk.Load())(next).ServeHTTP(w, r) })
		}))
		clk.Store(e.clock)
		estimate := msgPrompt(t) + 100
		e.up.set(func(b *behaviour) { b.Prompt = 2000 - (estimate - 1) - 9 })
		if r := runSDK(t, e, script, "plain", bob, 0); r.Text == "" {
			t.Fatalf("first call: %+v", r)
		}
		e.waitSettled()
		e.up.set(func(b *behaviour) { b.Prompt = 31 })

		r := runSDK(t, e, script, "error", bob, 0)
		if !r.RateLimit || r.Class != "RateLimitError" || r.Status != 429 || r.Type != "rate_limit_error" || r.RetryAfter == nil || *r.RetryAfter != "1" ||
			r.Message != "Rate limit reached for plan \"free\" limit \"tokens-per-key-model\" on tokens: Limit 2000, Used "+itoa(2000-estimate+1)+", Requested "+itoa(estimate)+". Please try again in 30ms." {
			t.Fatalf("without retries: %+v, want our 429 as a RateLimitError", r)
		}
		a.mu.Lock()
		a.at, a.codes, a.advance = nil, nil, true
		a.mu.Unlock()
		if r := runSDK(t, e, script, "plain", bob, 2); r.Text != "Hello there, friend!" {
			t.Fatalf("with retries: %+v", r)
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if len(a.codes) != 2 || a.codes[0] != 429 || a.codes[1] != 200 || a.wait != time.Second {
			t.Fatalf("attempts %v, wait %v; want a 429 asking for 1s, then a 200", a.codes, a.wait)
		}
		if gap := a.at[1].Sub(a.at[0]); gap < a.wait {
			t.Errorf("the SDK retried after %v, before the %v retry-after asked for", gap, a.wait)
		}
		e.waitSettled()
	})
}
