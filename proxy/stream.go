package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// MaxEventBytes bounds one server-sent event of a streamed response. An
// upstream that sends more without ending the event (no blank line, or no
// newline at all) is treated as a cut stream: the client's response ends
// there and the call settles to what was forwarded.
const MaxEventBytes = 1 << 20

// maxUncounted bounds the forwarded text a stream keeps: past it, the text
// is counted and let go (a token cut at that point may count as two).
const maxUncounted = 64 << 10

// errEventTooLarge ends a stream whose event exceeds MaxEventBytes.
var errEventTooLarge = errors.New("proxy: the upstream sent a server-sent event larger than MaxEventBytes")

// eventStream is the body of a streamed response (server-sent events) on
// its way to the client. It passes events through as they arrive, one per
// Read, so that the reverse proxy flushes each at once; drops the usage
// chunk the proxy asked for on the client's behalf; records the final
// usage; and keeps the text of the deltas the client has received. When it
// is closed it settles the call: to the final usage if the upstream sent
// it, else to the prompt plus the tokens of the forwarded text.
//
// An event counts as forwarded once the reverse proxy asks for more after
// it: it reads again only when it has written (and flushed) everything it
// read before.
type eventStream struct {
	p   *Proxy
	c   *call
	up  io.ReadCloser
	br  *bufio.Reader
	out []byte // the current event's bytes not yet handed out

	pending        []string        // text of the event being handed out
	pendingTokens  int64           // its tokens, when pendingCounted
	pendingCounted bool            // the pending text was counted (see paid)
	forwarded      strings.Builder // text the client has received, not yet counted
	counted        int64           // tokens of the text counted so far
	usage          *usage          // the final usage, once the upstream sent it
	started        *usage          // the usage of Anthropic's message_start
	event          []byte
	meta           streamMeta // what an ending repeats (stop.go)
	freeOut        int64      // output tokens the reservations pay for, when freeKnown
	freeKnown      bool
	upClosed       bool
}

func newEventStream(p *Proxy, c *call, up io.ReadCloser) *eventStream {
	return &eventStream{p: p, c: c, up: up, br: bufio.NewReader(up), meta: streamMeta{openBlock: -1}}
}

