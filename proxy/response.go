package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// usage is the usage an upstream reports: prompt/completion/total tokens
// for chat, completions and embeddings; input/output tokens for the
// Responses API; input/output tokens and the prompt cache's for Anthropic's
// Messages API; and the cached and reasoning parts each API details.
type usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	// Anthropic's input tokens written to and read from its prompt cache,
	// not included in InputTokens.
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	// The cached part of prompt_tokens (chat) and input_tokens (Responses).
	PromptDetails tokenDetails `json:"prompt_tokens_details"`
	InputDetails  tokenDetails `json:"input_tokens_details"`
	// The reasoning part of completion_tokens (chat) and output_tokens
	// (Responses).
	CompletionDetails tokenDetails `json:"completion_tokens_details"`
	OutputDetails     tokenDetails `json:"output_tokens_details"`
}

// tokenDetails is OpenAI's breakdown of input or output tokens.
type tokenDetails struct {
	CachedTokens    int64 `json:"cached_tokens"`
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

// bill splits the usage into token classes. The Responses API's
// input_tokens and chat's prompt_tokens include their cached tokens;
// Anthropic's input_tokens exclude its cache reads and writes, which the
// bill's Input includes. Parts beyond their wholes are clamped (see
// bill.clamped).
func (u usage) bill() bill { return u.reported().clamped() }

// reported is the bill as the upstream reported it, before clamping.
func (u usage) reported() bill {
	if addSat(u.InputTokens, u.OutputTokens) > 0 || u.CacheCreationInputTokens > 0 || u.CacheReadInputTokens > 0 {
		return bill{
			Input:  addSat(addSat(u.InputTokens, u.CacheCreationInputTokens), u.CacheReadInputTokens),
			Cached: addSat(min(u.InputDetails.CachedTokens, u.InputTokens), u.CacheReadInputTokens), CacheWrite: u.CacheCreationInputTokens,
			Output: u.OutputTokens, Reasoning: u.OutputDetails.ReasoningTokens,
		}
	}
	if u.PromptTokens == 0 && u.CompletionTokens == 0 {
		return bill{Input: u.TotalTokens}
	}
	return bill{Input: u.PromptTokens, Cached: u.PromptDetails.CachedTokens,
		Output: u.CompletionTokens, Reasoning: u.CompletionDetails.ReasoningTokens}
}

// settleable returns u's bill and whether the call can be settled to it
// (believable), and counts what was corrected: a usage ignored (a negative
// field, or above tokenlimit.MaxCost) and one whose parts were clamped to
// their wholes (see Metrics). A nil usage (none reported) is not counted.
func (p *Proxy) settleable(u *usage) (bill, bool) {
	switch {
	case u == nil:
		return bill{}, false
	case !u.believable():
		if u.reported() != (bill{}) { // not an empty usage
			p.opts.Metrics.usageCorrected("ignored")
		}
		return bill{}, false
	}
	b := u.bill()
	if b != u.reported() {
		p.opts.Metrics.usageCorrected("clamped")
	}
	return b, true
}

// total is what the call consumed: the input and output tokens when the
// Responses or Messages API reports them, else prompt + completion, else
// total_tokens. It saturates at math.MaxInt64.
func (u usage) total() int64 {
	b := u.bill()
	return addSat(b.Input, b.Output)
}

// believable reports whether u can be settled: no field is negative and
// the total is positive and at most tokenlimit.MaxCost. A usage that is not
// is ignored, as if the upstream had reported none.
func (u *usage) believable() bool {
	if u == nil {
		return false
	}
	for _, v := range []int64{u.PromptTokens, u.CompletionTokens, u.TotalTokens, u.InputTokens, u.OutputTokens,
		u.CacheCreationInputTokens, u.CacheReadInputTokens, u.PromptDetails.CachedTokens, u.InputDetails.CachedTokens,
		u.CompletionDetails.ReasoningTokens, u.OutputDetails.ReasoningTokens} {
		if v < 0 {
			return false
		}
	}
	return u.total() > 0 && u.total() <= tokenlimit.MaxCost
}

// withIncludeUsage returns body with stream_options.include_usage set, its
// other fields and stream options kept. A body without stream_options gets
// them inserted as they are, its bytes otherwise untouched.
func withIncludeUsage(body []byte) ([]byte, error) {
	if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '{' && !bytes.Contains(body, []byte(`"stream_options"`)) {
		out := make([]byte, 0, len(trimmed)+40)
		out = append(out, `{"stream_options":{"include_usage":true}`...)
		if rest := bytes.TrimLeft(trimmed[1:], " \t\r\n"); len(rest) > 0 && rest[0] != '}' {
			out = append(out, ',')
		}
		return append(out, trimmed[1:]...), nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	opts := map[string]json.RawMessage{}
	if raw, ok := m["stream_options"]; ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		if err := json.Unmarshal(raw, &opts); err != nil {
			return nil, fmt.Errorf("stream_options: %w", err)
		}
	}
	opts["include_usage"] = json.RawMessage("true")
	var err error
	if m["stream_options"], err = json.Marshal(opts); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// modifyResponse settles what it can before the response headers go out:
// an error status (or a redirect) is refunded; a plain response is read whole and settled
// to its usage, so that its x-ratelimit-remaining-* headers show the real
// cost. A stream, and a passthrough's body, settle when they end.
func (p *Proxy) modifyResponse(resp *http.Response) error {
	c := callOf(resp.Request.Context())
	if c == nil {
		return nil
	}
	c.status = resp.StatusCode
	p.opts.Metrics.upstream(c.kind, resp.StatusCode, time.Since(c.sent))
	switch {
	case resp.StatusCode == http.StatusSwitchingProtocols:
		// An upgraded connection (a websocket) is the client's from now
		// on: its slot is released at once.
		p.setRateHeaders(resp.Header, c, c.decision)
		p.settle(c, bill{}, Released)
	case resp.StatusCode >= http.StatusMultipleChoices && c.kind != Passthrough:
		// An error, or a redirect the client may follow: this call ran
		// nothing upstream.
		p.settle(c, bill{}, Refunded)
		p.setHeadersAfterSettle(resp.Header, c)
	case c.kind == Passthrough:
		p.setRateHeaders(resp.Header, c, c.decision)
		resp.Body = &onClose{ReadCloser: resp.Body, done: func() { p.settle(c, bill{}, Released) }}
	case isEventStream(resp.Header):
		p.setRateHeaders(resp.Header, c, c.decision)
		resp.Body = newEventStream(p, c, resp.Body)
		resp.ContentLength = -1 // the proxy may drop a chunk
		resp.Header.Del("Content-Length")
	default:
		return p.settleWhole(resp, c)
	}
	return nil
}

func isEventStream(h http.Header) bool {
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	return mt == "text/event-stream"
}

// settleWhole reads a plain response, settles it to its usage (or, without
// one, to the prompt and the reply's counted text) and sets the headers.
func (p *Proxy) settleWhole(resp *http.Response, c *call) error {
	body, err := io.ReadAll(io.LimitReader(resp.Body, p.opts.MaxResponseBytes+1))
	if err != nil {
		resp.Body.Close()
		return fmt.Errorf("proxy: read the upstream's response: %w", err)
	}
	if int64(len(body)) > p.opts.MaxResponseBytes {
		p.settle(c, estimateBill(c.est), AtEstimate)
		p.setRateHeaders(resp.Header, c, c.decision)
		resp.Body = &onClose{ReadCloser: resp.Body, reader: io.MultiReader(bytes.NewReader(body), resp.Body)}
		return nil
	}
	resp.Body.Close()
	actual, basis := p.actualOf(c, body)
	p.settle(c, actual, basis)
	p.setHeadersAfterSettle(resp.Header, c)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.TransferEncoding = nil
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return nil
}

// replyBody is what the proxy reads of a plain response.
type replyBody struct {
	Usage   *usage `json:"usage"`
	Choices []struct {
		Message struct {
			Content   string `json:"content"`
			Refusal   string `json:"refusal"`
			ToolCalls []struct {
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		Text string `json:"text"`
	} `json:"choices"`
	Output []struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		Arguments string `json:"arguments"`
	} `json:"output"`
	// Anthropic's content blocks.
	Content []block `json:"content"`
}

// actualOf returns what a plain response consumed: its usage, or the
// prompt plus the counted text of its reply.
func (p *Proxy) actualOf(c *call, body []byte) (bill, Basis) {
	var r replyBody
	if json.Unmarshal(body, &r) == nil {
		if b, ok := p.settleable(r.Usage); ok {
			return b, ByUsage
		}
	}
	var text strings.Builder
	for _, ch := range r.Choices {
		text.WriteString(ch.Message.Content + ch.Message.Refusal + ch.Text)
		for _, tc := range ch.Message.ToolCalls {
			text.WriteString(tc.Function.Name + tc.Function.Arguments)
		}
	}
	for _, o := range r.Output {
		text.WriteString(o.Arguments)
		for _, part := range o.Content {
			text.WriteString(part.Text)
		}
	}
	for _, b := range r.Content {
		text.WriteString(b.Text + b.Thinking + b.Name + string(b.Input))
	}
	return bill{Input: c.est.Prompt, Output: p.count(c, text.String())}, ByCount
}

// count counts text in c's model, 0 if the tokenizer fails (it only can if
// an embedded encoding failed to load, which estimating already reported).
func (p *Proxy) count(c *call, text string) int64 {
	n, err := p.tok.Count(c.est.Model, text)
	if err != nil {
		p.log.Error("tokenizer failed", "error", err)
	}
	return n
}

// setHeadersAfterSettle sets the rate-limit headers from the budgets' state
// after c was settled, read back from the store (a leased budget from this
// replica's leases: no store call); from the reservation's decision if
// that fails.
func (p *Proxy) setHeadersAfterSettle(h http.Header, c *call) {
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.SettleTimeout)
	defer cancel()
	d, err := p.svc.InspectHere(ctx, c.req)
	if err != nil {
		p.log.Warn("inspect after settle failed; headers show the reservation", "request_id", c.id, "error", err)
		d = c.decision
	}
	d.Alerts = c.decision.Alerts // the thresholds the reservation crossed; an inspection crosses none
	p.setRateHeaders(h, c, d)
}

// upstreamFailed answers a call the upstream never answered (a refused
// connection, a timeout, an unreadable response). The call is refunded,
// unless the client left first: then it is charged its prompt, which the
// upstream may have processed.
func (p *Proxy) upstreamFailed(w http.ResponseWriter, r *http.Request, err error) {
	c := callOf(r.Context())
	if r.Context().Err() != nil {
		if c != nil {
			c.status = 499
			p.opts.Metrics.upstream(c.kind, c.status, time.Since(c.sent))
			p.settle(c, bill{Input: c.est.Prompt}, ByCount)
		}
		w.WriteHeader(499) // nobody reads it: the client has gone
		return
	}
	status, code, msg := http.StatusBadGateway, "upstream_unavailable", "The upstream API could not be reached or gave no usable answer."
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		status, code, msg = http.StatusGatewayTimeout, "upstream_timeout", "The upstream API did not answer in time."
	}
	id := ""
	if c != nil {
		id = c.id
		c.status = status
		p.opts.Metrics.upstream(c.kind, status, time.Since(c.sent))
		p.settle(c, bill{}, Refunded)
		p.setHeadersAfterSettle(w.Header(), c)
	}
	p.log.Warn("upstream failed; refunded", "request_id", id, "error", err)
	writeError(w, dialectOf(r), status, "server_error", code, msg+" The request was not charged.")
}

// onClose is a response body that calls done once it is closed, reading
// from reader if set.
type onClose struct {
	io.ReadCloser
	reader io.Reader
	done   func()
}

func (b *onClose) Read(p []byte) (int, error) {
	if b.reader != nil {
		return b.reader.Read(p)
	}
	return b.ReadCloser.Read(p)
}

func (b *onClose) Close() error {
	err := b.ReadCloser.Close()
	if b.done != nil {
		b.done()
	}
	return err
}
