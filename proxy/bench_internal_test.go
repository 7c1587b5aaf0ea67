package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/plane"
	"github.com/tokenlimit/tokenlimit/service"
)

// BenchmarkEstimate estimates a request of each API whose prompt is 2 kB
// or 100 kB of English text: parsing the body and counting its tokens, the
// work the proxy does before any limit is checked. cpu-µs/op is the
// process's CPU time per estimate (garbage collection included), which a
// loaded machine does not inflate as it does ns/op; cpu-µs/1k-tokens puts
// the two sizes side by side (issue 21: a 100 kB prompt at most 2x a 2 kB
// one per token).
func BenchmarkEstimate(b *testing.B) {
	words := strings.Fields("Rate limits protect an API from overload and share its capacity fairly between its users, counted in the tokens each call reads and writes.")
	for _, size := range []int{2_000, 100_000} {
		var sb strings.Builder
		for i := 0; sb.Len() < size; i++ {
			sb.WriteString(words[i%len(words)] + " ")
		}
		text, _ := json.Marshal(sb.String())
		for _, tt := range []struct {
			name string
			kind Kind
			body string
		}{
			{"chat", Chat, `{"model":"gpt-4o","max_tokens":100,"messages":[{"role":"user","content":` + string(text) + `}]}`},
			{"responses", Responses, `{"model":"gpt-4o","max_output_tokens":100,"input":` + string(text) + `}`},
			{"messages", Messages, `{"model":"claude-sonnet-4-5","max_tokens":100,"system":"Be brief.","messages":[{"role":"user","content":[{"type":"text","text":` + string(text) + `}]}]}`},
		} {
			b.Run(fmt.Sprintf("%s/%dkB", tt.name, size/1000), func(b *testing.B) {
				benchEstimate(b, tt.kind, []byte(tt.body))
			})
		}
	}
}

// benchEstimate estimates body of kind b.N times, reporting CPU per
// estimate and per 1,000 prompt tokens.
func benchEstimate(b *testing.B, kind Kind, body []byte) {
	b.SetBytes(int64(len(body)))
	e, err := testTokens.estimate(kind, body, 4096)
	if err != nil {
		b.Fatal(err)
	}
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	for b.Loop() {
		_, _ = testTokens.estimate(kind, body, 4096)
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := float64(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) / float64(b.N) / 1e3
	b.ReportMetric(cpu, "cpu-µs/op")
	b.ReportMetric(cpu/float64(e.Prompt)*1000, "cpu-µs/1k-tokens")
	b.ReportMetric(float64(e.Prompt), "prompt-tokens")
}

// BenchmarkIdentify tells who a call is, before its body is read: the
// look-up of its address among those refused for failed authentications,
// then its key, one of api_keys, a quota-plane key's secret, or unknown
// (served under the default plan).
func BenchmarkIdentify(b *testing.B) {
	ctx := context.Background()
	var svc *service.Service
	pl, err := plane.Open(ctx, plane.NewMemoryStore(), plane.Options{Logger: testkit.Quiet(), KnownPlan: func(n string) bool { return svc.KnownPlan(n) }})
	if err != nil {
		b.Fatal(err)
	}
	cfg := testkit.ParseConfig(b, "limits:\n  - {name: rpm, key: [api_key], algorithm: fixed_window, limit: 10/min}\napi_keys:\n  sk-demo-alice-0001: {user: alice}\n")
	svc = testkit.NewService(b, testkit.Setup{Store: testkit.Memory, Config: cfg, Start: time.Now(), Edit: func(o *service.Options) { o.Plane = pl }}).Service
	up, _ := url.Parse("http://127.0.0.1:1")
	p, err := New(svc, Options{Upstream: up, UnknownKeys: DefaultPlanForUnknownKeys, Tokenizer: testTokens.Tokenizer, Logger: testkit.Quiet()})
	if err != nil {
		b.Fatal(err)
	}
	_, secret, err := pl.CreateKey(ctx, plane.Spec{Name: "k"})
	if err != nil {
		b.Fatal(err)
	}
	for _, k := range []struct{ name, key string }{{"api_keys", "sk-demo-alice-0001"}, {"plane", secret}, {"unknown", "sk-nobody"}} {
		b.Run(k.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			r.Header.Set("Authorization", "Bearer "+k.key)
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				if !p.identify(w, r, &call{}) {
					b.Fatal("refused")
				}
			}
		})
	}
}

// BenchmarkEventStream is the proxy's own work on a streamed reply of
// 2,000 one-token deltas (OpenAI's chat chunks, 180 bytes each), read from
// memory to its end and settled on the embedded store, with no HTTP
// around it: a denominator smaller than the proxy's CPU per streamed call.
// Each round streams it twice:
//   - uncounted: the reply fits its estimate (max_tokens 20,000) by its
//     bytes alone; no delta is counted.
//   - counted: max_tokens 10: the reply is counted as it goes and grows
//     its reservation 4 times on a budget that stops streams (4 more
//     reserves, 4 cancels at the settlement).
//
// It reports each one's CPU time per stream (the process's, garbage
// collection included, which a loaded machine inflates less than ns/op)
// and counted-extra-%: what counting and growing add.
func BenchmarkEventStream(b *testing.B) {
	cfg := testkit.ParseConfig(b, "limits: [{name: t, key: [api_key], algorithm: token_bucket, capacity: 1000000000, refill: 1000000000/min}]")
	svc := testkit.NewService(b, testkit.Setup{Store: testkit.Memory, Config: cfg, Clock: time.Now}).Service
	p := &Proxy{svc: svc, tok: testTokens, log: slog.New(slog.DiscardHandler), opts: Options{SettleTimeout: time.Second}}
	var events strings.Builder
	for range 2000 {
		events.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":" hello"},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	}
	events.WriteString("data: [DONE]\n\n")
	body := events.String()
	buf := make([]byte, 32<<10)
	stream := func(completion int64) {
		c := &call{kind: Chat, est: Estimate{Model: "gpt-4o", Prompt: 9, Completion: completion},
			req: service.Request{Descriptors: map[string]string{"api_key": "k"}, Cost: completion + 9}}
		d, err := svc.Reserve(b.Context(), "", c.req)
		if err != nil || !d.Reserved {
			b.Fatal(d, err)
		}
		c.id, c.decision = d.ReservationID, d
		s := newEventStream(p, c, io.NopCloser(strings.NewReader(body)))
		if _, err := io.CopyBuffer(io.Discard, s, buf); err != nil {
			b.Fatal(err)
		}
		s.Close()
		if c.growth.stopped || (completion == 10) != (c.growth.tokens == 4*GrowthChunk) {
			b.Fatalf("max_tokens %d: grew %d, stopped %v", completion, c.growth.tokens, c.growth.stopped)
		}
	}
	var uncounted, counted time.Duration
	for b.Loop() {
		t0 := processCPU()
		stream(20000)
		t1 := processCPU()
		stream(10)
		uncounted, counted = uncounted+t1-t0, counted+processCPU()-t1
	}
	b.ReportMetric(float64(uncounted.Microseconds())/float64(b.N), "uncounted-cpu-µs/op")
	b.ReportMetric(float64(counted.Microseconds())/float64(b.N), "counted-cpu-µs/op")
	b.ReportMetric(float64(counted-uncounted)/float64(uncounted)*100, "counted-extra-%")
}

// processCPU returns the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