// Read hands out the current event, or the next one the client should see;
// or, when the budgets cannot pay for that one, the end of the stream.
func (s *eventStream) Read(p []byte) (int, error) {
	if len(s.out) == 0 {
		s.delivered()
		if s.c.growth.stopped {
			return 0, io.EOF
		}
		if err := s.next(); err != nil {
			return 0, err
		}
		if !s.paid() {
			s.stop()
		}
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

// delivered accounts for the text of the event the client has now received.
func (s *eventStream) delivered() {
	if s.pendingCounted {
		s.counted += s.pendingTokens
	} else {
		for _, t := range s.pending {
			s.forwarded.WriteString(t)
		}
	}
	s.pending, s.pendingCounted = s.pending[:0], false
	if s.forwarded.Len() >= maxUncounted {
		s.countForwarded()
	}
}

// countForwarded counts the forwarded text not yet counted, and lets it go.
func (s *eventStream) countForwarded() {
	if s.forwarded.Len() > 0 {
		s.counted += s.p.count(s.c, s.forwarded.String())
		s.forwarded.Reset()
	}
}

// next reads events until one is to be passed on, and makes it current. At
// the end of the stream, a last event without its blank line is passed on
// as it is; a stream that fails mid-event loses that event.
func (s *eventStream) next() error {
	for {
		line, err := s.br.ReadSlice('\n')
		s.event = append(s.event, line...)
		if len(s.event) > MaxEventBytes {
			s.event = nil // let the oversized buffer go
			return errEventTooLarge
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue // a long line goes on
		case err != nil && (err != io.EOF || len(s.event) == 0):
			s.event = s.event[:0]
			return err
		case err == nil && len(bytes.TrimRight(line, "\r\n")) > 0:
			continue // the event goes on
		}
		keep := s.inspect(s.event)
		if keep {
			s.out = append(s.out[:0], s.event...)
		}
		s.event = s.event[:0]
		if keep {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// streamChunk is what the proxy reads of an event's data: a chat or
// completions chunk, or a Responses API event.
type streamChunk struct {
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content          string `json:"content"`
			Refusal          string `json:"refusal"`
			ReasoningContent string `json:"reasoning_content"`
			ToolCalls        []struct {
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		Text string `json:"text"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
	// The Responses API's events.
	Type           string          `json:"type"`
	SequenceNumber int64           `json:"sequence_number"`
	Delta          json.RawMessage `json:"delta"`
	Response       json.RawMessage `json:"response"`
	// Anthropic's content block index.
	Index int `json:"index"`
	// Anthropic's message_start.
	Message *struct {
		Usage *usage `json:"usage"`
	} `json:"message"`
}

// anthropicDelta is the delta of Anthropic's content_block_delta: text,
// a tool call's input JSON, or thinking.
type anthropicDelta struct {
	Text        string `json:"text"`
	PartialJSON string `json:"partial_json"`
	Thinking    string `json:"thinking"`
}

// inspect reads one event: it records its usage and its text, and reports
// whether the client should see it.
func (s *eventStream) inspect(event []byte) bool {
	data := eventData(event)
	if len(data) == 0 || data[0] != '{' {
		return true // comments, [DONE], anything else: as it is
	}
	var ch streamChunk
	if json.Unmarshal(data, &ch) != nil {
		return true
	}
	s.meta.note(&ch, s.c.kind, data)
	if s.c.kind == Messages {
		s.inspectAnthropic(ch)
		return true
	}
	if len(ch.Response) > 0 {
		var r struct {
			Usage *usage `json:"usage"`
		}
		if json.Unmarshal(ch.Response, &r) == nil && r.Usage != nil {
			s.usage = r.Usage
		}
	}
	if ch.Usage != nil {
		s.usage = ch.Usage
		if s.c.injected && ch.Type == "" && len(ch.Choices) == 0 {
			return false // the usage chunk the client did not ask for
		}
	}
	for _, c := range ch.Choices {
		d := c.Delta
		s.pending = append(s.pending, d.Content, d.Refusal, d.ReasoningContent, c.Text)
		for _, tc := range d.ToolCalls {
			s.pending = append(s.pending, tc.Function.Name, tc.Function.Arguments)
		}
	}
	if strings.HasSuffix(ch.Type, ".delta") && len(ch.Delta) > 0 && ch.Delta[0] == '"' {
		var text string
		if json.Unmarshal(ch.Delta, &text) == nil {
			s.pending = append(s.pending, text)
		}
	}
	return true
}

// inspectAnthropic reads an event of Anthropic's Messages stream:
// message_start carries the input tokens (and the first output token),
// content_block_delta the text, message_delta the output tokens so far
// (and, from newer API versions, the input tokens again). The usage is
// final once a message_delta came.
func (s *eventStream) inspectAnthropic(ch streamChunk) {
	switch ch.Type {
	case "message_start":
		if ch.Message != nil && ch.Message.Usage != nil {
			s.started, s.freeKnown = ch.Message.Usage, false
		}
	case "content_block_delta":
		var d anthropicDelta
		if json.Unmarshal(ch.Delta, &d) == nil {
			s.pending = append(s.pending, d.Text, d.PartialJSON, d.Thinking)
		}
	case "message_delta":
		if ch.Usage == nil {
			return
		}
		final := *ch.Usage
		if s.started != nil && final.InputTokens+final.CacheCreationInputTokens+final.CacheReadInputTokens == 0 {
			final.InputTokens = s.started.InputTokens
			final.CacheCreationInputTokens = s.started.CacheCreationInputTokens
			final.CacheReadInputTokens = s.started.CacheReadInputTokens
		}
		s.usage = &final
	}
}

// eventData returns the data of a server-sent event: its data fields'
// values joined by newlines.
func eventData(event []byte) []byte {
	var data []byte
	for len(event) > 0 {
		line := event
		if i := bytes.IndexByte(event, '\n'); i >= 0 {
			line, event = event[:i], event[i+1:]
		} else {
			event = nil
		}
		line = bytes.TrimRight(line, "\r")
		v, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		v = bytes.TrimPrefix(v, []byte(" "))
		if data != nil {
			data = append(data, '\n')
		}
		data = append(data, v...)
	}
	return data
}

// input returns the call's input: the tokens Anthropic's message_start
// reported, else the counted prompt.
func (s *eventStream) input() bill {
	if s.started.believable() && s.started.bill().Input > 0 {
		b := s.started.bill()
		b.Output, b.Reasoning = 0, 0
		return b
	}
	return bill{Input: s.c.est.Prompt}
}

// closeUpstream closes the upstream body, once: a stream not read to its
// end cancels its upstream request.
func (s *eventStream) closeUpstream() error {
	if s.upClosed {
		return nil
	}
	s.upClosed = true
	return s.up.Close()
}

// Close closes the upstream body and settles the call: to the final usage
// if the upstream sent it, else to its input and the tokens of the text
// forwarded (a stream cut, left by its client or stopped at its budget).
func (s *eventStream) Close() error {
	err := s.closeUpstream()
	if b, ok := s.p.settleable(s.usage); ok && !s.c.growth.stopped {
		s.p.settle(s.c, b, ByUsage)
		return err
	}
	used := s.input()
	used.Output = addSat(s.counted, s.p.count(s.c, s.forwarded.String()))
	s.p.settle(s.c, used, ByCount)
	return err
}
