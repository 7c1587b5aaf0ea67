package proxy_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"

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
	eachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store)
		resp, body := e.post("/v1/chat/completions", alice, chatBody)
		if resp.StatusCode != http.StatusOK || body != chatReply {
			t.Fatalf("status %d, body %s; want 200 and the upstream's body", resp.StatusCode, body)
		}
		s := e.waitSettled()
		want := proxy.Settlement{RequestID: resp.Header.Get("X-Tokenlimit-Request-Id"), Kind: proxy.Chat, Model: "gpt-4o",
			Reserved: chatPrompt + 100, Actual: 40, Basis: proxy.ByUsage}
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
	eachStore(t, func(t *testing.T, store string) {
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
