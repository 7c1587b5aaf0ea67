// Package redact shows secrets, such as api keys, without giving them away.
package redact

import "strconv"

// Hint shows at most the first 4 bytes of secret, never more than a quarter
// of it, and its length: "sk-live-0123456789abcdef" is "sk-l…(24 bytes)".
func Hint(secret string) string {
	n := min(4, len(secret)/4)
	return secret[:n] + "…(" + strconv.Itoa(len(secret)) + " bytes)"
}
