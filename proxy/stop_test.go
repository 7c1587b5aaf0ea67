package proxy_test

import (
	"bufio"
	"context"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/proxy"
	"github.com/tokenlimit/tokenlimit/service"
)

// stopConfig gives alice a budget of 300 tokens that stops streams, and
// lets tests add limits.
func stopConfig(extra string) string {
	return `
api_keys:
  ` + alice + `: {user: alice}
limits:
  - {name: tokens, key: [api_key], algorithm: token_bucket, capacity: 300, refill: 300/day` + extra + `}
  - {name: in-flight, key: [api_key], algorithm: concurrency, limit: 3}
`
}

// word is one token in o200k_base: each delta of the streams below.
const word = " hello"

// endless makes the fake upstream stream word until the proxy goes away.
func endless(b *behaviour) { b.Words, b.Endless = []string{word}, true }

// assertStopped checks a stopped call: settled by count to its input plus
// the output delivered (text), charged that on the budget, which it fills
// to within one delta's tokens; and its upstream request closed.
func assertStopped(t *testing.T, e *env, s proxy.Settlement, input int64, text string, budget int64) {
	t.Helper()
	delivered := input + count(t, "gpt-4o", text)
	if !s.Stopped || s.Basis != proxy.ByCount || s.Actual != delivered || s.Err != nil {
		t.Errorf("settlement %+v, want stopped, %d (input %d + the text delivered) by count", s, delivered, input)
	}
	used := e.used(alice, "")
	if used["tokens"] != delivered || used["in-flight"] != 0 {
		t.Errorf("the budget holds %v, want tokens %d (what was delivered) and nothing in flight", used, delivered)
	}
	if one := count(t, "gpt-4o", word); delivered > budget+one || delivered <= budget-one {
		t.Errorf("charged %d on a budget of %d: want it filled to within one delta (%d token)", delivered, budget, one)
	}
	testkit.Eventually(t, 10*time.Second, "the upstream request closed", func() bool { return e.up.Cancelled() == 1 })
}

// assertCharged checks what alice's budgets (on gpt-4o) were charged, by
// name, past their limits too: a token bucket's charge is its capacity
// less what remains, and beyond it, its debt (how long it takes to be
// whole again at its refill); a fixed window's, its limit less what
// remains. The tests' clock does not move.
func assertCharged(t *testing.T, e *env, want map[string]int64) {
	t.Helper()
	d, err := e.svc.Inspect(context.Background(), service.Request{Descriptors: map[string]string{"api_key": alice, "model": "gpt-4o"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range d.Limits {
		w, ok := want[o.Name]
		if !ok {
			continue
		}
		delete(want, o.Name)
		l, _ := e.svc.LimitFor(o.Name, map[string]string{"api_key": alice})
		got := o.Limit - o.Remaining
		if l.Algorithm == tokenlimit.TokenBucket {
			num, den := l.Interval() // µs per token: num/den
			got = (o.ResetAfter.Microseconds()*den + num/2) / num
		}
		if got != w {
			t.Errorf("%s was charged %d, want %d (%+v)", o.Name, got, w, o)
		}
	}
	for name := range want {
		t.Errorf("no limit %s", name)
	}
}

// TestSDKsReadAStoppedStream: the official OpenAI and Anthropic SDKs read a
// stream the proxy stops at alice's 300-token budget (the upstream would
// never end it) as a clean end: finish_reason "length", stop_reason
// "max_tokens" with the output delivered as its usage. The budget is
// charged what was delivered; the stream grew past its 100-token estimate
// first.
func TestSDKsReadAStoppedStream(t *testing.T) {
	t.Parallel()
	for _, c := range sdkCases(t) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testkit.EachStore(t, func(t *testing.T, store string) {
				e := newEnv(t, store, withConfig(stopConfig("")))
				input := c.estimate - 100 // what message_start reports, too
				e.up.set(func(b *behaviour) { endless(b); b.Prompt = input })
				r := runSDK(t, e, c.script, "stream", alice, 0)
				s := e.waitSettled()
				assertStopped(t, e, s, input, r.Text, 300)
				if s.Reserved != c.estimate || s.Grown == 0 {
					t.Errorf("settlement %+v, want the estimate %d reserved, then grown", s, c.estimate)
				}
				output := count(t, "gpt-4o", r.Text)
				switch c.name {
				case "openai":
					if r.FinishReason != "length" {
						t.Errorf("the SDK read %+v, want finish_reason length", r)
					}
				case "anthropic":
					if r.StopReason != "max_tokens" || r.Usage.OutputTokens != output {
						t.Errorf("the SDK read %+v, want stop_reason max_tokens and %d output tokens", r, output)
					}
				}
			})
		})
	}
}

