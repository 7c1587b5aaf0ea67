package redact

import (
	"strings"
	"testing"
)

func TestHint(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                               "…(0 bytes)",
		"abc":                            "…(3 bytes)",
		"sk-12345":                       "sk…(8 bytes)",
		"sk-live-0123456789abcdef":       "sk-l…(24 bytes)",
		"tl-" + strings.Repeat("ab", 32): "tl-…(67 bytes)",
		"tl-1234":                        "t…(7 bytes)",
	} {
		if got := Hint(in); got != want {
			t.Errorf("Hint(%q) = %q, want %q", in, got, want)
		}
	}
}
