package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/peer"
)

// maxBodyBytes caps the bodies of the dashboard's endpoints.
const maxBodyBytes = 16 << 10

// apiError is the body of an error answer: {"error": {"field", "message"}},
// the API's shape (docs/api.md).
type apiError struct {
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// writeJSON answers status with v as JSON, never cached.
func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do
}

func writeError(w http.ResponseWriter, status int, field, message string) {
	writeJSON(w, status, struct {
		Error apiError `json:"error"`
	}{apiError{Field: field, Message: message}})
}

// badRequest is an invalid body or parameter: field names it.
type badRequest struct{ field, message string }

func (e *badRequest) Error() string { return e.field + ": " + e.message }

func invalid(field, format string, args ...any) error {
	return &badRequest{field: field, message: fmt.Sprintf(format, args...)}
}

// fail answers err: 400 naming the field for a *badRequest, else 500.
func fail(w http.ResponseWriter, err error) {
	var br *badRequest
	if errors.As(err, &br) {
		writeError(w, http.StatusBadRequest, br.field, br.message)
		return
	}
	writeError(w, http.StatusInternalServerError, "", err.Error())
}

// decode reads r's body, at most maxBodyBytes, as one JSON object into v,
// rejecting unknown fields. An empty body leaves v as it is.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		if _, err := dec.Token(); err != io.EOF {
			return invalid("body", "unexpected data after the JSON object")
		}
		return nil
	case errors.Is(err, io.EOF):
		return nil
	case errors.As(err, &tooBig):
		return invalid("body", "larger than %d bytes", maxBodyBytes)
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("body", "malformed JSON")
	case errors.As(err, &typ):
		return invalid(typ.Field, "want %s, got %s", typ.Type, typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return invalid(strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`), "unknown field")
	}
	return invalid("body", "%v", err)
}

// admin wraps an inspector handler: 403 when no admin token is configured,
// 401 unless the request carries "Authorization: Bearer <AdminToken>".
// Tokens are compared as SHA-256 digests in constant time.
func (d *dashboard) admin(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if d.opts.AdminToken == "" {
			writeError(w, http.StatusForbidden, "Authorization",
				"the key inspector is off: start the server with an admin token (--admin-token) to use it")
			return
		}
		if !d.opts.AdminFromAnywhere && !peer.IsLoopback(r) {
			writeError(w, http.StatusForbidden, "Authorization",
				"the key inspector answers loopback clients only (serve --admin-from-anywhere to change it)")
			return
		}
		if !d.adminKey.CarriedBy(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tokenlimit admin"`)
			writeError(w, http.StatusUnauthorized, "Authorization", "want the admin token (Authorization: Bearer <token>)")
			return
		}
		next(w, r)
	}
}

// millis is d in milliseconds, rounded up: a client that waits retry-after
// milliseconds is never early.
func millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