// TestFinishLetsAStreamRunPastItsBudget: with on_exhaust: finish, the
// issue's case stands: 2,000 output tokens against a budget of 300 run to
// their end and are charged 2,008, by usage.
func TestFinishLetsAStreamRunPastItsBudget(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, withConfig(stopConfig(", on_exhaust: finish")))
		e.up.set(func(b *behaviour) {
			b.Words, b.Prompt, b.Completion = strings.Split(strings.Repeat(word+"|", 2000), "|")[:2000], 8, 2000
		})
		resp := e.send(context.Background(), http.MethodPost, "/v1/chat/completions", alice, `{"model":"gpt-4o","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"Say hello"}]}`)
		events, err := sseEvents(resp.Body)
		resp.Body.Close()
		if err != nil || len(events) != 2000+3 || !strings.Contains(events[len(events)-2], `"finish_reason":"stop"`) {
			t.Fatalf("read %d events, %v; want the whole stream", len(events), err)
		}
		s := e.waitSettled()
		if s.Stopped || s.Basis != proxy.ByUsage || s.Actual != 2008 || s.Grown != 0 {
			t.Errorf("settlement %+v, want 2008 by usage, not stopped, nothing grown", s)
		}
		assertCharged(t, e, map[string]int64{"tokens": 2008})
	})
}

// TestAnyStopLimitStopsTheStream: a stream stops at the first budget with
// on_exhaust: stop that cannot pay (600 tokens, then the tighter 450 of a
// second one); a finish budget of 200 on the same call is charged past its
// limit, as before. Counted in dollars too: $0.003 at $10 per million
// output tokens stops it at 3,000 µ$.
func TestAnyStopLimitStopsTheStream(t *testing.T) {
	t.Parallel()
	const cfg = `
api_keys:
  ` + alice + `: {user: alice}
prices:
  gpt-4o: {input: 2.50, output: 10.00}
limits:
  - {name: tokens, key: [api_key], algorithm: token_bucket, capacity: 600, refill: 600/day}
  - {name: tight, key: [api_key, model], algorithm: fixed_window, limit: 450/day}
  - {name: small-finish, key: [api_key], algorithm: token_bucket, capacity: 200, refill: 200/day, on_exhaust: finish}
  - {name: usd, key: [user], unit: usd, algorithm: fixed_window, limit: 0.003/day}
`
	body := `{"model":"gpt-4o","stream":true,"max_tokens":10,"messages":[{"role":"user","content":"Say hello"}]}`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, withConfig(cfg))
		e.up.set(endless)
		resp := e.send(context.Background(), http.MethodPost, "/v1/chat/completions", alice, body)
		events, err := sseEvents(resp.Body)
		resp.Body.Close()
		if err != nil || len(events) < 2 || events[len(events)-1] != "[DONE]" || !strings.Contains(events[len(events)-2], `"finish_reason":"length"`) {
			t.Fatalf("read %v, %v; want a finish chunk with finish_reason length, then [DONE]", events[max(0, len(events)-2):], err)
		}
		s := e.waitSettled()
		if delivered := strings.Repeat(word, len(events)-3); !s.Stopped || s.Actual != chatPrompt+count(t, "gpt-4o", delivered) {
			t.Errorf("settlement %+v, want stopped at the text delivered", s)
		}
		// The usd budget: 9 input tokens cost 22.5 µ$, each output token 10.
		if s.Spend > 3000 || s.Spend <= 3000-10 {
			t.Errorf("spent %d µ$ of 3,000: want the usd budget filled to within one delta (10 µ$)", s.Spend)
		}
		if s.Actual <= 200 {
			t.Errorf("settlement %+v, want it past small-finish's 200", s)
		}
		assertCharged(t, e, map[string]int64{"usd": s.Spend, "tokens": s.Actual, "tight": s.Actual, "small-finish": s.Actual})

		// Without the usd budget, the tightest token budget stops it.
		e = newEnv(t, store, withConfig(strings.Replace(cfg, "  - {name: usd", "  # - {name: usd", 1)))
		e.up.set(endless)
		resp = e.send(context.Background(), http.MethodPost, "/v1/chat/completions", alice, body)
		events, err = sseEvents(resp.Body)
		resp.Body.Close()
		if err != nil || events[len(events)-1] != "[DONE]" {
			t.Fatalf("read %v, %v", events[max(0, len(events)-2):], err)
		}
		s = e.waitSettled()
		if one := count(t, "gpt-4o", word); !s.Stopped || s.Actual > 450+one || s.Actual <= 450-one {
			t.Errorf("settlement %+v, want stopped at the 450 of the tight budget", s)
		}
		assertCharged(t, e, map[string]int64{"tokens": s.Actual, "tight": s.Actual, "small-finish": s.Actual})
	})
}

