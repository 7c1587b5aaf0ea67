package redact_test

import (
	"testing"

	"github.com/tokenlimit/tokenlimit/internal/redact"
	"github.com/tokenlimit/tokenlimit/plane"
)

// TestPlaneSecretPrefix: Hint knows the plane's prefix, which it cannot
// import.
func TestPlaneSecretPrefix(t *testing.T) {
	if redact.PlaneSecretPrefix != plane.SecretPrefix {
		t.Errorf("redact.PlaneSecretPrefix %q, plane.SecretPrefix %q: want them equal", redact.PlaneSecretPrefix, plane.SecretPrefix)
	}
}
