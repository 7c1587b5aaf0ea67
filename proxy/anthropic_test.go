package proxy_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/proxy"
)

// msgBody is a Messages API call: a system prompt, one user message, 100
// reply tokens at most.
const msgBody = `{"model":"claude-sonnet-4-5","max_tokens":100,"system":"Be brief.","messages":[{"role":"user","content":"Say hello"}]}`

// msgPrompt is msgBody's prompt as the proxy counts it: 3 to prime the
// reply, 3 for the message, its role and text, and the system prompt.
func msgPrompt(t *testing.T) int64 {
	return 3 + 3 + count(t, "claude-sonnet-4-5", "user") + count(t, "claude-sonnet-4-5", "Say hello") + count(t, "claude-sonnet-4-5", "Be brief.")
}

// sendMessages posts body to /v1/messages with the api key in x-api-key
// (header "x-api-key") or Authorization: Bearer (header "bearer").
func (e *env) sendMessages(ctx context.Context, header, key, body string) *http.Response {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/v1/messages", strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	switch header {
	case "x-api-key":
		req.Header.Set("X-Api-Key", key)
	case "bearer":
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("POST /v1/messages: %v", err)
	}
	return resp
}

// TestMessagesSettleToUsage: a plain Messages call with its key in either
// header reserves prompt + max_tokens and settles, before the headers go
// out, to input + cache creation + cache read + output tokens; the answer
// carries Anthropic's rate-limit headers, resets in RFC 3339.
func TestMessagesSettleToUsage(t *testing.T) {
	t.Parallel()
	for _, header := range []string{"x-api-key", "bearer"} {
		t.Run(header, func(t *testing.T) {
			t.Parallel()
			testkit.EachStore(t, func(t *testing.T, store string) {
				e := newEnv(t, store)
				e.up.set(func(b *behaviour) { b.CacheWrite, b.CacheRead = 5, 7 })
				resp := e.sendMessages(context.Background(), header, alice, msgBody)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d", resp.StatusCode)
				}
				s := e.waitSettled()
				if s.Kind != proxy.Messages || s.Reserved != msgPrompt(t)+100 || s.Actual != 31+5+7+9 || s.Basis != proxy.ByUsage {
					t.Errorf("settlement %+v, want %d reserved, 52 by usage", s, msgPrompt(t)+100)
				}
				assertHeaders(t, resp.Header, map[string]string{
					"Anthropic-Ratelimit-Tokens-Limit": "10000", "Anthropic-Ratelimit-Tokens-Remaining": "9948",
					"Anthropic-Ratelimit-Requests-Limit": "60", "Anthropic-Ratelimit-Requests-Remaining": "59",
					// 52 tokens refill at 10,000/min in 312ms: whole again at 09:30:00.312, rounded up.
					"Anthropic-Ratelimit-Tokens-Reset":   "2026-01-15T09:30:01Z",
					"Anthropic-Ratelimit-Requests-Reset": "2026-01-15T09:30:01Z",
					"X-Ratelimit-Remaining-Tokens":       "",
				})
				calls := e.up.Calls()
				if len(calls) != 1 || calls[0].Path != "/v1/messages" || (calls[0].APIKey+calls[0].Authorization) == "" {
					t.Errorf("upstream calls %+v, want one /v1/messages with the client's key", calls)
				}
				assertUsed(t, e.used(alice, "claude-sonnet-4-5"), map[string]int64{"tokens-per-key-model": 52, "requests-per-key": 1, "in-flight-per-key": 0})
			})
		})
	}
}

// TestMessagesStreamSettlesToUsage: a streamed call passes every event
// through and settles to message_start's input tokens plus message_delta's
// output tokens.
func TestMessagesStreamSettlesToUsage(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store)
		e.up.set(func(b *behaviour) { b.CacheRead = 100 })
		resp := e.sendMessages(context.Background(), "x-api-key", alice, strings.Replace(msgBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1))
		events, err := sseEvents(resp.Body)
		resp.Body.Close()
		if err != nil || len(events) != 11 || !strings.Contains(events[10], "message_stop") || !strings.Contains(events[9], `"output_tokens":9`) {
			t.Fatalf("events %q, %v; want all 11, message_stop last", events, err)
		}
		s := e.waitSettled()
		if s.Actual != 31+100+9 || s.Basis != proxy.ByUsage {
			t.Errorf("settlement %+v, want 140 by usage", s)
		}
		assertUsed(t, e.used(alice, "claude-sonnet-4-5"), map[string]int64{"tokens-per-key-model": 140, "in-flight-per-key": 0})
	})
}

