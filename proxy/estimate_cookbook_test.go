package proxy

import (
	"encoding/json"
	"strings"
	"testing"
)

// cookbookMessages are the example of OpenAI's cookbook "How to count tokens
// with tiktoken", which the API reports as 129 prompt tokens for gpt-4 and
// gpt-3.5-turbo and 124 for gpt-4o and gpt-4o-mini.
const cookbookMessages = `[
 {"role": "system", "content": "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
 {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
 {"role": "system", "name": "example_assistant", "content": "Things working well together will increase revenue."},
 {"role": "system", "name": "example_user", "content": "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
 {"role": "system", "name": "example_assistant", "content": "Let's talk later when we're less busy about how to do better."},
 {"role": "user", "content": "This late pivot means we don't have time to boil the ocean for the client deliverable."}
]`

// cookbookTools is the cookbook's example of a request with tools, which the
// API reports as 105 prompt tokens for gpt-4 and gpt-3.5-turbo and 101 for
// gpt-4o and gpt-4o-mini.
const cookbookTools = `{"messages": [
  {"role": "system", "content": "You are a helpful assistant that can answer to questions about the weather."},
  {"role": "user", "content": "What's the weather like in San Francisco?"}
 ],
 "tools": [{"type": "function", "function": {
  "name": "get_current_weather",
  "description": "Get the current weather in a given location",
  "parameters": {"type": "object", "properties": {
    "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
    "unit": {"type": "string", "description": "The unit of temperature to return", "enum": ["celsius", "fahrenheit"]}
  }, "required": ["location"]}}}]}`

func TestEstimateToolsMatchesCookbook(t *testing.T) {
	t.Parallel()
	for model, want := range map[string]int64{"gpt-4": 105, "gpt-3.5-turbo": 105, "gpt-4o": 101, "gpt-4o-mini": 101} {
		body := strings.Replace(cookbookTools, "{", `{"model": "`+model+`", `, 1)
		e, err := testTokens.estimate(Chat, []byte(body), 0)
		if err != nil || e.Prompt != want {
			t.Errorf("estimate(%s).Prompt = %d, %v; want %d", model, e.Prompt, err, want)
		}
	}
}

func TestCountMessagesMatchesCookbook(t *testing.T) {
	t.Parallel()
	var msgs []message
	if err := json.Unmarshal([]byte(cookbookMessages), &msgs); err != nil {
		t.Fatal(err)
	}
	for model, want := range map[string]int64{"gpt-4": 129, "gpt-3.5-turbo": 129, "gpt-4o": 124, "gpt-4o-mini": 124} {
		got, err := testTokens.countMessages(model, msgs)
		if err != nil || got != want {
			t.Errorf("countMessages(%s) = %d, %v; want %d", model, got, err, want)
		}
	}
}
