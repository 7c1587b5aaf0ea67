package proxy

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
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
