package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/tokenizer"
)

// Kind is the kind of API call a request path names.
type Kind uint8

// The kinds of call. Paths are matched by their end, so that both
// /v1/chat/completions and an upstream's own prefix (such as Azure's
// /openai/deployments/x/chat/completions) are recognised.
const (
	// Passthrough is any other path: forwarded with request-count limits
	// only, since its token cost is unknown.
	Passthrough Kind = iota
	// Chat is /chat/completions.
	Chat
	// Completions is the legacy /completions.
	Completions
	// Embeddings is /embeddings.
	Embeddings
	// Responses is the Responses API, /responses.
	Responses
	// Messages is Anthropic's Messages API, /v1/messages.
	Messages
)

// String returns the kind's name, as in logs.
func (k Kind) String() string {
	return [...]string{"passthrough", "chat", "completions", "embeddings", "responses", "messages"}[k]
}

// KindOf returns the kind of a POST to path; any other method is a
// Passthrough.
func KindOf(method, path string) Kind {
	if method != "POST" {
		return Passthrough
	}
	path = strings.TrimSuffix(path, "/")
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		return Chat
	case strings.HasSuffix(path, "/completions"):
		return Completions
	case strings.HasSuffix(path, "/embeddings"):
		return Embeddings
	case strings.HasSuffix(path, "/responses"):
		return Responses
	case path == "/v1/messages" || path == "/messages":
		// Not any path ending in /messages: OpenAI's
		// /v1/threads/{id}/messages is an Assistants API call.
		return Messages
	}
	return Passthrough
}

// Chat message overheads from OpenAI's cookbook ("How to count tokens with
// tiktoken"): every message is framed as <|start|>{role}\n{content}<|end|>\n,
// a name costs one more token, and every reply is primed with
// <|start|>assistant<|message|>.
const (
	tokensPerMessage = 3
	tokensPerName    = 1
	tokensReplyPrime = 3
)

// legacyDefaultMaxTokens is the legacy completions API's default max_tokens.
const legacyDefaultMaxTokens = 16

// callBody is the part of a request body the proxy reads.
type callBody struct {
	Model               string          `json:"model"`
	Messages            []message       `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	Input               json.RawMessage `json:"input"`
	Instructions        string          `json:"instructions"`
	System              json.RawMessage `json:"system"`
	Tools               json.RawMessage `json:"tools"`
	Functions           json.RawMessage `json:"functions"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	MaxOutputTokens     *int64          `json:"max_output_tokens"`
	N                   *int64          `json:"n"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// message is a chat message, or an input item of the Responses API.
type message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name"`
	ToolCallID string          `json:"tool_call_id"`
	Refusal    string          `json:"refusal"`
	ToolCalls  []struct {
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	// Responses API items other than messages.
	Arguments string `json:"arguments"`
	Output    string `json:"output"`
}

// contentPart is one part of a multi-part content: only text is counted.
type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// Estimate is what a request is expected to cost, before it is forwarded.
type Estimate struct {
	// Model is the request's model ("" if it names none).
	Model string
	// Prompt is the counted input: messages with their overheads, the
	// prompt, the embeddings' input, the tools' definitions.
	Prompt int64
	// Completion is the most the reply may use: max_tokens (or
	// max_completion_tokens, max_output_tokens) times n, or the proxy's
	// default when the request sets none (see Completion). Zero for
	// embeddings.
	Completion int64
	// CompletionSet reports whether the request set its maximum.
	CompletionSet bool
	// Stream reports a streamed request; IncludeUsage that its client
	// asked for the usage chunk itself.
	Stream, IncludeUsage bool
}

// Total is the estimate to reserve: Prompt + Completion, at most
// tokenlimit.MaxCost (a request that large is then denied as one no budget
// can ever admit).
func (e Estimate) Total() int64 { return min(addSat(e.Prompt, e.Completion), tokenlimit.MaxCost) }

// addSat returns a + b for non-negative a and b, math.MaxInt64 if that
// overflows.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Bounds of a request's parameters, checked before they are multiplied.
const (
	// MaxN is the largest n (replies per request) the proxy accepts;
	// OpenAI's own bound is 128.
	MaxN = 128
	// MaxReplyTokens is the largest max_tokens (max_completion_tokens,
	// max_output_tokens) it accepts: tokenlimit.MaxCost, 2^40.
	MaxReplyTokens = tokenlimit.MaxCost
)

// errBadBody marks a request body the proxy cannot read, or a parameter it
// does not accept (param names it).
type errBadBody struct{ reason, param string }

func (e *errBadBody) Error() string { return e.reason }

// counter counts the tokens of a request's parts: its messages, inputs and
// tool definitions.
type counter struct{ *tokenizer.Tokenizer }

// estimate parses body, a request of kind k, and counts its prompt. When the
// request sets no maximum, Completion is n × defaultMax (16 for the legacy
// completions API, which defaults to it), and CompletionSet is false.
func (t counter) estimate(k Kind, body []byte, defaultMax int64) (Estimate, error) {
	var b callBody
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&b); err != nil {
		return Estimate{}, &errBadBody{reason: fmt.Sprintf("the request body is not a JSON object of the %s API: %v", k, err)}
	}
	e := Estimate{Model: b.Model, Stream: b.Stream, IncludeUsage: b.StreamOptions != nil && b.StreamOptions.IncludeUsage}
	var err error
	switch k {
	case Chat:
		e.Prompt, err = t.countMessages(b.Model, b.Messages)
	case Completions:
		e.Prompt, err = t.countInput(b.Model, b.Prompt)
	case Embeddings:
		e.Prompt, err = t.countInput(b.Model, b.Input)
		return e, err
	case Responses:
		e.Prompt, err = t.countResponsesInput(b.Model, b.Instructions, b.Input)
	case Messages:
		return t.estimateMessages(e, b, defaultMax)
	}
	if err != nil {
		return Estimate{}, err
	}
	for _, defs := range []json.RawMessage{b.Tools, b.Functions} {
		n, err := t.countTools(b.Model, defs)
		if err != nil {
			return Estimate{}, err
		}
		e.Prompt = addSat(e.Prompt, n)
	}
	if err := checkParams(b); err != nil {
		return Estimate{}, err
	}
	e.Completion, e.CompletionSet = completion(k, b, defaultMax)
	return e, nil
}

