package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/service"
)

// This file stops a stream at its budget. A stream may deliver what its
// call reserved: the estimate's tokens (prompt and reply) and their price.
// Its output is counted as the deltas arrive; before a delta that would
// pass the reservation goes out, the proxy grows the reservation by a
// chunk, reserved in one store call on the call's stop limits (budgets in
// tokens or usd whose on_exhaust is stop) under an id of its own. When the
// budgets cannot pay for the delta, the stream ends there, in the
// provider's shape, and its upstream request is closed. Settling the call
// settles its own reservation to what was delivered, then refunds each
// chunk whole: every budget ends charged what the call consumed, once.

// GrowthChunk is how many output tokens one growth of a stream's
// reservation asks for (their price on usd budgets, their cost on budgets
// counting output tokens or an expression of a call's tokens) (more if one delta needs more). When the budgets
// cannot pay a whole chunk, the proxy asks once more for what the tightest
// of them still holds, if that pays for the delta.
const GrowthChunk = 512

// growth is what a call's stream reserved beyond its estimate.
type growth struct {
	// granted are the growth reservations granted, refunded through
	// their decisions when the call settles (what leases paid goes back
	// to them); lost are the ids of those whose answer was lost, refunded
	// by id (a settle of an id that holds nothing leaves a tombstone, so
	// a late one charges nothing).
	granted []service.Decision
	lost    []string
	// tokens and spend are what the granted growths hold.
	tokens, spend int64
	// tries numbers the growth ids.
	tries int
	// unbounded: no stop limit applies to the call; the stream is never
	// stopped.
	unbounded bool
	// stopped: the stream was ended at its budget.
	stopped bool
}

// paid reports whether the reservations pay for the event about to be
// handed out (its text is s.pending), growing them if they must. The text
// is bounded by its bytes (a token is at least one byte) and counted only
// when that bound passes what is reserved.
func (s *eventStream) paid() bool {
	g := &s.c.growth
	if g.unbounded || len(s.pending) == 0 {
		return true
	}
	n := 0
	for _, t := range s.pending {
		n += len(t)
	}
	if n == 0 || s.counted+int64(s.forwarded.Len()+n) <= s.free() {
		return true
	}
	s.countForwarded()
	s.pendingTokens, s.pendingCounted = s.p.count(s.c, strings.Join(s.pending, "")), true
	need := s.counted + s.pendingTokens - s.free()
	if need <= 0 {
		return true
	}
	s.freeKnown = false
	return s.p.grow(s.c, need)
}

// free returns the output tokens the reservations pay for: what they hold
// in tokens less the input, and, for a priced model, what their spend buys
// at the output price once the input is paid.
func (s *eventStream) free() int64 {
	if s.freeKnown {
		return s.freeOut
	}
	in := s.input()
	c := s.c
	s.freeOut = c.est.Total() + c.growth.tokens - in.Input
	if _, price, ok := s.p.svc.PriceOf(c.est.Model); ok && price.Output > 0 {
		paid, _ := s.p.price(c, in)
		s.freeOut = min(s.freeOut, (c.req.Spend+c.growth.spend-paid)*1_000_000/price.Output)
	}
	s.freeKnown = true
	return s.freeOut
}

// grow reserves at least need more output tokens on c's stop limits: a
// GrowthChunk, or what the tightest of them still holds; false when they
// cannot pay for need.
func (p *Proxy) grow(c *call, need int64) bool {
	size := max(need, GrowthChunk)
	d, ok := p.reserveGrowth(c, size)
	if ok || d == nil {
		return ok
	}
	if fit := p.fit(c, *d); fit >= need && fit < size {
		_, ok = p.reserveGrowth(c, fit)
	}
	return ok
}

// reserveGrowth reserves tokens more output tokens, and their price, on c's
// stop limits. It returns the decision (nil when the store failed) and
// whether the tokens are paid for.
func (p *Proxy) reserveGrowth(c *call, tokens int64) (*service.Decision, bool) {
	g := &c.growth
	g.tries++
	id := c.id + "/grow-" + strconv.Itoa(g.tries)
	spend, _ := p.price(c, bill{Output: tokens})
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.SettleTimeout)
	defer cancel()
	d, err := p.svc.ReserveWith(ctx, service.ReserveOptions{ID: id, StopLimits: true, InProcess: true},
		service.Request{Descriptors: c.req.Descriptors, Cost: tokens, Spend: spend, Usage: &config.Usage{Output: tokens}})
	switch {
	case err != nil:
		g.lost = append(g.lost, id) // it may have landed
		p.log.Error("growing a stream's reservation failed; the stream stops", "request_id", c.id, "error", err)
		return nil, false
	case d.Allowed && len(d.Limits) == 0:
		g.unbounded = true
		return &d, true
	case d.Allowed:
		if d.Reserved {
			g.granted = append(g.granted, d)
		}
		g.tokens, g.spend = g.tokens+tokens, g.spend+spend
		return &d, true
	}
	return &d, false
}

// fit returns the most output tokens every stop limit that denied d still
// pays for: a budget in tokens what it holds, one in usd what it holds
// buys at the model's output price.
func (p *Proxy) fit(c *call, d service.Decision) int64 {
	if d.Unavailable || d.KeySpaceFull {
		return 0
	}
	_, price, priced := p.svc.PriceOf(c.est.Model)
	fit := int64(math.MaxInt64)
	for _, o := range d.Limits {
		if o.Allowed || o.Shadow {
			continue
		}
		if u, _ := p.svc.UnitOf(o.Name); u == service.USD && priced && price.Output > 0 {
			fit = min(fit, o.Remaining*1_000_000/price.Output)
		} else {
			fit = min(fit, o.Remaining)
		}
	}
	return fit
}

