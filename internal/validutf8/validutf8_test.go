package validutf8

import (
	"testing"
	"unicode/utf8"
)

// String agrees with utf8.ValidString on ASCII, valid and invalid UTF-8.
func TestStringAgreesWithValidString(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"", "a", "user-1234", "/v1/chat", "\x7f", "\x80", "é", "user-é", "\xc3", "\xc3\x28",
		"\xed\xa0\x80", "\xf4\x90\x80\x80", "0123456789abcdef\xff", "héllo wörld, a longer value",
	} {
		if got, want := String(s), utf8.ValidString(s); got != want {
			t.Errorf("String(%q) = %v, want %v", s, got, want)
		}
	}
}

func FuzzString(f *testing.F) {
	f.Add("user-1234")
	f.Add("\xc3\x28")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := String(s), utf8.ValidString(s); got != want {
			t.Fatalf("String(%q) = %v, want %v", s, got, want)
		}
	})
}
