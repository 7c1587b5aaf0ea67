package proxy

import (
	"context"
	"encoding/json"
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

// BenchmarkEstimate100kB estimates a request of each API whose prompt is
// 100 kB of English text: parsing the body and counting its tokens, the
// work the proxy does before any limit is checked. cpu-µs/op is the
// process's CPU time per estimate (garbage collection included), which a
// loaded machine does not inflate as it does ns/op.
func BenchmarkEstimate100kB(b *testing.B) {
	words := strings.Fields("Rate limits protect an API from overload and share its capacity fairly between its users, counted in the tokens each call reads and writes.")
	var sb strings.Builder
	for i := 0; sb.Len() < 100_000; i++ {
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
		b.Run(tt.name, func(b *testing.B) {
			body := []byte(tt.body)
			b.SetBytes(int64(len(body)))
			e, err := testTokens.estimate(tt.kind, body, 4096)
			if err != nil {
				b.Fatal(err)
			}
			var before, after syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			for b.Loop() {
				_, _ = testTokens.estimate(tt.kind, body, 4096)
			}
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			cpu := after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano()
			b.ReportMetric(float64(cpu)/float64(b.N)/1e3, "cpu-µs/op")
			b.ReportMetric(float64(e.Prompt), "prompt-tokens")
		})
	}
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
