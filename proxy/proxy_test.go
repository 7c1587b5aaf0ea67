package proxy_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/proxy"
)

const chatBody = `{"model":"gpt-4o","max_tokens":100,"messages":[{"role":"user","content":"Say hello"}]}`

// The upstream's answer to chatBody, as the fake upstream writes it.
const chatReply = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"Hello there, friend!","refusal":null},"logprobs":null,"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":31,"completion_tokens":9,"total_tokens":40}}`

// chatPrompt is chatBody's prompt counted like OpenAI's cookbook: 3 to prime
// the reply, 3 for the message, "user" 1, "Say hello" 2.
const chatPrompt = 9

func TestChatSettlesToUsageBeforeHeaders(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store)
		resp, body := e.post("/v1/chat/completions", alice, chatBody)
		if resp.StatusCode != http.StatusOK || body != chatReply {
			t.Fatalf("status %d, body %s; want 200 and the upstream's body", resp.StatusCode, body)
		}
		s := e.waitSettled()
		want := proxy.Settlement{RequestID: resp.Header.Get("X-Tokenlimit-Request-Id"), Kind: proxy.Chat, Model: "gpt-4o",
			Reserved: chatPrompt + 100, Actual: 40, Input: 31, Output: 9, Basis: proxy.ByUsage}
		if s != want {
			t.Errorf("settlement %+v, want %+v", s, want)
		}
		// The remaining tokens already reflect the real cost, 40: the
		// bucket refills 10,000/min, 6ms a token.
		assertHeaders(t, resp.Header, map[string]string{
			"X-Ratelimit-Limit-Tokens": "10000", "X-Ratelimit-Remaining-Tokens": "9960", "X-Ratelimit-Reset-Tokens": "240ms",
			"X-Ratelimit-Limit-Requests": "60", "X-Ratelimit-Remaining-Requests": "59", "X-Ratelimit-Reset-Requests": "1s",
		})
		assertUsed(t, e.used(alice, "gpt-4o"), map[string]int64{
			"tokens-per-key-model": 40, "requests-per-key": 1, "in-flight-per-key": 0,
			"plan-pro-daily": 40, "plan-pro-monthly": 40,
		})
		calls := e.up.Calls()
		if len(calls) != 1 || calls[0].Authorization != "Bearer "+alice || calls[0].Body["stream_options"] != nil {
			t.Errorf("upstream calls %+v, want one with the client's key and body", calls)
		}
	})
}

func TestStreamPassesChunksAtOnceAndStripsTheUsageItAdded(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store)
		gate := make(chan struct{})
		e.up.set(func(b *behaviour) { b.Gate = gate })
		resp := e.send(context.Background(), http.MethodPost, "/v1/chat/completions", alice,
			`{"model":"gpt-4o","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"Say hello"}]}`)
		defer resp.Body.Close()
		// The headers of a stream show the reservation: 9 + 100.
		assertHeaders(t, resp.Header, map[string]string{
			"Content-Type": "text/event-stream; charset=utf-8", "X-Ratelimit-Remaining-Tokens": "9891", "X-Ratelimit-Remaining-Requests": "59",
		})
		// The first content chunk arrives while the upstream is still held
		// at the gate: nothing is buffered.
		br := bufio.NewReader(resp.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the stream before the gate opened: %v", err)
			}
			if strings.Contains(line, `"content":"Hello"`) {
				break
			}
		}
		close(gate)
		rest, err := sseEvents(br)
		if err != nil {
			t.Fatal(err)
		}
		if len(rest) != 6 || rest[5] != "[DONE]" {
			t.Fatalf("after the first chunk: %q, want 4 more words, the finish chunk and [DONE]", rest)
		}
		for _, ev := range rest {
			if strings.Contains(ev, `"choices":[]`) || strings.Contains(ev, `"total_tokens"`) {
				t.Errorf("the usage chunk the client did not ask for reached it: %s", ev)
			}
		}
		s := e.waitSettled()
		if s.Actual != 40 || s.Basis != proxy.ByUsage || s.Reserved != chatPrompt+100 {
			t.Errorf("settlement %+v, want 40 tokens by usage", s)
		}
		calls := e.up.Calls()
		if opts, _ := calls[0].Body["stream_options"].(map[string]any); opts["include_usage"] != true {
			t.Errorf("upstream got stream_options %v, want include_usage true", calls[0].Body["stream_options"])
		}
		assertUsed(t, e.used(alice, "gpt-4o"), map[string]int64{"tokens-per-key-model": 40, "requests-per-key": 1, "in-flight-per-key": 0})
	})
}

