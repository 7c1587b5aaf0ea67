package httpx

import (
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/redact"
	"github.com/tokenlimit/tokenlimit/service"
)

// ServiceError maps an error of a service call to an answer: 400 naming the
// field for an invalid request or limits the engine refused, 429 when the
// store had no room for a new key (tokenlimit.ErrStoreFull), else 503 (the
// store failed), with failed true so that the caller logs it. single says
// the request was one set of descriptors, not a list: fields then name
// "descriptors.user", not "requests[0].descriptors.user".
func ServiceError(err error, single bool) (e *Error, failed bool) {
	var fe *tokenlimit.FieldError
	switch {
	case errors.As(err, &fe):
		// The engine refused the limits the descriptors selected, such as a
		// key too long or too many limits at once.
		field := "requests"
		if single {
			field = "descriptors"
		}
		return BadRequest(field, "the selected limits cannot be checked: %s", fe.Error()), false
	case errors.Is(err, tokenlimit.ErrStoreFull):
		return &Error{Status: http.StatusTooManyRequests, Message: "the key space is full: the rate-limit store holds as many budgets as it may; retry when keys expire"}, false
	case errors.Is(err, service.ErrUnauthorized):
		return &Error{Status: http.StatusUnauthorized, Field: "api_key", Message: RefusalReason(err)}, false
	case errors.Is(err, service.ErrInvalidRequest):
		field, reason := splitField(strings.TrimPrefix(err.Error(), service.ErrInvalidRequest.Error()+": "))
		if single {
			field = strings.TrimPrefix(field, "requests[0].")
		}
		return BadRequest(field, "%s", reason), false
	}
	return &Error{Status: http.StatusServiceUnavailable, Message: "the rate-limit store failed; retry later"}, true
}

// splitField splits "field: reason".
func splitField(msg string) (field, reason string) {
	field, reason, ok := strings.Cut(msg, ": ")
	if !ok || strings.ContainsAny(field, " \t") {
		return "body", msg
	}
	return field, reason
}

// resetBody is the body of a reset: the descriptors that select the
// budgets, and optionally the one limit to reset.
type resetBody struct {
	Descriptors map[string]string `json:"descriptors"`
	Limit       string            `json:"limit"`
}

// ResetHandler serves a reset: the budgets that a JSON body's descriptors
// select, or only those of its named limit, are made whole
// (service.Service.Reset). It answers {"reset": [keys]}, 404 naming "limit"
// for a limit not in force, and logs each reset at info and each store
// failure at error on log. Bodies are capped at maxBody bytes.
func ResetHandler(svc *service.Service, log *slog.Logger, maxBody int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var b resetBody
		if e := Decode(w, r, maxBody, &b); e != nil {
			WriteError(w, e)
			return
		}
		if b.Limit != "" && !slices.ContainsFunc(svc.Limits(), func(l service.LimitInfo) bool { return l.Name == b.Limit }) {
			WriteError(w, &Error{Status: http.StatusNotFound, Field: "limit", Message: "no limit named " + b.Limit + " (see GET /v1/limits)"})
			return
		}
		keys, err := svc.Reset(r.Context(), service.Request{Descriptors: b.Descriptors}, b.Limit)
		if err != nil {
			e, failed := ServiceError(err, true)
			if failed {
				log.ErrorContext(r.Context(), "reset failed", "error", redact.Error(err))
			}
			WriteError(w, e)
			return
		}
		log.InfoContext(r.Context(), "admin reset", "who", AdminName(r.Context()), "descriptors", redact.Descriptors(b.Descriptors), "limit", b.Limit, "keys", len(keys))
		if keys == nil {
			keys = []string{}
		}
		WriteJSON(w, http.StatusOK, struct {
			Reset []string `json:"reset"`
		}{keys})
	}
}

// RefusalReason is why err, a service error matching
// service.ErrUnauthorized, refused an api key: the plane's reason alone,
// such as "unknown or revoked key".
func RefusalReason(err error) string {
	return strings.TrimPrefix(err.Error(), "unauthorized: plane: unauthorized: ")
}
