package proxy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// behaviour is how the fake upstream answers.
type behaviour struct {
	// Prompt and Completion are the usage every call reports.
	Prompt, Completion int64
	// Words are the reply's content: one chunk per word when streamed.
	Words []string
	// Status, if not zero, fails every call with it.
	Status int
	// Stall holds every call without an answer until its client goes away.
	Stall bool
	// Gate, if not nil, holds a stream after its first content chunk until
	// it is closed.
	Gate chan struct{}
	// Hang holds a stream after its first content chunk until its client
	// goes away: nothing more is sent.
	Hang bool
	// CutAfter, if positive, aborts a stream after that many content
	// chunks, without a usage chunk or [DONE].
	CutAfter int
	// NoUsage leaves usage out of every answer, as some OpenAI-compatible
	// servers do.
	NoUsage bool
	// CacheWrite and CacheRead are the Messages API's prompt cache tokens,
	// reported beside Prompt (its input_tokens); CacheRead is also the
	// cached part of Prompt that chat and the Responses API report.
	CacheWrite, CacheRead int64
	// Reasoning is the reasoning part of Completion that chat and the
	// Responses API report.
	Reasoning int64
	// RawUsage, if set, replaces the usage object of every answer.
	RawUsage string
	// Inject is written as it is after a Messages stream's first word.
	Inject string
	// Endless streams Words over and over until the client goes away
	// (counted in fakeUpstream.Cancelled): no end, no usage.
	Endless bool
}

// upstreamCall is one request the fake upstream received.
type upstreamCall struct {
	Path, Authorization, APIKey, AcceptEncoding string
	Body                                        map[string]any
}

// fakeUpstream is an OpenAI-compatible API: chat completions (streamed or
// not), embeddings, the Responses API (streamed or not) and a model list,
// answering with the exact usage its behaviour says. It can fail, stall,
// hold and cut streams.
type fakeUpstream struct {
	mu        sync.Mutex
	b         behaviour
	calls     []upstreamCall
	cancelled int // endless streams that ended when their client went away
}

// Cancelled returns how many endless streams ended because their client
// (the proxy) went away.
func (f *fakeUpstream) Cancelled() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cancelled
}

// words returns the i-th word of the reply, and whether there is one: an
// endless stream cycles through its words until r's client goes away.
func (f *fakeUpstream) words(r *http.Request, b behaviour, i int) (string, bool) {
	if !b.Endless {
		if i < len(b.Words) {
			return b.Words[i], true
		}
		return "", false
	}
	if r.Context().Err() != nil {
		f.mu.Lock()
		f.cancelled++
		f.mu.Unlock()
		return "", false
	}
	return b.Words[i%len(b.Words)], true
}

func newFakeUpstream() *fakeUpstream {
	return &fakeUpstream{b: behaviour{Prompt: 31, Completion: 9, Words: []string{"Hello", " there", ",", " friend", "!"}}}
}

// set changes the behaviour of the calls that follow.
func (f *fakeUpstream) set(change func(*behaviour)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(&f.b)
}

// Calls returns the requests received so far.
func (f *fakeUpstream) Calls() []upstreamCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]upstreamCall(nil), f.calls...)
}