func assertHeaders(t *testing.T, h http.Header, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
}

func assertUsed(t *testing.T, got, want map[string]int64) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s holds %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}

func TestStreamKeepsTheUsageChunkTheClientAskedFor(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store)
		resp, body := e.post("/v1/chat/completions", alice,
			`{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"max_tokens":100,"messages":[{"role":"user","content":"Say hello"}]}`)
		events, _ := sseEvents(strings.NewReader(body))
		if resp.StatusCode != http.StatusOK || len(events) != 9 || !strings.Contains(events[7], `"choices":[],"usage":{"prompt_tokens":31,"completion_tokens":9,"total_tokens":40}`) {
			t.Fatalf("status %d, events %q; want 9 events, the usage chunk before [DONE]", resp.StatusCode, events)
		}
		if s := e.waitSettled(); s.Actual != 40 || s.Basis != proxy.ByUsage {
			t.Errorf("settlement %+v, want 40 by usage", s)
		}
		assertUsed(t, e.used(alice, "gpt-4o"), map[string]int64{"tokens-per-key-model": 40, "in-flight-per-key": 0})
	})
}

// TestClientDisconnectSettlesForwardedTokens: the client reads the first
// word and leaves; the upstream, holding the stream, is cancelled. The call
// is charged its prompt and the tokens of "Hello", nothing more.
func TestClientDisconnectSettlesForwardedTokens(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store)
		e.up.set(func(b *behaviour) { b.Hang = true })
		ctx, cancel := context.WithCancel(context.Background())
		resp := e.send(ctx, http.MethodPost, "/v1/chat/completions", alice,
			`{"model":"gpt-4o","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"Say hello"}]}`)
		br := bufio.NewReader(resp.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(line, `"content":"Hello"`) {
				break
			}
		}
		cancel()
		resp.Body.Close()
		s := e.waitSettled()
		hello := count(t, "gpt-4o", "Hello")
		if s.Basis != proxy.ByCount || s.Actual != chatPrompt+hello {
			t.Errorf("settlement %+v, want the prompt %d + %d for Hello, counted", s, chatPrompt, hello)
		}
		assertUsed(t, e.used(alice, "gpt-4o"), map[string]int64{"tokens-per-key-model": chatPrompt + hello, "requests-per-key": 1, "in-flight-per-key": 0})
	})
}

