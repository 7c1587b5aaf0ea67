// Package httpx is the HTTP plumbing that tokenlimit's JSON endpoints share:
// the error shape {"error": {"field": ..., "message": ...}}, JSON answers,
// strict JSON bodies, the admin gate (token, loopback, bearer), the mapping
// of service errors to statuses, and request ids. The API (server/httpapi),
// the dashboard (web) and the proxy use it, so that each answers alike.
package httpx

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Error is an error answer: its status, and the field and message of the
// JSON body {"error": {"field": ..., "message": ...}}. Field names the
// offending part of the request as the client wrote it ("cost",
// "requests[1].descriptors.user", "body", "Authorization"); it is left out
// when no one part is at fault.
type Error struct {
	Status  int    `json:"-"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// Error returns "<field>: <message>".
func (e *Error) Error() string { return e.Field + ": " + e.Message }

// BadRequest is a 400 naming field, with a formatted message.
func BadRequest(field, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Field: field, Message: fmt.Sprintf(format, args...)}
}

// WriteJSON answers status with v as JSON. Answers are never cached, never
// sniffed as another type, and "<" stays readable (bodies are never HTML).
func WriteJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Cache-Control"] = []string{"no-store"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client may be gone; nothing to do
}

// WriteError answers e in the error shape.
func WriteError(w http.ResponseWriter, e *Error) {
	WriteJSON(w, e.Status, struct {
		Error *Error `json:"error"`
	}{e})
}

// Fail answers err: as itself if it is an *Error (or wraps one), else as a
// 500 with err's message.
func Fail(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Status: http.StatusInternalServerError, Message: err.Error()}
	}
	WriteError(w, e)
}

// NewID returns a random id of 32 hex digits (128 bits from crypto/rand),
// for requests, sandboxes and other things a client names back.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
