package httpx

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestStrictBodies(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, body    string
		field, reason string // "" for accepted
	}{
		{"plain", `{"descriptors": {"user": "alice"}, "cost": 3}`, "", ""},
		{"same name in two objects", `{"requests": [{"cost": 1}, {"cost": 2}]}`, "", ""},
		{"same name at two depths", `{"a": {"a": 1}}`, "", ""},
		{"utf-8 text", `{"d": {"user": "zoë ✓ 😀"}}`, "", ""},
		{"escaped pair", `{"d": {"user": "\ud83d\ude00"}}`, "", ""},
		{"escaped text", `{"d": {"user": "a\"b\\c\u00e9\\ud800"}}`, "", ""},
		{"replacement char itself", "{\"d\": {\"user\": \"\ufffd\\ufffd\"}}", "", ""},
		{"duplicate at top", `{"cost": 1, "cost": 2}`, "cost", "appears twice"},
		{"duplicate descriptor", `{"descriptors": {"user": "a", "user": "b"}}`, "descriptors.user", "appears twice"},
		{"duplicate in an array element", `{"requests": [{"cost": 1}, {"cost": 1, "descriptors": {}, "cost": 2}]}`, "requests[1].cost", "appears twice"},
		{"raw 0xff", "{\"descriptors\": {\"user\": \"\xff\"}}", "descriptors.user", "not valid UTF-8"},
		{"raw 0xfe in an array", "{\"requests\": [{\"descriptors\": {\"user\": \"a\xfe\"}}]}", "requests[0].descriptors.user", "not valid UTF-8"},
		{"truncated sequence", "{\"id\": \"\xe2\x82\"}", "id", "not valid UTF-8"},
		{"lone high surrogate", `{"id": "\ud800"}`, "id", "not valid UTF-8"},
		{"lone low surrogate", `{"id": "x\uDC00"}`, "id", "not valid UTF-8"},
		{"high then not low", `{"id": "\ud800\u0041"}`, "id", "not valid UTF-8"},
		{"bad name", "{\"descriptors\": {\"us\xffer\": \"a\"}}", "descriptors", "member name is not valid UTF-8"},
		{"bad top-level name", "{\"\xff\": 1}", "body", "member name is not valid UTF-8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var v any
			if err := json.Unmarshal([]byte(c.body), &v); err != nil {
				t.Fatalf("a bug in the case: encoding/json refuses %q: %v", c.body, err)
			}
			e := strict([]byte(c.body))
			switch {
			case c.field == "" && e != nil:
				t.Fatalf("strict(%q) = %v, want nil", c.body, e)
			case c.field == "":
			case e == nil:
				t.Fatalf("strict(%q) = nil, want a 400 for %s", c.body, c.field)
			case e.Status != 400 || e.Field != c.field || !strings.Contains(e.Message, c.reason):
				t.Fatalf("strict(%q) = %d %v, want 400, field %s and a message with %q", c.body, e.Status, e, c.field, c.reason)
			}
		})
	}
}

// TestStrictLeavesSyntaxToTheDecoder: a malformed body is not strict's to
// report.
func TestStrictLeavesSyntaxToTheDecoder(t *testing.T) {
	t.Parallel()
	for _, body := range []string{``, `{`, `{"a": }`, `[1,,]`} {
		if e := strict([]byte(body)); e != nil {
			t.Errorf("strict(%q) = %v, want nil", body, e)
		}
	}
}