// TestCutStreamSettlesForwardedTokens: the upstream dies after two words;
// the client gets both and then an error; the call is charged the prompt
// and "Hello there".
func TestCutStreamSettlesForwardedTokens(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, path, body string }{
		{"chat", "/v1/chat/completions", `{"model":"gpt-4o","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"Say hello"}]}`},
		{"responses", "/v1/responses", `{"model":"gpt-4o","stream":true,"max_output_tokens":100,"input":"Say hello"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			testkit.EachStore(t, func(t *testing.T, store string) {
				e := newEnv(t, store)
				e.up.set(func(b *behaviour) { b.CutAfter = 2 })
				resp := e.send(context.Background(), http.MethodPost, tt.path, alice, tt.body)
				events, err := sseEvents(resp.Body)
				resp.Body.Close()
				if err == nil || !strings.Contains(strings.Join(events, "\n"), `" there"`) {
					t.Errorf("client read %q, %v; want both words, then an error", events, err)
				}
				s := e.waitSettled()
				want := s.Reserved - 100 + count(t, "gpt-4o", "Hello there")
				if s.Basis != proxy.ByCount || s.Actual != want {
					t.Errorf("settlement %+v, want %d (prompt + Hello there), counted", s, want)
				}
				assertUsed(t, e.used(alice, "gpt-4o"), map[string]int64{"tokens-per-key-model": want, "in-flight-per-key": 0})
			})
		})
	}
}

// TestUpstreamFailuresAreRefunded: an error status, a refused connection
// and a timeout each refund the tokens in full; the request still counts
// against the request limit, and the in-flight slot is released.
func TestUpstreamFailuresAreRefunded(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		status int
		setup  func(e *env)
		opts   func(*proxy.Options)
		body   string
	}{
		{name: "500", status: 500, setup: func(e *env) { e.up.set(func(b *behaviour) { b.Status = 500 }) },
			body: `{"error":{"message":"upstream failure 500","type":"server_error","param":null,"code":null}}`},
		{name: "429 from upstream", status: 429, setup: func(e *env) { e.up.set(func(b *behaviour) { b.Status = 429 }) },
			body: `{"error":{"message":"upstream failure 429","type":"server_error","param":null,"code":null}}`},
		{name: "refused", status: 502, setup: func(e *env) { e.upSrv.Close() },
			body: `{"error":{"message":"The upstream API could not be reached or gave no usable answer. The request was not charged.","type":"server_error","param":null,"code":"upstream_unavailable"}}` + "\n"},
		{name: "timeout", status: 504, setup: func(e *env) { e.up.set(func(b *behaviour) { b.Stall = true }) },
			opts: func(o *proxy.Options) { o.Transport = &http.Transport{ResponseHeaderTimeout: 50 * time.Millisecond} },
			body: `{"error":{"message":"The upstream API did not answer in time. The request was not charged.","type":"server_error","param":null,"code":"upstream_timeout"}}` + "\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			testkit.EachStore(t, func(t *testing.T, store string) {
				var edits []func(*setup)
				if tt.opts != nil {
					edits = append(edits, withOptions(tt.opts))
				}
				e := newEnv(t, store, edits...)
				tt.setup(e)
				resp, body := e.post("/v1/chat/completions", alice, chatBody)
				if resp.StatusCode != tt.status || body != tt.body {
					t.Errorf("status %d, body %s; want %d, %s", resp.StatusCode, body, tt.status, tt.body)
				}
				if s := e.waitSettled(); s.Basis != proxy.Refunded || s.Actual != 0 {
					t.Errorf("settlement %+v, want refunded", s)
				}
				assertHeaders(t, resp.Header, map[string]string{"X-Ratelimit-Remaining-Tokens": "10000", "X-Ratelimit-Remaining-Requests": "59"})
				assertUsed(t, e.used(alice, "gpt-4o"), map[string]int64{
					"tokens-per-key-model": 0, "plan-pro-daily": 0, "requests-per-key": 1, "in-flight-per-key": 0,
				})
			})
		})
	}
}

func TestEmbeddingsReserveTheirInput(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store)
		resp, _ := e.post("/v1/embeddings", alice, `{"model":"text-embedding-3-small","input":["hello world","tokens"]}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		// cl100k_base: "hello world" 2, "tokens" 1; the upstream says 31.
		s := e.waitSettled()
		if s.Reserved != 3 || s.Actual != 31 || s.Basis != proxy.ByUsage {
			t.Errorf("settlement %+v, want 3 reserved, 31 by usage", s)
		}
		assertUsed(t, e.used(alice, "text-embedding-3-small"), map[string]int64{"tokens-per-key-model": 31, "in-flight-per-key": 0})
	})
}

