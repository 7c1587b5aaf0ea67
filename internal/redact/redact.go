// Package redact shows secrets, such as api keys, without giving them away.
package redact

import (
	"strconv"
	"strings"
)

// PlaneSecretPrefix starts every quota-plane secret (plane.SecretPrefix,
// which this package cannot import): Hint shows nothing past it.
const PlaneSecretPrefix = "tl-"

// Hint shows at most the first 4 bytes of secret, never more than a quarter
// of it, and its length: "sk-live-0123456789abcdef" is "sk-l…(24 bytes)".
// Of a plane secret it shows the prefix only: "tl-…(67 bytes)".
func Hint(secret string) string {
	n := min(4, len(secret)/4)
	if strings.HasPrefix(secret, PlaneSecretPrefix) {
		n = min(n, len(PlaneSecretPrefix))
	}
	return secret[:n] + "…(" + strconv.Itoa(len(secret)) + " bytes)"
}