// TestMessagesMalformedEvents: events that are not JSON, or not of the
// Messages API, pass through as they are and change nothing of the
// settlement.
func TestMessagesMalformedEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "memory")
	e.up.set(func(b *behaviour) {
		b.Inject = "data: {\"type\":\"message_delta\",\"usage\":\n\n: a comment\n\ndata: [1,2]\n\nevent: x\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":\"many\"}}\n\n"
	})
	resp := e.sendMessages(context.Background(), "x-api-key", alice, strings.Replace(msgBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1))
	events, err := sseEvents(resp.Body)
	resp.Body.Close()
	if err != nil || len(events) != 14 || events[4] != `{"type":"message_delta","usage":` || events[5] != "[1,2]" {
		t.Fatalf("events %q, %v; want the 11 and the 3 malformed ones as they were", events, err)
	}
	if s := e.waitSettled(); s.Actual != 40 || s.Basis != proxy.ByUsage {
		t.Errorf("settlement %+v, want 40 by usage", s)
	}
}

// TestMessagesCutStreams: a stream the upstream cuts after two words, and
// one the client leaves after the first, settle to the input tokens
// message_start reported plus the tokens of the text forwarded.
func TestMessagesCutStreams(t *testing.T) {
	t.Parallel()
	body := strings.Replace(msgBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store)
		e.up.set(func(b *behaviour) { b.CutAfter = 2 })
		resp := e.sendMessages(context.Background(), "x-api-key", alice, body)
		events, err := sseEvents(resp.Body)
		resp.Body.Close()
		if err == nil || !strings.Contains(strings.Join(events, "\n"), `" there"`) {
			t.Errorf("client read %q, %v; want both words, then an error", events, err)
		}
		s := e.waitSettled()
		if want := 31 + count(t, "claude-sonnet-4-5", "Hello there"); s.Basis != proxy.ByCount || s.Actual != want {
			t.Errorf("cut by the upstream: settlement %+v, want %d counted", s, want)
		}

		e.up.set(func(b *behaviour) { b.CutAfter, b.Hang = 0, true })
		ctx, cancel := context.WithCancel(context.Background())
		resp = e.sendMessages(ctx, "x-api-key", alice, body)
		br := bufio.NewReader(resp.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(line, `"text":"Hello"`) {
				break
			}
		}
		cancel()
		resp.Body.Close()
		s = e.waitSettled()
		if want := 31 + count(t, "claude-sonnet-4-5", "Hello"); s.Basis != proxy.ByCount || s.Actual != want {
			t.Errorf("left by the client: settlement %+v, want %d counted", s, want)
		}
		assertUsed(t, e.used(alice, "claude-sonnet-4-5"), map[string]int64{"in-flight-per-key": 0})
	})
}

// TestMessages429InAnthropicShape: a denied Messages call gets Anthropic's
// error body, retry-after, and Anthropic's headers; an unknown key gets its
// authentication_error.
func TestMessages429InAnthropicShape(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store)
		e.up.set(func(b *behaviour) { b.Prompt = 1981 })
		resp := e.sendMessages(context.Background(), "x-api-key", bob, msgBody)
		resp.Body.Close()
		e.waitSettled()
		resp, body := e.readAll(e.sendMessages(context.Background(), "x-api-key", bob, msgBody))
		used := int64(1981 + 9)
		want := `{"type":"error","error":{"type":"rate_limit_error","message":"Rate limit reached for plan \"free\" limit \"tokens-per-key-model\" on tokens: ` +
			`Limit 2000, Used 1990, Requested ` + itoa(msgPrompt(t)+100) + `. Please try again in ` +
			(time.Duration(msgPrompt(t)+100-(2000-used)) * 30 * time.Millisecond).String() + `."}}` + "\n"
		if resp.StatusCode != http.StatusTooManyRequests || body != want {
			t.Fatalf("status %d, body %s; want 429, %s", resp.StatusCode, body, want)
		}
		assertHeaders(t, resp.Header, map[string]string{
			"Retry-After": itoa((msgPrompt(t)+100-10)*30/1000 + 1), "Anthropic-Ratelimit-Tokens-Limit": "2000", "Anthropic-Ratelimit-Tokens-Remaining": "10",
			"Anthropic-Ratelimit-Tokens-Reset": "2026-01-15T09:31:00Z",
		})
		resp, body = e.readAll(e.sendMessages(context.Background(), "x-api-key", "", msgBody))
		if resp.StatusCode != http.StatusOK {
			// Unknown keys fall under the default plan here: a nil key too.
			t.Errorf("no key under the default plan: status %d %s", resp.StatusCode, body)
		}
	})
}

