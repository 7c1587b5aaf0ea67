package proxy

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/service"
)

func TestKindOf(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		method, path string
		want         Kind
	}{
		{"POST", "/v1/chat/completions", Chat},
		{"POST", "/v1/completions", Completions},
		{"POST", "/v1/embeddings", Embeddings},
		{"POST", "/v1/responses", Responses},
		{"POST", "/openai/deployments/gpt-4o/chat/completions/", Chat},
		{"GET", "/v1/chat/completions", Passthrough},
		{"GET", "/v1/responses/resp_1", Passthrough},
		{"POST", "/v1/audio/transcriptions", Passthrough},
		{"GET", "/v1/models", Passthrough},
		{"POST", "/v1/messages", Messages},
		{"POST", "/v1/messages/", Messages},
		{"POST", "/v1/messages/count_tokens", Passthrough},
		{"POST", "/v1/threads/thread_1/messages", Passthrough},
	} {
		if got := KindOf(tt.method, tt.path); got != tt.want {
			t.Errorf("KindOf(%s %s) = %s, want %s", tt.method, tt.path, got, tt.want)
		}
	}
}

func TestClientIP(t *testing.T) {
	t.Parallel()
	p := &Proxy{opts: Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}}}
	for _, tt := range []struct {
		remote, xff, want string
	}{
		{"192.0.2.7:5000", "", "192.0.2.7"},
		{"192.0.2.7:5000", "203.0.113.9", "192.0.2.7"},                          // an untrusted peer's header is ignored
		{"10.1.2.3:5000", "203.0.113.9", "203.0.113.9"},                         // a trusted proxy's is believed
		{"10.1.2.3:5000", "198.51.100.1, 203.0.113.9, 10.9.9.9", "203.0.113.9"}, // rightmost untrusted hop
		{"10.1.2.3:5000", "", "10.1.2.3"},
		{"10.1.2.3:5000", "garbage, 10.2.2.2", "10.2.2.2"}, // stops at what it cannot read
		{"[::1]:5000", "2001:db8::5", "2001:db8::5"},
		{"[::ffff:192.0.2.7]:5000", "", "192.0.2.7"},
	} {
		r := &http.Request{RemoteAddr: tt.remote, Header: http.Header{}}
		if tt.xff != "" {
			r.Header.Set("X-Forwarded-For", tt.xff)
		}
		if got := p.clientIP(r); got != tt.want {
			t.Errorf("clientIP(%s, XFF %q) = %s, want %s", tt.remote, tt.xff, got, tt.want)
		}
	}
}

func TestWithIncludeUsageKeepsTheRest(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"<a&b>"}]}`: `{"messages":[{"role":"user","content":"<a&b>"}],"model":"m","stream":true,"stream_options":{"include_usage":true}}`,
		`{"stream":true,"stream_options":{"include_obfuscation":false}}`:             `{"stream":true,"stream_options":{"include_obfuscation":false,"include_usage":true}}`,
		`{"stream":true,"stream_options":null}`:                                      `{"stream":true,"stream_options":{"include_usage":true}}`,
		` { }`:                                                                       `{"stream_options":{"include_usage":true}}`,
		"{\n \"stream\": true}":                                                      `{"stream":true,"stream_options":{"include_usage":true}}`,
	} {
		got, err := withIncludeUsage([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		_ = json.Unmarshal(got, &g)
		_ = json.Unmarshal([]byte(want), &w)
		if !reflect.DeepEqual(g, w) {
			t.Errorf("withIncludeUsage(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestEstimate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name       string
		kind       Kind
		body       string
		prompt     int64
		completion int64
		set        bool
	}{
		{"chat n=3 max_completion_tokens", Chat, `{"model":"gpt-4o","n":3,"max_completion_tokens":50,"messages":[{"role":"user","content":"Say hello"}]}`, 9, 150, true},
		{"chat parts and tool calls", Chat, `{"model":"gpt-4o","max_tokens":0,"messages":[{"role":"user","content":[{"type":"text","text":"Say hello"},{"type":"image_url","image_url":{"url":"x"}}]},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"get","arguments":"{}"}}]}]}`, 3 + 3 + 1 + 2 + 3 + 1 + 1 + 1, 0, true},
		{"chat default", Chat, `{"model":"gpt-4o","messages":[]}`, 3, 1000, false},
		{"legacy completions default 16", Completions, `{"model":"gpt-3.5-turbo-instruct","prompt":["hello world","tokens"]}`, 3, 16, false},
		{"legacy completions token ids", Completions, `{"model":"gpt-3.5-turbo-instruct","prompt":[1,2,3,4],"max_tokens":5}`, 4, 5, true},
		{"embeddings token arrays", Embeddings, `{"model":"text-embedding-3-small","input":[[1,2],[3]]}`, 3, 0, false},
		{"messages blocks and tools", Messages, `{"model":"claude-x","max_tokens":7,"system":[{"type":"text","text":"Be brief."}],"messages":[` +
			`{"role":"user","content":[{"type":"text","text":"Say hello"},{"type":"image","source":{}}]},` +
			`{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"get","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"42"}]}]}],` +
			`"tools":[{"name":"get","description":"Get it.","input_schema":{}}]}`,
			3 + 3*3 + 3 /* Be brief. */ + (1 + 2) + (1 + 1 + 1) /* assistant get {} */ + (1 + 1) + (1 + 3 + 1) /* get Get it. {} */, 7, true},
		{"responses items", Responses, `{"model":"gpt-4o","input":[{"role":"user","content":"Say hello"},{"type":"function_call_output","call_id":"c","output":"42"}],"max_output_tokens":7}`, 3 + (3 + 1 + 2) + (3 + 1), 7, true},
	} {
		e, err := testTokens.estimate(tt.kind, []byte(tt.body), 1000)
		if err != nil || e.Prompt != tt.prompt || e.Completion != tt.completion || e.CompletionSet != tt.set {
			t.Errorf("%s: %+v, %v; want prompt %d, completion %d (set %v)", tt.name, e, err, tt.prompt, tt.completion, tt.set)
		}
	}
	for _, body := range []string{`not json`, `{"messages":"x"}`, `{"messages":[{"content":{"a":1}}]}`, `{"input":{"a":1}}`} {
		kind := Chat
		if strings.Contains(body, "input") {
			kind = Embeddings
		}
		var bad *errBadBody
		if _, err := testTokens.estimate(kind, []byte(body), 1000); !errors.As(err, &bad) {
			t.Errorf("estimate(%s) = %v, want a bad body", body, err)
		}
	}
}