// TestClientLeavesAGrownStream: the client reads 700 deltas of a stream
// whose estimate was 10 (so that it grew twice at least) and leaves. The call is
// charged what it delivered, once: each growth is refunded, the budget
// holds exactly the settlement.
func TestClientLeavesAGrownStream(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, withConfig(strings.Replace(stopConfig(""), "300", "100000", 2)))
		e.up.set(endless)
		ctx, cancel := context.WithCancel(context.Background())
		resp := e.send(ctx, http.MethodPost, "/v1/chat/completions", alice,
			`{"model":"gpt-4o","stream":true,"max_tokens":10,"messages":[{"role":"user","content":"Say hello"}]}`)
		br := bufio.NewReader(resp.Body)
		for read := 0; read < 700; {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(line, `"content":" hello"`) {
				read++
			}
		}
		cancel()
		resp.Body.Close()
		s := e.waitSettled()
		// The proxy may have handed out more than the client read (the
		// connection buffers it), but no more than it reserved.
		if s.Stopped || s.Basis != proxy.ByCount || s.Actual < chatPrompt+700 || s.Actual > s.Reserved+s.Grown ||
			s.Grown < 2*proxy.GrowthChunk || s.Grown%proxy.GrowthChunk != 0 {
			t.Errorf("settlement %+v, want at least 700 output tokens by count, within whole growths reserved (two at least)", s)
		}
		assertUsed(t, e.used(alice, ""), map[string]int64{"tokens": s.Actual, "in-flight": 0})
		testkit.Eventually(t, 10*time.Second, "the upstream request closed", func() bool { return e.up.Cancelled() == 1 })
		e.noMoreSettlements()
	})
}

// TestStoppedStreamsInEachAPI: chat (asking for usage), completions, the
// Responses API and the Messages API each end a stopped stream in their
// shape.
func TestStoppedStreamsInEachAPI(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, path, body, header, last string }{
		{"chat", "/v1/chat/completions", `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"max_tokens":100,"messages":[{"role":"user","content":"Say hello"}]}`,
			"", `"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":`},
		{"responses", "/v1/responses", `{"model":"gpt-4o","stream":true,"max_output_tokens":100,"input":"Say hello"}`,
			"", `{"type":"response.incomplete","sequence_number":`},
		{"messages", "/v1/messages", strings.Replace(msgBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1),
			"", `{"type":"message_stop"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "memory", withConfig(stopConfig("")))
			e.up.set(endless)
			var resp *http.Response
			if tt.name == "messages" {
				resp = e.sendMessages(context.Background(), "x-api-key", alice, tt.body)
			} else {
				resp = e.send(context.Background(), http.MethodPost, tt.path, alice, tt.body)
			}
			events, err := sseEvents(resp.Body)
			resp.Body.Close()
			if err != nil || len(events) < 3 {
				t.Fatalf("read %d events, %v", len(events), err)
			}
			end := strings.Join(events[len(events)-3:], "\n")
			if !strings.Contains(end, tt.last) {
				t.Errorf("the stream ends with\n%s\nwant %s", end, tt.last)
			}
			switch tt.name {
			case "chat":
				if !strings.Contains(end, `"finish_reason":"length"`) || events[len(events)-1] != "[DONE]" {
					t.Errorf("chat ends with\n%s\nwant finish_reason length, the usage, [DONE]", end)
				}
			case "responses":
				if !strings.Contains(end, `"status":"incomplete"`) || !strings.Contains(end, `"incomplete_details":{"reason":"max_output_tokens"}`) {
					t.Errorf("responses ends with\n%s\nwant an incomplete response, max_output_tokens", end)
				}
			case "messages":
				if !strings.Contains(end, `{"type":"content_block_stop","index":0}`) || !strings.Contains(end, `"stop_reason":"max_tokens"`) {
					t.Errorf("messages ends with\n%s\nwant the block closed and stop_reason max_tokens", end)
				}
			}
			if s := e.waitSettled(); !s.Stopped {
				t.Errorf("settlement %+v, want stopped", s)
			}
		})
	}
}

// TestStoppedStreamLeavesNoGoroutine: a stopped stream's upstream request
// ends; no goroutine stays behind once the servers are closed. Not
// parallel: it counts the process's goroutines.
func TestStoppedStreamLeavesNoGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		e := newEnv(t, "memory", withConfig(stopConfig("")))
		defer e.srv.Close()
		defer e.upSrv.Close()
		e.up.set(endless)
		resp := e.send(context.Background(), http.MethodPost, "/v1/chat/completions", alice, chatBody[:1]+`"stream":true,`+chatBody[1:])
		if _, err := sseEvents(resp.Body); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if s := e.waitSettled(); !s.Stopped {
			t.Errorf("settlement %+v, want stopped", s)
		}
		testkit.Eventually(t, 10*time.Second, "the upstream request closed", func() bool { return e.up.Cancelled() == 1 })
		e.srv.Client().CloseIdleConnections()
	}()
	testkit.Eventually(t, 10*time.Second, "the goroutines back to their number before", func() bool { return runtime.NumGoroutine() <= before })
}