// readAll reads resp's body and closes it.
func (e *env) readAll(resp *http.Response) (*http.Response, string) {
	e.t.Helper()
	defer resp.Body.Close()
	var sb strings.Builder
	if _, err := bufio.NewReader(resp.Body).WriteTo(&sb); err != nil {
		e.t.Fatal(err)
	}
	return resp, sb.String()
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestMessagesUnknownKey: rejected with Anthropic's authentication_error,
// whichever header carries it.
func TestMessagesUnknownKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "memory", withOptions(func(o *proxy.Options) { o.UnknownKeys = proxy.RejectUnknownKeys }))
	for _, header := range []string{"x-api-key", "bearer", "none"} {
		resp, body := e.readAll(e.sendMessages(context.Background(), header, "sk-ant-nobody-000", msgBody))
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(body, `{"type":"error","error":{"type":"authentication_error","message":`) {
			t.Errorf("%s: status %d, body %s; want 401 authentication_error", header, resp.StatusCode, body)
		}
	}
	if n := len(e.up.Calls()); n != 0 {
		t.Errorf("the upstream got %d calls, want none", n)
	}
}

// TestMessagesAbsurdUsage: a usage with a negative field, or one above the
// cost bound, is not believed: the call settles to the counted prompt and
// reply, as if no usage had come.
func TestMessagesAbsurdUsage(t *testing.T) {
	t.Parallel()
	for name, raw := range map[string]string{
		"negative": `{"input_tokens":-1000,"output_tokens":9}`,
		"absurd":   `{"input_tokens":9007199254740993,"output_tokens":9}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "memory")
			e.up.set(func(b *behaviour) { b.RawUsage = raw })
			for _, body := range []string{msgBody, strings.Replace(msgBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)} {
				resp, _ := e.readAll(e.sendMessages(context.Background(), "x-api-key", alice, body))
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d", resp.StatusCode)
				}
				s := e.waitSettled()
				if want := msgPrompt(t) + count(t, "claude-sonnet-4-5", "Hello there, friend!"); s.Basis != proxy.ByCount || s.Actual != want || s.Err != nil {
					t.Errorf("settlement %+v, want %d counted", s, want)
				}
			}
		})
	}
}

// TestAnthropicUpstream: with AnthropicUpstream set, Messages calls and
// requests with an anthropic-version header go there, the others to
// Upstream; the upstream key replaces the client's as x-api-key.
func TestAnthropicUpstream(t *testing.T) {
	t.Parallel()
	ant := newFakeUpstream()
	antSrv := httptest.NewServer(ant)
	t.Cleanup(antSrv.Close)
	antURL, _ := url.Parse(antSrv.URL)
	e := newEnv(t, "memory", withOptions(func(o *proxy.Options) { o.AnthropicUpstream, o.UpstreamAPIKey = antURL, "sk-upstream" }))
	resp, _ := e.readAll(e.sendMessages(context.Background(), "bearer", alice, msgBody))
	e.waitSettled()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("messages: status %d", resp.StatusCode)
	}
	e.post("/v1/chat/completions", alice, chatBody)
	e.waitSettled()
	calls := ant.Calls()
	if len(calls) != 1 || calls[0].Path != "/v1/messages" || calls[0].APIKey != "sk-upstream" || calls[0].Authorization != "" {
		t.Errorf("anthropic upstream calls %+v, want /v1/messages with x-api-key sk-upstream and no Authorization", calls)
	}
	if calls := e.up.Calls(); len(calls) != 1 || calls[0].Path != "/v1/chat/completions" || calls[0].Authorization != "Bearer sk-upstream" {
		t.Errorf("openai upstream calls %+v, want the chat call", calls)
	}
}

// TestNoGoroutineLeft: streams that hang until the client leaves, streams
// cut by the upstream, oversized bodies and malformed events leave no
// goroutine behind once the servers are closed. Not parallel: it counts
// the process's goroutines.
func TestNoGoroutineLeft(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		e := newEnv(t, "memory", withOptions(func(o *proxy.Options) { o.MaxBodyBytes = 1 << 10 }))
		defer e.srv.Close()
		defer e.upSrv.Close()
		stream := strings.Replace(msgBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
		for _, b := range []func(*behaviour){
			func(b *behaviour) { b.Hang = true },
			func(b *behaviour) { b.CutAfter = 1 },
			func(b *behaviour) { b.CutAfter, b.Inject = 0, "data: {\"type\":\"message_delta\",\n\n" },
		} {
			e.up.set(b)
			ctx, cancel := context.WithCancel(context.Background())
			resp := e.sendMessages(ctx, "x-api-key", alice, stream)
			_, _ = bufio.NewReader(resp.Body).ReadString('\n')
			cancel()
			resp.Body.Close()
			e.waitSettled()
		}
		resp, _ := e.readAll(e.sendMessages(context.Background(), "x-api-key", alice, `{"messages":"`+strings.Repeat("x", 2<<10)+`"}`))
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("oversized body: status %d, want 413", resp.StatusCode)
		}
		e.srv.Client().CloseIdleConnections()
	}()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
	}
}