// chunked is an upstream body that returns its parts one Read at a time,
// then err.
type chunked struct {
	parts []string
	err   error
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.parts) == 0 {
		return 0, c.err
	}
	n := copy(p, c.parts[0])
	if c.parts[0] = c.parts[0][n:]; c.parts[0] == "" {
		c.parts = c.parts[1:]
	}
	return n, nil
}

func (c *chunked) Close() error { return nil }

// TestEventStreamFraming: events split anywhere across reads, CRLF lines,
// lines longer than the read buffer, comments, a last event without its
// blank line; the stripped usage chunk; and the forwarded text.
func TestEventStreamFraming(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 10000)
	parts := []string{
		": keep-alive\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"Hel",
		"lo\"}}]}\r\n\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"" + long + "\"}}]}\n\n",
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}}\n\n",
		"data: [DONE]",
	}
	var settled []Settlement
	p := &Proxy{svc: testService(t), tok: testTokens, log: slog.New(slog.DiscardHandler), opts: Options{SettleTimeout: time.Second, OnSettle: func(s Settlement) { settled = append(settled, s) }}}
	c := &call{kind: Chat, injected: true, est: Estimate{Model: "gpt-4o", Prompt: 5}, growth: growth{unbounded: true}}
	s := newEventStream(p, c, &chunked{parts: append([]string(nil), parts...), err: io.EOF})
	got, err := io.ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	want := ": keep-alive\n\n" + "data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"}}]}\r\n\r\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\"" + long + "\"}}]}\n\n" + "data: [DONE]"
	if string(got) != want {
		t.Errorf("the client got %q...; want the events less the usage chunk", string(got)[:min(len(got), 200)])
	}
	if s.forwarded.String() != "Hello"+long {
		t.Errorf("forwarded text %q..., want Hello and the long word", s.forwarded.String()[:20])
	}
	s.Close()
	if len(settled) != 1 || settled[0].Actual != 7 || settled[0].Basis != ByUsage {
		t.Errorf("settled %+v, want 7 by usage", settled)
	}

	// Cut mid-event: the partial event is dropped, and only what the
	// client was handed before counts.
	settled = nil
	c = &call{kind: Chat, est: Estimate{Model: "gpt-4o", Prompt: 5}, growth: growth{unbounded: true}}
	s = newEventStream(p, c, &chunked{parts: []string{parts[1], parts[2][:20]}, err: io.ErrUnexpectedEOF})
	got, err = io.ReadAll(s)
	if !errors.Is(err, io.ErrUnexpectedEOF) || string(got) != "data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"}}]}\r\n\r\n" {
		t.Errorf("cut stream: %q, %v", got, err)
	}
	s.Close()
	if len(settled) != 1 || settled[0].Actual != 5+1 || settled[0].Basis != ByCount {
		t.Errorf("cut stream settled %+v, want 5 + 1 (Hello), counted", settled)
	}
}

func TestEstimateTotalSaturates(t *testing.T) {
	t.Parallel()
	for _, e := range []Estimate{
		{Prompt: math.MaxInt64, Completion: math.MaxInt64},
		{Prompt: 10, Completion: MaxN * MaxReplyTokens},
	} {
		if got := e.Total(); got != tokenlimit.MaxCost {
			t.Errorf("%+v.Total() = %d, want tokenlimit.MaxCost", e, got)
		}
	}
	if got := (Estimate{Prompt: 10, Completion: 5}).Total(); got != 15 {
		t.Errorf("Total() = %d, want 15", got)
	}
}