func (f *fakeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	data, _ := io.ReadAll(r.Body)
	var req map[string]any
	_ = json.Unmarshal(data, &req)
	f.mu.Lock()
	b := f.b
	f.calls = append(f.calls, upstreamCall{Path: r.URL.Path, Authorization: r.Header.Get("Authorization"), APIKey: r.Header.Get("X-Api-Key"),
		AcceptEncoding: r.Header.Get("Accept-Encoding"), Body: req})
	f.mu.Unlock()

	model, _ := req["model"].(string)
	stream, _ := req["stream"].(bool)
	switch {
	case b.Stall:
		<-r.Context().Done()
	case b.Status != 0:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(b.Status)
		fmt.Fprintf(w, `{"error":{"message":"upstream failure %d","type":"server_error","param":null,"code":null}}`, b.Status)
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/models"):
		writeJSON(w, `{"object":"list","data":[{"id":"gpt-4o","object":"model","created":1,"owned_by":"test"}]}`)
	case strings.HasSuffix(r.URL.Path, "/chat/completions") && stream:
		opts, _ := req["stream_options"].(map[string]any)
		withUsage, _ := opts["include_usage"].(bool)
		f.streamChat(w, r, b, model, withUsage)
	case strings.HasSuffix(r.URL.Path, "/chat/completions"):
		writeJSON(w, fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":%q,`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":%q,"refusal":null},"logprobs":null,"finish_reason":"stop"}]%s}`,
			model, strings.Join(b.Words, ""), b.chatUsage()))
	case strings.HasSuffix(r.URL.Path, "/embeddings"):
		u := fmt.Sprintf(`,"usage":{"prompt_tokens":%d,"total_tokens":%d}`, b.Prompt, b.Prompt)
		if b.NoUsage {
			u = ""
		}
		writeJSON(w, fmt.Sprintf(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.25,-0.5]}],"model":%q%s}`, model, u))
	case strings.HasSuffix(r.URL.Path, "/responses") && stream:
		f.streamResponse(w, r, b, model)
	case strings.HasSuffix(r.URL.Path, "/responses"):
		writeJSON(w, b.response(model, "completed"))
	case r.URL.Path == "/v1/messages" && stream:
		f.streamMessage(w, r, b, model)
	case r.URL.Path == "/v1/messages":
		writeJSON(w, fmt.Sprintf(`{"id":"msg_1","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":%q}],`+
			`"stop_reason":"end_turn","stop_sequence":null,"usage":%s}`, model, strings.Join(b.Words, ""), b.messageUsage(b.Completion)))
	default:
		http.NotFound(w, r)
	}
}

func writeJSON(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, body)
}

func (b behaviour) chatUsage() string {
	if b.NoUsage {
		return ""
	}
	details := ""
	if b.CacheRead > 0 {
		details = fmt.Sprintf(`,"prompt_tokens_details":{"cached_tokens":%d}`, b.CacheRead)
	}
	if b.Reasoning > 0 {
		details += fmt.Sprintf(`,"completion_tokens_details":{"reasoning_tokens":%d}`, b.Reasoning)
	}
	return fmt.Sprintf(`,"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d%s}`, b.Prompt, b.Completion, b.Prompt+b.Completion, details)
}

// hold applies the behaviour's holds after the first content chunk; it
// reports false when the stream must end now.
func (b behaviour) hold(r *http.Request, sent int) bool {
	if sent != 1 {
		return true
	}
	if b.Hang {
		<-r.Context().Done()
		return false
	}
	if b.Gate != nil {
		select {
		case <-b.Gate:
		case <-r.Context().Done():
			return false
		}
	}
	return true
}

// streamChat streams a chat completion as OpenAI does: a role chunk, one
// chunk per word, a finish chunk, the usage chunk with empty choices if
// asked, and [DONE]. With include_usage every other chunk has "usage":null.
func (f *fakeUpstream) streamChat(w http.ResponseWriter, r *http.Request, b behaviour, model string, withUsage bool) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	flusher := w.(http.Flusher)
	nullUsage := ""
	if withUsage {
		nullUsage = `,"usage":null`
	}
	send := func(choices string) {
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[%s]%s}\n\n", model, choices, nullUsage)
		flusher.Flush()
	}
	send(`{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}`)
	for i := 0; ; i++ {
		word, ok := f.words(r, b, i)
		if !ok {
			break
		}
		send(fmt.Sprintf(`{"index":0,"delta":{"content":%q},"logprobs":null,"finish_reason":null}`, word))
		if b.CutAfter == i+1 {
			panic(http.ErrAbortHandler)
		}
		if !b.hold(r, i+1) {
			return
		}
	}
	if b.Endless {
		return
	}
	send(`{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}`)
	if withUsage && !b.NoUsage {
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[]%s}\n\n", model, b.chatUsage())
	}
	io.WriteString(w, "data: [DONE]\n\n")
}

