package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Decode reads r's body, at most max bytes, as exactly one JSON object into
// v, rejecting unknown fields, trailing data, a member given twice in one
// object and strings that are not valid UTF-8 (see strict). Its error is a 400 naming
// the field at fault ("body" for the body as a whole), or a 413 for a body
// over max.
func Decode(w http.ResponseWriter, r *http.Request, max int64, v any) *Error {
	return decode(w, r, max, v, false)
}

// DecodeOptional is Decode for endpoints whose every field is optional: an
// empty body leaves v as it is.
func DecodeOptional(w http.ResponseWriter, r *http.Request, max int64, v any) *Error {
	return decode(w, r, max, v, true)
}

func decode(w http.ResponseWriter, r *http.Request, max int64, v any, emptyOK bool) *Error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		if e := tooLarge(err, max); e != nil {
			return e
		}
		return BadRequest("body", "reading the body: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if emptyOK && errors.Is(err, io.EOF) {
			return nil
		}
		return decodeError(err, max)
	}
	if _, err := dec.Token(); err != io.EOF {
		return BadRequest("body", "unexpected data after the JSON object")
	}
	return strict(data)
}

func tooLarge(err error, max int64) *Error {
	var mb *http.MaxBytesError
	if !errors.As(err, &mb) {
		return nil
	}
	return &Error{Status: http.StatusRequestEntityTooLarge, Field: "body",
		Message: "the body is larger than " + strconv.FormatInt(max, 10) + " bytes"}
}

// decodeError turns an encoding/json error into a 400 (or 413) naming the
// field.
func decodeError(err error, max int64) *Error {
	if e := tooLarge(err, max); e != nil {
		return e
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return BadRequest("body", "empty body: want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return BadRequest("body", "truncated JSON")
	case errors.As(err, &syntax):
		return BadRequest("body", "malformed JSON at byte %d: %s", syntax.Offset, strings.TrimPrefix(syntax.Error(), "json: "))
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return BadRequest(field, "want %s, got %s", jsonType(typ.Type.Kind().String()), typ.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if unq, err := strconv.Unquote(name); err == nil {
			name = unq
		}
		return BadRequest(name, "unknown field")
	}
	return BadRequest("body", "%s", strings.TrimPrefix(err.Error(), "json: "))
}

// jsonType names a Go kind as the JSON type a client should send.
func jsonType(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "an integer"
	case strings.HasPrefix(kind, "float"):
		return "a number"
	case kind == "string":
		return "a string"
	case kind == "map", kind == "struct":
		return "an object"
	case kind == "slice", kind == "array":
		return "an array"
	case kind == "bool":
		return "a boolean"
	}
	return kind
}