// TestStreamEventIsBounded: an upstream that streams without ever ending an
// event (no newline) cuts the stream at MaxEventBytes instead of growing the
// proxy's buffer with it.
func TestStreamEventIsBounded(t *testing.T) {
	t.Parallel()
	up := io.NopCloser(io.MultiReader(strings.NewReader("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"),
		strings.NewReader(strings.Repeat("x", 4*MaxEventBytes))))
	s := newEventStream(nil, &call{growth: growth{unbounded: true}}, up)
	var got []byte
	buf := make([]byte, 512)
	var err error
	for err == nil {
		var n int
		n, err = s.Read(buf)
		got = append(got, buf[:n]...)
		if len(s.event) > MaxEventBytes+4096 {
			t.Fatalf("the stream buffers %d bytes of one event", len(s.event))
		}
	}
	if !errors.Is(err, errEventTooLarge) {
		t.Errorf("Read error %v, want errEventTooLarge", err)
	}
	if want := "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"; string(got) != want {
		t.Errorf("forwarded %q, want only the complete event %q", got, want)
	}
}

// TestStreamCountsAsItGoes: a long stream keeps at most maxUncounted bytes
// of forwarded text; the rest is counted as it passes.
func TestStreamCountsAsItGoes(t *testing.T) {
	t.Parallel()
	word := strings.Repeat("hello ", 100)
	var events strings.Builder
	for range 1000 {
		events.WriteString(`data: {"choices":[{"delta":{"content":"` + word + `"}}]}` + "\n\n")
	}
	p := &Proxy{tok: testTokens, log: slog.New(slog.DiscardHandler)}
	c := &call{est: Estimate{Model: "gpt-4o"}, growth: growth{unbounded: true}}
	s := newEventStream(p, c, io.NopCloser(strings.NewReader(events.String())))
	buf := make([]byte, 4096)
	for {
		if _, err := s.Read(buf); err != nil {
			break
		}
		if s.forwarded.Len() > maxUncounted+len(word) {
			t.Fatalf("the stream keeps %d bytes of forwarded text", s.forwarded.Len())
		}
	}
	got := s.counted + p.count(c, s.forwarded.String())
	want, _ := testTokens.Count("gpt-4o", strings.Repeat(word, 1000))
	if got < want || got > want+want/100 {
		t.Errorf("counted %d tokens, the whole text has %d", got, want)
	}
}

// testService is a service with one token limit on real time, for proxies
// built by hand.
func testService(t *testing.T) *service.Service {
	t.Helper()
	cfg := testkit.ParseConfig(t, "limits: [{name: t, algorithm: token_bucket, capacity: 1000, refill: 1000/min}]")
	return testkit.NewService(t, testkit.Setup{Store: testkit.Memory, Config: cfg, Clock: time.Now}).Service
}

// TestDenialNamesLevel: a 429's message names the denying limit and where
// it comes from; a budget not worth waiting for reads as the issue's
// example: its level, its name, used of limit and when it resets.
func TestDenialNamesLevel(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 31, 10, 0, 0, 0, time.UTC)
	usd := service.Outcome{Name: "usd-monthly", Level: service.LevelTeam, LevelName: "acme", Unit: service.USD, Cost: 20_000,
		Result: tokenlimit.Result{Limit: 50_000_000, Remaining: 0}}
	want := `team "acme" budget "usd-monthly" exhausted: $50.00 of $50.00 used, resets 2027-01-01T00:00:00Z (in 14h0m0s); ` +
		`this request needs $0.02, so retrying sooner will not succeed.`
	if got := exhausted(usd, at, 14*time.Hour); got != want {
		t.Errorf("exhausted:\n got %s\nwant %s", got, want)
	}
	tokens := service.Outcome{Name: "tpm", Level: service.LevelKey, LevelName: "ci bot", Unit: service.Tokens, Cost: 109,
		Result: tokenlimit.Result{Limit: 1000, Remaining: 41}}
	want = `key "ci bot" limit "tpm" exhausted: 959 of 1000 tokens used, resets 2026-12-31T10:30:00Z (in 30m0s); ` +
		`this request needs 109 tokens, so retrying sooner will not succeed.`
	if got := exhausted(tokens, at, 30*time.Minute); got != want {
		t.Errorf("exhausted:\n got %s\nwant %s", got, want)
	}
	for _, c := range []struct {
		o    service.Outcome
		want string
	}{
		{service.Outcome{Name: "rpm", Level: service.LevelPlan, LevelName: "pro", Unit: service.Requests}, `plan "pro" limit "rpm"`},
		{service.Outcome{Name: "rpm", Level: service.LevelPlan, Unit: service.Requests}, `limit "rpm"`},
		{service.Outcome{Name: "team-usd", Level: service.LevelTeam, LevelName: "acme", Unit: service.USD}, `team "acme" budget "team-usd"`},
	} {
		if got := denier(c.o); got != c.want {
			t.Errorf("denier(%+v) = %s, want %s", c.o, got, c.want)
		}
	}
}
