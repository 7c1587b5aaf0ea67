package proxy_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/proxy"
)

// The official Go client, github.com/openai/openai-go, is the caller in
// these tests: what it sends, the proxy must understand, and what the proxy
// answers, it must read.

func newClient(e *env, key string, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(e.srv.URL + "/v1/"), option.WithAPIKey(key), option.WithHTTPClient(e.srv.Client()),
	}, opts...)...)
}

var sayHello = openai.ChatCompletionNewParams{
	Model:     "gpt-4o",
	MaxTokens: openai.Int(100),
	Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello")},
}

func TestOpenAIClient(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store)
		c := newClient(e, alice)
		ctx := context.Background()
		expect := func(what string, reserved, actual int64) {
			t.Helper()
			if s := e.waitSettled(); s.Reserved != reserved || s.Actual != actual || s.Basis != proxy.ByUsage {
				t.Errorf("%s: settlement %+v, want %d reserved, %d by usage", what, s, reserved, actual)
			}
		}

		res, err := c.Chat.Completions.New(ctx, sayHello)
		if err != nil || res.Choices[0].Message.Content != "Hello there, friend!" || res.Usage.TotalTokens != 40 {
			t.Fatalf("chat: %+v, %v", res, err)
		}
		expect("chat", chatPrompt+100, 40)

		stream := c.Chat.Completions.NewStreaming(ctx, sayHello)
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			chunk := stream.Current()
			if len(chunk.Choices) == 0 {
				t.Errorf("streamed chat: the client got the usage chunk it did not ask for: %s", chunk.RawJSON())
			}
			acc.AddChunk(chunk)
		}
		if err := stream.Err(); err != nil || acc.Choices[0].Message.Content != "Hello there, friend!" {
			t.Fatalf("streamed chat: %q, %v", acc.Choices[0].Message.Content, err)
		}
		expect("streamed chat", chatPrompt+100, 40)

		emb, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
			Model: "text-embedding-3-small", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello world")},
		})
		if err != nil || len(emb.Data) != 1 || emb.Usage.PromptTokens != 31 {
			t.Fatalf("embeddings: %+v, %v", emb, err)
		}
		expect("embeddings", 2, 31)

		r, err := c.Responses.New(ctx, responses.ResponseNewParams{
			Model: "gpt-4o", MaxOutputTokens: openai.Int(100),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello")},
		})
		if err != nil || r.OutputText() != "Hello there, friend!" || r.Usage.InputTokens != 31 || r.Usage.OutputTokens != 9 {
			t.Fatalf("responses: %+v, %v", r, err)
		}
		expect("responses", chatPrompt+100, 40)

		assertUsed(t, e.used(alice, "gpt-4o"), map[string]int64{"tokens-per-key-model": 120, "requests-per-key": 4, "in-flight-per-key": 0})
		assertUsed(t, e.used(alice, "text-embedding-3-small"), map[string]int64{"tokens-per-key-model": 31})
	})
}

// attempts records the attempts the client makes; on a 429 it moves the
// service's fake clock by the retry-after-ms the proxy sent, as real time
// would while the client waits.
type attempts struct {
	mu    sync.Mutex
	at    []time.Time
	codes []int
	waits []time.Duration
}

func (a *attempts) middleware(clk *testkit.Clock) option.Middleware {
	return func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		a.mu.Lock()
		a.at = append(a.at, time.Now())
		a.mu.Unlock()
		resp, err := next(req)
		if err != nil {
			return resp, err
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		a.codes = append(a.codes, resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests {
			ms, _ := strconv.Atoi(resp.Header.Get("Retry-After-Ms"))
			a.waits = append(a.waits, time.Duration(ms)*time.Millisecond)
			clk.Advance(time.Duration(ms) * time.Millisecond)
		}
		return resp, nil
	}
}

// TestOpenAIClientRetriesAfterOur429: bob's bucket is one token short of
// chatBody's estimate, 30ms away. The client reads our 429, waits the
// retry-after-ms it names (really: the two attempts are at least that far
// apart), and its retry passes. Without retries it reports our error.
func TestOpenAIClientRetriesAfterOur429(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store)
		// Use all but 108 tokens of bob's 2,000: chatBody reserves 109.
		e.up.set(func(b *behaviour) { b.Prompt = 2000 - 108 - 9 })
		first := newClient(e, bob)
		if _, err := first.Chat.Completions.New(context.Background(), sayHello); err != nil {
			t.Fatal(err)
		}
		e.waitSettled()
		e.up.set(func(b *behaviour) { b.Prompt = 31 })

		var none attempts
		noRetry := newClient(e, bob, option.WithMaxRetries(0), option.WithMiddleware(none.middleware(testkit.NewClock(t0))))
		_, err := noRetry.Chat.Completions.New(context.Background(), sayHello)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Type != "tokens" ||
			apiErr.Code != "rate_limit_exceeded" ||
			apiErr.Message != "Rate limit reached for plan \"free\" limit \"tokens-per-key-model\" on tokens: Limit 2000, Used 1892, Requested 109. Please try again in 30ms." {
			t.Fatalf("without retries: %v (%+v), want our 429", err, apiErr)
		}

		var a attempts
		retrying := newClient(e, bob, option.WithMaxRetries(2), option.WithMiddleware(a.middleware(e.clock)))
		res, err := retrying.Chat.Completions.New(context.Background(), sayHello)
		if err != nil || res.Usage.TotalTokens != 40 {
			t.Fatalf("with retries: %+v, %v", res, err)
		}
		if len(a.codes) != 2 || a.codes[0] != 429 || a.codes[1] != 200 || a.waits[0] != 30*time.Millisecond {
			t.Fatalf("attempts %v, waits %v; want a 429 asking for 30ms, then a 200", a.codes, a.waits)
		}
		if gap := a.at[1].Sub(a.at[0]); gap < a.waits[0] {
			t.Errorf("the client retried after %v, before the %v the proxy asked for", gap, a.waits[0])
		}
		e.waitSettled()
	})
}