// TestResponsesAPISettlesInputPlusOutput, plain and streamed: the usage's
// input_tokens + output_tokens, 31 + 9.
func TestResponsesAPISettlesInputPlusOutput(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "streamed"}[stream], func(t *testing.T) {
			t.Parallel()
			testkit.EachStore(t, func(t *testing.T, store string) {
				e := newEnv(t, store)
				body := `{"model":"gpt-4o","instructions":"Be brief.","input":[{"role":"user","content":[{"type":"input_text","text":"Say hello"}]}],"max_output_tokens":100}`
				if stream {
					body = strings.Replace(body, `{`, `{"stream":true,`, 1)
				}
				resp, got := e.post("/v1/responses", alice, body)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d: %s", resp.StatusCode, got)
				}
				if stream {
					if events, _ := sseEvents(strings.NewReader(got)); len(events) != 7 || !strings.Contains(events[6], `"total_tokens":40`) {
						t.Errorf("events %q: want created, 5 deltas and completed with its usage", events)
					}
				}
				// "Be brief." 3, then the message: 3 + "user" 1 + "Say hello" 2, and 3 to prime the reply.
				s := e.waitSettled()
				if s.Reserved != 3+9+100 || s.Actual != 40 || s.Basis != proxy.ByUsage {
					t.Errorf("settlement %+v, want 112 reserved, 40 by usage", s)
				}
				assertUsed(t, e.used(alice, "gpt-4o"), map[string]int64{"tokens-per-key-model": 40, "in-flight-per-key": 0})
			})
		})
	}
}

// TestNoUsageSettlesCountedTokens: an upstream that reports no usage is
// charged the prompt and the counted reply.
func TestNoUsageSettlesCountedTokens(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store)
		e.up.set(func(b *behaviour) { b.NoUsage = true })
		reply := count(t, "gpt-4o", "Hello there, friend!")
		e.post("/v1/chat/completions", alice, chatBody)
		if s := e.waitSettled(); s.Basis != proxy.ByCount || s.Actual != chatPrompt+reply {
			t.Errorf("plain: settlement %+v, want %d counted", s, chatPrompt+reply)
		}
		e.post("/v1/chat/completions", alice, `{"model":"gpt-4o","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"Say hello"}]}`)
		if s := e.waitSettled(); s.Basis != proxy.ByCount || s.Actual != chatPrompt+reply {
			t.Errorf("streamed: settlement %+v, want %d counted", s, chatPrompt+reply)
		}
		assertUsed(t, e.used(alice, "gpt-4o"), map[string]int64{"tokens-per-key-model": 2 * (chatPrompt + reply), "in-flight-per-key": 0})
	})
}

// TestPassthroughCountsRequestsOnly: other paths go through under the
// request and concurrency limits; no tokens are charged.
func TestPassthroughCountsRequestsOnly(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store)
		resp, data := e.get("/v1/models", alice)
		if resp.StatusCode != http.StatusOK || !strings.Contains(data, `"gpt-4o"`) {
			t.Fatalf("status %d, body %s", resp.StatusCode, data)
		}
		if s := e.waitSettled(); s.Basis != proxy.Released || s.Kind != proxy.Passthrough {
			t.Errorf("settlement %+v, want a released passthrough", s)
		}
		assertHeaders(t, resp.Header, map[string]string{"X-Ratelimit-Remaining-Requests": "59", "X-Ratelimit-Remaining-Tokens": ""})
		assertUsed(t, e.used(alice, ""), map[string]int64{"requests-per-key": 1, "in-flight-per-key": 0, "plan-pro-daily": 0})
	})
}

