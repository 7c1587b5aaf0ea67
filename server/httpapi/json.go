package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// apiError is an error answer: its status, and the field and message of the
// JSON body {"error": {"field": ..., "message": ...}}. Field names the
// offending part of the request as the client wrote it ("cost",
// "requests[1].descriptors.user", "body", "Authorization").
type apiError struct {
	Status  int    `json:"-"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

func (e *apiError) Error() string { return e.Field + ": " + e.Message }

func badRequest(field, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Field: field, Message: fmt.Sprintf(format, args...)}
}

// writeJSON answers status with v as JSON. Decisions and errors are never
// cached.
func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // bodies are JSON, never HTML: keep "<" readable
	_ = enc.Encode(v)        // the client may be gone; nothing to do
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.Status, struct {
		Error *apiError `json:"error"`
	}{e})
}

// decode reads r's body, at most max bytes, as exactly one JSON object into
// v, rejecting unknown fields. Its error names the field at fault.
func decode(w http.ResponseWriter, r *http.Request, max int64, v any) *apiError {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, max))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, max)
	}
	if _, err := dec.Token(); err != io.EOF {
		if e := tooLarge(err, max); e != nil {
			return e
		}
		return badRequest("body", "unexpected data after the JSON object")
	}
	return nil
}

func tooLarge(err error, max int64) *apiError {
	var mb *http.MaxBytesError
	if !errors.As(err, &mb) {
		return nil
	}
	return &apiError{Status: http.StatusRequestEntityTooLarge, Field: "body",
		Message: "the body is larger than " + strconv.FormatInt(max, 10) + " bytes"}
}

// decodeError turns an encoding/json error into a 400 (or 413) naming the
// field.
func decodeError(err error, max int64) *apiError {
	if e := tooLarge(err, max); e != nil {
		return e
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return badRequest("body", "empty body: want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("body", "truncated JSON")
	case errors.As(err, &syntax):
		return badRequest("body", "malformed JSON at byte %d: %s", syntax.Offset, strings.TrimPrefix(syntax.Error(), "json: "))
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return badRequest(field, "want %s, got %s", jsonType(typ.Type.Kind().String()), typ.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if unq, err := strconv.Unquote(name); err == nil {
			name = unq
		}
		return badRequest(name, "unknown field")
	}
	return badRequest("body", "%s", strings.TrimPrefix(err.Error(), "json: "))
}

// jsonType names a Go kind as the JSON type a client should send.
func jsonType(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "an integer"
	case kind == "string":
		return "a string"
	case kind == "map", kind == "struct":
		return "an object"
	case kind == "slice":
		return "an array"
	case kind == "bool":
		return "a boolean"
	}
	return kind
}