// response is a Responses API response object.
func (b behaviour) response(model, status string) string {
	u := fmt.Sprintf(`{"input_tokens":%d,"input_tokens_details":{"cached_tokens":%d},"output_tokens":%d,"output_tokens_details":{"reasoning_tokens":%d},"total_tokens":%d}`,
		b.Prompt, b.CacheRead, b.Completion, b.Reasoning, b.Prompt+b.Completion)
	if b.NoUsage || status != "completed" {
		u = "null"
	}
	output := ""
	if status == "completed" {
		output = fmt.Sprintf(`{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":%q,"annotations":[]}]}`, strings.Join(b.Words, ""))
	}
	return fmt.Sprintf(`{"id":"resp_1","object":"response","created_at":1,"status":%q,"model":%q,"output":[%s],"usage":%s}`, status, model, output, u)
}

// streamResponse streams a Responses API call: response.created, one
// response.output_text.delta per word, response.completed with the usage.
func (f *fakeUpstream) streamResponse(w http.ResponseWriter, r *http.Request, b behaviour, model string) {
	w.Header().Set("Content-Type", "text/event-stream")
	flusher := w.(http.Flusher)
	seq := 0
	send := func(typ, data string) {
		fmt.Fprintf(w, "event: %s\ndata: {\"type\":%q,\"sequence_number\":%d,%s}\n\n", typ, typ, seq, data)
		seq++
		flusher.Flush()
	}
	send("response.created", `"response":`+b.response(model, "in_progress"))
	for i := 0; ; i++ {
		word, ok := f.words(r, b, i)
		if !ok {
			break
		}
		send("response.output_text.delta", fmt.Sprintf(`"item_id":"msg_1","output_index":0,"content_index":0,"delta":%q`, word))
		if b.CutAfter == i+1 {
			panic(http.ErrAbortHandler)
		}
		if !b.hold(r, i+1) {
			return
		}
	}
	if b.Endless {
		return
	}
	send("response.completed", `"response":`+b.response(model, "completed"))
}

// messageUsage is the Messages API's usage object with output tokens.
func (b behaviour) messageUsage(output int64) string {
	if b.RawUsage != "" {
		return b.RawUsage
	}
	return fmt.Sprintf(`{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":%d}`,
		b.Prompt, b.CacheWrite, b.CacheRead, output)
}

// streamMessage streams a Messages API call as Anthropic does:
// message_start with the input tokens (and 1 output token), a text block
// with one content_block_delta per word, a ping, message_delta with the
// output tokens, message_stop.
func (f *fakeUpstream) streamMessage(w http.ResponseWriter, r *http.Request, b behaviour, model string) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	flusher := w.(http.Flusher)
	send := func(typ, data string) {
		fmt.Fprintf(w, "event: %s\ndata: {\"type\":%q%s}\n\n", typ, typ, data)
		flusher.Flush()
	}
	start := b.messageUsage(1)
	if b.NoUsage {
		start = `{"input_tokens":0,"output_tokens":0}`
	}
	send("message_start", fmt.Sprintf(`,"message":{"id":"msg_1","type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":%s}`, model, start))
	send("content_block_start", `,"index":0,"content_block":{"type":"text","text":""}`)
	send("ping", "")
	for i := 0; ; i++ {
		word, ok := f.words(r, b, i)
		if !ok {
			break
		}
		send("content_block_delta", fmt.Sprintf(`,"index":0,"delta":{"type":"text_delta","text":%q}`, word))
		if i == 0 && b.Inject != "" {
			io.WriteString(w, b.Inject)
		}
		if b.CutAfter == i+1 {
			panic(http.ErrAbortHandler)
		}
		if !b.hold(r, i+1) {
			return
		}
	}
	if b.Endless {
		return
	}
	send("content_block_stop", `,"index":0`)
	final := fmt.Sprintf(`{"output_tokens":%d}`, b.Completion)
	if b.RawUsage != "" {
		final = b.RawUsage
	}
	if !b.NoUsage {
		send("message_delta", `,"delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":`+final)
	}
	send("message_stop", "")
}