func TestUnknownKeys(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		reject := newEnv(t, store, withOptions(func(o *proxy.Options) { o.UnknownKeys = proxy.RejectUnknownKeys }))
		for key, msg := range map[string]string{
			"sk-unknown-key-123456": "Incorrect API key provided: sk-u…(21 bytes). This proxy does not know that key.",
			"":                      "You didn't provide an API key. Send it as an Authorization header using Bearer auth (Authorization: Bearer YOUR_KEY).",
		} {
			resp, body := reject.post("/v1/chat/completions", key, chatBody)
			want := `{"error":{"message":"` + msg + `","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}` + "\n"
			if resp.StatusCode != http.StatusUnauthorized || body != want {
				t.Errorf("key %q: status %d, body %s; want 401, %s", key, resp.StatusCode, body, want)
			}
		}
		if n := len(reject.up.Calls()); n != 0 {
			t.Errorf("the upstream got %d calls, want none", n)
		}
		// Under the default plan, unknown keys (and calls without a key)
		// get the free plan's quota, all of them one budget: presenting a
		// new key does not get a fresh one.
		def := newEnv(t, store)
		for i, key := range []string{"sk-unknown-key-123456", "sk-unknown-key-654321", ""} {
			if resp, _ := def.post("/v1/chat/completions", key, chatBody); resp.StatusCode != http.StatusOK {
				t.Fatalf("key %q, default plan: status %d", key, resp.StatusCode)
			}
			def.waitSettled()
			used := int64(40 * (i + 1))
			assertUsed(t, def.used(proxy.UnknownKey, "gpt-4o"), map[string]int64{"tokens-per-key-model": used, "plan-free-daily": used, "plan-free-monthly": used})
		}
		assertUsed(t, def.used("sk-unknown-key-123456", "gpt-4o"), map[string]int64{"tokens-per-key-model": 0, "plan-free-daily": 0})
		if calls := def.up.Calls(); calls[len(calls)-1].Authorization != "" {
			t.Errorf("a call without a key reached the upstream with Authorization %q", calls[len(calls)-1].Authorization)
		}
	})
}

// TestDefaultMaxTokensCappedAtSmallestBudget: with no max_tokens, bob (a
// bucket of 2,000) reserves 2,000, not prompt + 4,096 (which could never
// fit).
func TestDefaultMaxTokensCappedAtSmallestBudget(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store)
		resp, _ := e.post("/v1/chat/completions", bob, `{"model":"gpt-4o","messages":[{"role":"user","content":"Say hello"}]}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if s := e.waitSettled(); s.Reserved != 2000 || s.Actual != 40 {
			t.Errorf("settlement %+v, want 2000 reserved", s)
		}
		resp, _ = e.post("/v1/chat/completions", alice, `{"model":"gpt-4o","messages":[{"role":"user","content":"Say hello"}]}`)
		if s := e.waitSettled(); resp.StatusCode != http.StatusOK || s.Reserved != chatPrompt+proxy.DefaultMaxTokens {
			t.Errorf("alice: status %d, settlement %+v, want prompt + 4096 reserved", resp.StatusCode, s)
		}
	})
}

// TestInFlightLimit: three streams held open take alice's three slots; a
// fourth request is denied until they end; every path releases its slot.
func TestInFlightLimit(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store)
		gate := make(chan struct{})
		e.up.set(func(b *behaviour) { b.Gate = gate })
		stream := `{"model":"gpt-4o","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"Say hello"}]}`
		var open []*http.Response
		for range 3 {
			resp := e.send(context.Background(), http.MethodPost, "/v1/chat/completions", alice, stream)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("stream: status %d", resp.StatusCode)
			}
			open = append(open, resp)
		}
		assertUsed(t, e.used(alice, "gpt-4o"), map[string]int64{"in-flight-per-key": 3})
		resp, body := e.post("/v1/chat/completions", alice, chatBody)
		want := `{"error":{"message":"Too many requests in flight for plan \"pro\" limit \"in-flight-per-key\": Limit 3, In flight 3. Please try again in 1s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}` + "\n"
		if resp.StatusCode != http.StatusTooManyRequests || body != want {
			t.Errorf("fourth: status %d, body %s; want 429, %s", resp.StatusCode, body, want)
		}
		assertHeaders(t, resp.Header, map[string]string{"Retry-After": "1", "Retry-After-Ms": "1000"})
		close(gate)
		for _, r := range open {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
			e.waitSettled()
		}
		assertUsed(t, e.used(alice, "gpt-4o"), map[string]int64{"in-flight-per-key": 0, "requests-per-key": 3})
		if resp, _ := e.post("/v1/chat/completions", alice, chatBody); resp.StatusCode != http.StatusOK {
			t.Errorf("after the streams ended: status %d, want 200", resp.StatusCode)
		}
		e.waitSettled()
		assertUsed(t, e.used(alice, "gpt-4o"), map[string]int64{"in-flight-per-key": 0})
	})
}

