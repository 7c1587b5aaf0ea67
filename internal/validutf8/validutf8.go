// Package validutf8 checks strings for valid UTF-8 as utf8.ValidString
// does, quicker on the short ASCII strings that descriptors and their
// names usually are: utf8.ValidString steps through them byte by byte,
// testing each, where String ORs them together first.
package validutf8

import "unicode/utf8"

// String reports whether s is valid UTF-8, as utf8.ValidString(s).
func String(s string) bool {
	var or byte
	for i := 0; i < len(s); i++ {
		or |= s[i]
	}
	return or < utf8.RuneSelf || utf8.ValidString(s)
}
