package plane

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"strings"
)

// SecretPrefix starts every key secret, so that a gateway (and a secret
// scanner) tells them from other credentials.
const SecretPrefix = "tl-"

// secretBytes is the randomness of a secret: 32 bytes, 64 hex digits.
const secretBytes = 32

// newSecret returns a fresh secret, "tl-" and 64 hex digits of
// crypto/rand, and its digest.
func newSecret() (secret, digest string) {
	var b [secretBytes]byte
	rand.Read(b[:]) // never fails (crypto/rand's contract since Go 1.24)
	secret = SecretPrefix + hex.EncodeToString(b[:])
	return secret, Digest(secret)
}

// Digest is what the plane stores of a secret: its SHA-256, hex. A secret
// has 256 random bits, so an unsalted fast hash is enough: nothing can be
// guessed from it.
func Digest(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// IsSecret reports whether s has the form of a plane secret (it may still
// be unknown).
func IsSecret(s string) bool { return strings.HasPrefix(s, SecretPrefix) }

// sameDigest compares two raw digests in constant time.
func sameDigest(a, b []byte) bool {
	return subtle.ConstantTimeCompare(a, b) == 1
}

// newID returns a key's id: "key_" and 24 hex digits.
func newID() string {
	var b [12]byte
	rand.Read(b[:])
	return "key_" + hex.EncodeToString(b[:])
}

// KeyValue is the value of the api_key descriptor that keys a plane key's
// budgets: its id, not its secret, so that a rotation keeps its budgets.
func KeyValue(k *Key) string { return k.value }

// prepare fills k's derived fields: its descriptor value and raw digests.
func (k *Key) prepare() {
	k.value = "plane:" + k.ID
	k.raw, _ = rawDigest(k.Digest)
	k.prevRaw = [32]byte{}
	if k.PrevDigest != "" {
		k.prevRaw, _ = rawDigest(k.PrevDigest)
	}
}