// count returns the tokens of text under model's encoding.
func count(t *testing.T, model, text string) int64 {
	t.Helper()
	n, err := proxy.TestTokenizer.Count(model, text)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestUpstreamKeyReplacesTheClients: with Options.UpstreamAPIKey the
// upstream sees only the proxy's key; the client's key still selects its
// limits.
func TestUpstreamKeyReplacesTheClients(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "memory", withOptions(func(o *proxy.Options) { o.UpstreamAPIKey = "sk-upstream-only" }))
	if resp, _ := e.post("/v1/chat/completions", alice, chatBody); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	e.waitSettled()
	if calls := e.up.Calls(); calls[0].Authorization != "Bearer sk-upstream-only" {
		t.Errorf("the upstream got Authorization %q, want the proxy's key", calls[0].Authorization)
	}
	assertUsed(t, e.used(alice, "gpt-4o"), map[string]int64{"tokens-per-key-model": 40})
}

// TestInFlightSlotsComeBackAfterTheirLease: slots whose holders never
// release them (as after a crash) are free again once their 10-minute lease
// ends.
func TestInFlightSlotsComeBackAfterTheirLease(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store)
		gate := make(chan struct{})
		e.up.set(func(b *behaviour) { b.Gate = gate })
		stream := `{"model":"gpt-4o","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"Say hello"}]}`
		var open []*http.Response
		for range 3 {
			open = append(open, e.send(context.Background(), http.MethodPost, "/v1/chat/completions", alice, stream))
		}
		if resp, _ := e.post("/v1/embeddings", alice, `{"model":"text-embedding-3-small","input":"hi"}`); resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("with 3 in flight: status %d, want 429", resp.StatusCode)
		}
		e.clock.Advance(10*time.Minute + time.Millisecond)
		if resp, _ := e.post("/v1/embeddings", alice, `{"model":"text-embedding-3-small","input":"hi"}`); resp.StatusCode != http.StatusOK {
			t.Errorf("after the leases ended: status %d, want 200", resp.StatusCode)
		}
		e.waitSettled()
		close(gate)
		for _, r := range open {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
			e.waitSettled()
		}
		assertUsed(t, e.used(alice, ""), map[string]int64{"in-flight-per-key": 0})
	})
}

// TestLargeResponseStreamsThroughAtEstimate: a plain response larger than
// MaxResponseBytes is not buffered whole: it reaches the client as it is,
// and the call settles at its reserved estimate. The default bound is a
// few MiB, not hundreds.
func TestLargeResponseStreamsThroughAtEstimate(t *testing.T) {
	t.Parallel()
	if proxy.DefaultMaxResponseBytes > 16<<20 || proxy.DefaultMaxBodyBytes > 4<<20 {
		t.Errorf("default bounds: response %d, body %d bytes; want at most 16 MiB and 4 MiB", proxy.DefaultMaxResponseBytes, proxy.DefaultMaxBodyBytes)
	}
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, withOptions(func(o *proxy.Options) { o.MaxResponseBytes = 32 }))
		resp, body := e.post("/v1/chat/completions", alice, chatBody)
		if resp.StatusCode != http.StatusOK || body != chatReply {
			t.Fatalf("status %d, body %s; want 200 and the upstream's body", resp.StatusCode, body)
		}
		s := e.waitSettled()
		want := proxy.Settlement{RequestID: resp.Header.Get("X-Tokenlimit-Request-Id"), Kind: proxy.Chat, Model: "gpt-4o",
			Reserved: chatPrompt + 100, Actual: chatPrompt + 100, Input: chatPrompt, Output: 100, Basis: proxy.AtEstimate}
		if s != want {
			t.Errorf("settlement %+v, want %+v", s, want)
		}
	})
}
