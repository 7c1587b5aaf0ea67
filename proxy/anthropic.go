package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// This file reads Anthropic's Messages API: the estimate of a request, as
// the OpenAI shapes' is in estimate.go. Claude's tokenizer is not public:
// texts are counted with the default BPE encoding, which is close to it for
// English, and the usage the upstream reports settles the difference.

// block is one content block of an Anthropic message (or of a system
// prompt): text, thinking, a tool call with its input, or a tool's result
// with its own content. Images and documents count nothing here.
type block struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	Thinking string          `json:"thinking"`
	Name     string          `json:"name"`
	Input    json.RawMessage `json:"input"`
	Content  json.RawMessage `json:"content"`
}

// anthropicTool is a tool definition: a client tool's name, description and
// input schema, or a server tool (web search, ...) known by its name.
type anthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// estimateMessages counts a Messages API request: the system prompt, each
// message framed as a chat message is (3 tokens, its role, its blocks), the
// tools' names, descriptions and input schemas; the reply is max_tokens,
// which the API requires (the proxy's default if it is missing).
func (t counter) estimateMessages(e Estimate, b callBody, defaultMax int64) (Estimate, error) {
	system, err := blockTexts(b.System, 0)
	if err != nil {
		return Estimate{}, &errBadBody{reason: "system: " + err.Error()}
	}
	texts := system
	for i, m := range b.Messages {
		parts, err := blockTexts(m.Content, 0)
		if err != nil {
			return Estimate{}, &errBadBody{reason: fmt.Sprintf("messages[%d].content: %v", i, err)}
		}
		texts = append(append(texts, m.Role), parts...)
	}
	toolTexts, err := anthropicToolTexts(b.Tools)
	if err != nil {
		return Estimate{}, err
	}
	total := int64(tokensReplyPrime + tokensPerMessage*len(b.Messages))
	for _, s := range append(texts, toolTexts...) {
		n, err := t.Count(b.Model, s)
		if err != nil {
			return Estimate{}, err
		}
		total = addSat(total, n)
	}
	e.Prompt = total
	if err := checkParams(b); err != nil {
		return Estimate{}, err
	}
	e.Completion, e.CompletionSet = completion(Messages, b, defaultMax)
	return e, nil
}

// maxBlockDepth bounds tool results nested in tool results.
const maxBlockDepth = 8

// blockTexts returns the texts of a content: a string, or a list of blocks
// whose text, thinking, tool names, tool inputs (as JSON) and tool results
// count.
func blockTexts(raw json.RawMessage, depth int) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || bytes.Equal(raw, []byte("null")):
		return nil, nil
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("want a string or a list of content blocks: %w", err)
		}
		return []string{s}, nil
	case depth >= maxBlockDepth:
		return nil, fmt.Errorf("tool results nested deeper than %d", maxBlockDepth)
	}
	var blocks []block
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, fmt.Errorf("want a string or a list of content blocks: %w", err)
	}
	var texts []string
	for _, bl := range blocks {
		texts = append(texts, bl.Text, bl.Thinking, bl.Name)
		if len(bl.Input) > 0 {
			texts = append(texts, string(bl.Input))
		}
		inner, err := blockTexts(bl.Content, depth+1)
		if err != nil {
			return nil, err
		}
		texts = append(texts, inner...)
	}
	return texts, nil
}

// anthropicToolTexts returns the texts of tool definitions: name,
// description and input schema (as JSON) of each.
func anthropicToolTexts(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var tools []anthropicTool
	if err := json.Unmarshal(raw, &tools); err != nil {
		return nil, &errBadBody{reason: fmt.Sprintf("tools: want a list of tool definitions: %v", err)}
	}
	texts := make([]string, 0, 3*len(tools))
	for _, tool := range tools {
		texts = append(texts, tool.Name, tool.Description, string(tool.InputSchema))
	}
	return texts, nil
}