// checkParams rejects an n or a reply maximum too large to multiply safely.
func checkParams(b callBody) error {
	if b.N != nil && *b.N > MaxN {
		return &errBadBody{reason: fmt.Sprintf("Invalid 'n': integer above maximum value. Expected a value <= %d, but got %d instead.", MaxN, *b.N), param: "n"}
	}
	for _, p := range []struct {
		name string
		v    *int64
	}{{"max_tokens", b.MaxTokens}, {"max_completion_tokens", b.MaxCompletionTokens}, {"max_output_tokens", b.MaxOutputTokens}} {
		if p.v != nil && *p.v > MaxReplyTokens {
			return &errBadBody{reason: fmt.Sprintf("Invalid '%s': integer above maximum value. Expected a value <= %d, but got %d instead.", p.name, int64(MaxReplyTokens), *p.v), param: p.name}
		}
	}
	return nil
}

// completion returns the most tokens the reply may use and whether the
// request said so itself.
func completion(k Kind, b callBody, defaultMax int64) (int64, bool) {
	n := int64(1)
	if b.N != nil && *b.N > 1 {
		n = *b.N
	}
	for _, m := range []*int64{b.MaxCompletionTokens, b.MaxTokens, b.MaxOutputTokens} {
		if m != nil && *m >= 0 {
			return n * *m, true
		}
	}
	if k == Completions {
		return n * legacyDefaultMaxTokens, false
	}
	return n * defaultMax, false
}

// countMessages counts chat messages as OpenAI's cookbook does: 3 tokens per
// message, the tokens of each of its fields, 1 more for a name, and 3 to
// prime the reply. Text parts of multi-part contents are counted; images and
// audio are not (the usage the upstream reports settles them).
func (t counter) countMessages(model string, msgs []message) (int64, error) {
	total := int64(tokensReplyPrime)
	for _, m := range msgs {
		n, err := t.countMessage(model, m)
		if err != nil {
			return 0, err
		}
		total += tokensPerMessage + n
	}
	return total, nil
}

func (t counter) countMessage(model string, m message) (int64, error) {
	texts := []string{m.Role, m.Name, m.ToolCallID, m.Refusal, m.Arguments, m.Output}
	for _, c := range m.ToolCalls {
		texts = append(texts, c.Function.Name, c.Function.Arguments)
	}
	parts, err := contentTexts(m.Content)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, s := range append(texts, parts...) {
		n, err := t.Count(model, s)
		if err != nil {
			return 0, err
		}
		total += n
	}
	if m.Name != "" {
		total += tokensPerName
	}
	return total, nil
}