// refundGrowth refunds each growth reservation of c whole, once c's own
// reservation is settled to what it consumed.
func (p *Proxy) refundGrowth(ctx context.Context, c *call) error {
	var first error
	for _, d := range c.growth.granted {
		if _, err := p.svc.CancelReserved(ctx, d); err != nil && first == nil {
			first = fmt.Errorf("refund growth %s: %w", d.ReservationID, err)
		}
	}
	for _, id := range c.growth.lost {
		if _, err := p.svc.Cancel(ctx, id); err != nil && first == nil {
			first = fmt.Errorf("refund growth %s: %w", id, err)
		}
	}
	return first
}

// stop ends the stream at its budget: the event about to go out is
// dropped, the provider's end of a stream cut at its maximum takes its
// place, and the upstream request is closed.
func (s *eventStream) stop() {
	s.pending, s.pendingCounted = s.pending[:0], false
	s.countForwarded()
	s.out = append(s.out[:0], s.ending()...)
	s.c.growth.stopped = true
	s.closeUpstream()
}

// ending returns the events that end a stream cut at its maximum, in the
// call's API: chat and completions a last chunk whose finish_reason is
// "length" (and the usage chunk, if the client asked for it) then [DONE];
// the Responses API response.incomplete (reason max_output_tokens); the
// Messages API the open content block's content_block_stop, message_delta
// with stop_reason "max_tokens", then message_stop. Usage is the input
// reserved for and the output delivered, as the call is charged.
func (s *eventStream) ending() []byte {
	in, out := s.input().Input, s.counted
	m := &s.meta
	var b strings.Builder
	switch s.c.kind {
	case Messages:
		if m.openBlock >= 0 {
			fmt.Fprintf(&b, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":%d}\n\n", m.openBlock)
		}
		fmt.Fprintf(&b, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":%d}}\n\n", out)
		b.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	case Responses:
		var resp map[string]json.RawMessage
		if json.Unmarshal(m.response, &resp) != nil || resp == nil {
			resp = map[string]json.RawMessage{}
		}
		resp["status"] = json.RawMessage(`"incomplete"`)
		resp["incomplete_details"] = json.RawMessage(`{"reason":"max_output_tokens"}`)
		resp["usage"] = json.RawMessage(fmt.Sprintf(`{"input_tokens":%d,"input_tokens_details":{"cached_tokens":0},"output_tokens":%d,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":%d}`, in, out, in+out))
		data, _ := json.Marshal(resp)
		fmt.Fprintf(&b, "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"sequence_number\":%d,\"response\":%s}\n\n", m.sequence+1, data)
	default:
		s.chatEnding(&b, in, out)
	}
	return []byte(b.String())
}

// chatEnding writes the end of a chat or completions stream cut at its
// maximum: one finish chunk for every choice seen, the usage chunk if the
// client asked for usage, and [DONE].
func (s *eventStream) chatEnding(b *strings.Builder, in, out int64) {
	m := &s.meta
	object, choice := "chat.completion.chunk", `{"index":%d,"delta":{},"logprobs":null,"finish_reason":"length"}`
	if s.c.kind == Completions {
		object, choice = "text_completion", `{"index":%d,"text":"","logprobs":null,"finish_reason":"length"}`
	}
	id := m.chunkID
	if id.Object == "" {
		id.Object = object
	}
	head, _ := json.Marshal(id)
	head = head[:len(head)-1] // the object goes on
	choices := make([]string, max(m.choices, 1))
	for i := range choices {
		choices[i] = fmt.Sprintf(choice, i)
	}
	usage := ""
	withUsage := s.c.est.IncludeUsage && !s.c.injected
	if withUsage {
		usage = `,"usage":null`
	}
	fmt.Fprintf(b, "data: %s,\"choices\":[%s]%s}\n\n", head, strings.Join(choices, ","), usage)
	if withUsage {
		fmt.Fprintf(b, "data: %s,\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", head, in, out, in+out)
	}
	b.WriteString("data: [DONE]\n\n")
}

// streamMeta is what a stream's ending repeats of the stream: a chat or
// completions chunk's id, object, created and model and how many choices
// it has; the Responses API's response object and last sequence number;
// the Messages API's open content block (-1: none).
type streamMeta struct {
	chunkID   chunkID
	choices   int
	response  []byte
	sequence  int64
	openBlock int
}

// chunkID is what a chat or completions chunk says of its stream.
type chunkID struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
}

// note records what an event of a stream of kind k, ch read from data,
// tells of the stream's shape. A chunk's identity is read once, from the
// first chunk.
func (m *streamMeta) note(ch *streamChunk, k Kind, data []byte) {
	if (k == Chat || k == Completions) && m.chunkID.ID == "" && len(ch.Choices) > 0 {
		_ = json.Unmarshal(data, &m.chunkID)
	}
	for _, c := range ch.Choices {
		m.choices = max(m.choices, min(c.Index, MaxN-1)+1)
	}
	if m.response == nil && len(ch.Response) > 0 {
		m.response = append([]byte(nil), ch.Response...)
	}
	m.sequence = max(m.sequence, ch.SequenceNumber)
	switch ch.Type {
	case "content_block_start":
		m.openBlock = ch.Index
	case "content_block_stop":
		m.openBlock = -1
	}
}