// contentTexts returns the texts of a message's content: a string, or a list
// of parts of which the text ones count.
func contentTexts(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || bytes.Equal(raw, []byte("null")):
		return nil, nil
	case raw[0] == '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return []string{s}, badContent(err)
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, badContent(err)
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		texts = append(texts, p.Text)
	}
	return texts, nil
}

func badContent(err error) error {
	if err == nil {
		return nil
	}
	return &errBadBody{reason: fmt.Sprintf("a message's content is neither a string nor a list of parts: %v", err)}
}

// countInput counts a prompt or an embeddings input: a string, a list of
// strings, a list of token ids, or a list of lists of token ids.
func (t counter) countInput(model string, raw json.RawMessage) (int64, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return 0, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return t.Count(model, one)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return 0, &errBadBody{reason: fmt.Sprintf("the input is neither a string nor a list: %v", err)}
	}
	var total int64
	for _, it := range items {
		var s string
		var ids []int64
		switch {
		case json.Unmarshal(it, &s) == nil:
			n, err := t.Count(model, s)
			if err != nil {
				return 0, err
			}
			total += n
		case json.Unmarshal(it, &ids) == nil:
			total += int64(len(ids))
		default: // a token id of a single tokenized input
			total++
		}
	}
	return total, nil
}

// countResponsesInput counts the Responses API's instructions and input: a
// string (a user message), or a list of items (messages counted as chat
// messages; tool calls and their outputs by their text).
func (t counter) countResponsesInput(model, instructions string, raw json.RawMessage) (int64, error) {
	total, err := t.Count(model, instructions)
	if err != nil {
		return 0, err
	}
	raw = bytes.TrimSpace(raw)
	var items []message
	switch {
	case len(raw) == 0:
	case raw[0] == '"':
		items = []message{{Role: "user", Content: raw}}
	default:
		if err := json.Unmarshal(raw, &items); err != nil {
			return 0, &errBadBody{reason: fmt.Sprintf("input is neither a string nor a list of items: %v", err)}
		}
	}
	n, err := t.countMessages(model, items)
	return total + n, err
}

// toolDef is a tool of the chat API ({type, function: {...}}), of the
// Responses API ({type, name, description, parameters}) or a legacy function.
type toolDef struct {
	Function *functionDef `json:"function"`
	functionDef
}

type functionDef struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Parameters  struct {
		Properties map[string]struct {
			Type        any      `json:"type"`
			Description string   `json:"description"`
			Enum        []string `json:"enum"`
		} `json:"properties"`
	} `json:"parameters"`
}

// Function definitions' overheads from OpenAI's cookbook ("Counting tokens
// for chat completions with tool calls"), per encoding.
type toolOverheads struct{ function, properties, property, enum, enumItem, end int64 }

var toolCosts = map[tokenizer.Encoding]toolOverheads{
	tokenizer.O200kBase:  {function: 7, properties: 3, property: 3, enum: -3, enumItem: 3, end: 12},
	tokenizer.CL100kBase: {function: 10, properties: 3, property: 3, enum: -3, enumItem: 3, end: 12},
}

// countTools counts function definitions as OpenAI's cookbook does: each
// function's "name:description", each property's "name:type:description"
// and enum values, with fixed overheads. Tools that are not functions (such
// as web search) count nothing.
func (t counter) countTools(model string, raw json.RawMessage) (int64, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return 0, nil
	}
	var tools []toolDef
	if err := json.Unmarshal(raw, &tools); err != nil {
		return 0, &errBadBody{reason: fmt.Sprintf("tools: want a list of tool definitions: %v", err)}
	}
	enc, err := t.Load(model)
	if err != nil {
		return 0, err
	}
	cost := toolCosts[enc]
	var total int64
	count := func(s string) {
		n, _ := t.Count(model, s) // cannot fail: the encoding is loaded
		total += n
	}
	for _, tool := range tools {
		f := tool.functionDef
		if tool.Function != nil {
			f = *tool.Function
		}
		if f.Name == "" {
			continue
		}
		total += cost.function
		count(f.Name + ":" + strings.TrimSuffix(f.Description, "."))
		if len(f.Parameters.Properties) > 0 {
			total += cost.properties
		}
		for name, p := range f.Parameters.Properties {
			total += cost.property
			if len(p.Enum) > 0 {
				total += cost.enum
				for _, item := range p.Enum {
					total += cost.enumItem
					count(item)
				}
			}
			count(fmt.Sprintf("%s:%v:%s", name, p.Type, strings.TrimSuffix(p.Description, ".")))
		}
	}
	if total > 0 {
		total += cost.end
	}
	return total, nil
}
