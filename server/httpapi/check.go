package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/internal/ratelimitheader"
	"github.com/tokenlimit/tokenlimit/internal/redact"
	"github.com/tokenlimit/tokenlimit/service"
)

// maxRequests caps the descriptor sets of one check; the engine checks at
// most tokenlimit.MaxItems limits at once anyway.
const maxRequests = tokenlimit.MaxItems

// checkBody is the body of /v1/check: one descriptor set with its cost, or
// several under "requests", checked all or nothing.
type checkBody struct {
	Descriptors map[string]string `json:"descriptors"`
	Cost        int64             `json:"cost"`
	Requests    []requestBody     `json:"requests"`
	// Wait is how long the caller will wait rather than be denied, a Go
	// duration such as "2s" (service.Request.Wait); empty for the limits'
	// own.
	Wait string `json:"wait"`
}

type requestBody struct {
	Descriptors map[string]string `json:"descriptors"`
	Cost        int64             `json:"cost"`
}

// requests returns the service requests of b, and whether b used the
// single-set form (which names fields without a "requests[i]." prefix).
func (b checkBody) requests() ([]service.Request, bool, *httpx.Error) {
	reqs, single, e := b.requestsAlone()
	if e != nil || b.Wait == "" {
		return reqs, single, e
	}
	wait, err := time.ParseDuration(b.Wait)
	if err != nil || wait <= 0 || wait > config.MaxWait {
		return nil, false, httpx.BadRequest("wait", "want a duration above 0 and at most %v, such as \"500ms\" or \"2s\"; got %q", config.MaxWait, b.Wait)
	}
	for i := range reqs {
		reqs[i].Wait = wait
	}
	return reqs, single, nil
}

// requestsAlone is requests without the wait.
func (b checkBody) requestsAlone() ([]service.Request, bool, *httpx.Error) {
	if b.Requests == nil {
		return []service.Request{{Descriptors: b.Descriptors, Cost: b.Cost}}, true, nil
	}
	switch {
	case b.Descriptors != nil || b.Cost != 0:
		return nil, false, httpx.BadRequest("requests", "give either descriptors and cost, or requests, not both")
	case len(b.Requests) == 0:
		return nil, false, httpx.BadRequest("requests", "at least one request is required")
	case len(b.Requests) > maxRequests:
		return nil, false, httpx.BadRequest("requests", "at most %d requests, got %d", maxRequests, len(b.Requests))
	}
	reqs := make([]service.Request, len(b.Requests))
	for i, r := range b.Requests {
		reqs[i] = service.Request{Descriptors: r.Descriptors, Cost: r.Cost}
	}
	return reqs, false, nil
}

func outcomesBody(limits []service.Outcome) []httpx.Outcome {
	out := make([]httpx.Outcome, len(limits))
	for i, o := range limits {
		out[i] = httpx.OutcomeOf(o.Result)
		out[i].Name, out[i].Key, out[i].Request, out[i].Cost = o.Name, o.Key, o.Request, o.Cost
		out[i].Level, out[i].LevelName, out[i].Unit = o.Level.String(), o.LevelName, o.Unit.String()
		out[i].Shadow, out[i].FailOpen = o.Shadow, o.FailOpen
	}
	return out
}

// unavailableMessage explains a 503 decision.
const unavailableMessage = "the rate-limit store is failing and a fail-closed limit cannot be decided; retry later"

// keySpaceFullMessage explains a denial for want of room for a new key.
const keySpaceFullMessage = "the key space is full: the rate-limit store holds as many budgets as it may and this request needs a new one; it is refused whatever the limits' failure modes, and budgets already held keep working; retry when keys expire"

// status is the HTTP status of a decision: 200 allowed, 429 denied (a key
// space that is full included: the request must not pass, and a gateway
// enforces a 429 where it may let a 503 through), 503 when a fail-closed
// limit could not be decided.
func status(d service.Decision) int {
	switch {
	case d.Unavailable:
		return http.StatusServiceUnavailable
	case !d.Allowed:
		return http.StatusTooManyRequests
	}
	return http.StatusOK
}

// writeDecision answers a decision with its status, rate-limit headers and
// JSON body.
func (a *api) writeDecision(w http.ResponseWriter, d service.Decision, reqs []service.Request) {
	a.setRateLimitHeaders(w.Header(), d, reqs)
	httpx.WriteJSON(w, status(d), bodyOf(d))
}

// bodyOf is the JSON answer to d.
func bodyOf(d service.Decision) httpx.Decision {
	body := httpx.Decision{Allowed: d.Allowed, Unavailable: d.Unavailable, KeySpaceFull: d.KeySpaceFull, ReservationID: d.ReservationID, Limits: outcomesBody(d.Limits),
		WaitedMS: httpx.Millis(d.Waited)}
	switch {
	case d.Unavailable:
		body.Error = &httpx.Error{Message: unavailableMessage}
	case d.KeySpaceFull:
		body.Error = &httpx.Error{Message: keySpaceFullMessage}
	}
	return body
}

// check serves POST /v1/check.
func (a *api) check(w http.ResponseWriter, r *http.Request) {
	var b checkBody
	if e := httpx.Decode(w, r, a.opts.MaxBodyBytes, &b); e != nil {
		httpx.WriteError(w, e)
		return
	}
	reqs, single, e := b.requests()
	if e != nil {
		httpx.WriteError(w, e)
		return
	}
	d, err := a.svc.Check(r.Context(), reqs...)
	if err != nil && r.Context().Err() != nil {
		return // the client left (while waiting under a limit's wait): nothing was charged, no one to answer
	}
	if err != nil {
		a.writeServiceError(w, r, "check", err, reqs, single, http.StatusTooManyRequests)
		return
	}
	a.logDecision(r.Context(), "check", d, reqs)
	a.writeDecision(w, d, reqs)
}

// reserveBody is the body of /v1/reserve: a check with an idempotency id.
// (Not embedding checkBody keeps encoding/json's field paths plain.)
type reserveBody struct {
	ID          string            `json:"id"`
	Descriptors map[string]string `json:"descriptors"`
	Cost        int64             `json:"cost"`
	Requests    []requestBody     `json:"requests"`
	Wait        string            `json:"wait"`
}

// reserve serves POST /v1/reserve.
func (a *api) reserve(w http.ResponseWriter, r *http.Request) {
	var b reserveBody
	if e := httpx.Decode(w, r, a.opts.MaxBodyBytes, &b); e != nil {
		httpx.WriteError(w, e)
		return
	}
	reqs, single, e := checkBody{b.Descriptors, b.Cost, b.Requests, b.Wait}.requests()
	if e != nil {
		httpx.WriteError(w, e)
		return
	}
	d, err := a.svc.Reserve(r.Context(), b.ID, reqs...)
	if err != nil && r.Context().Err() != nil {
		return // the client left (while waiting under a limit's wait): nothing was charged, no one to answer
	}
	if err != nil {
		a.writeServiceError(w, r, "reserve", err, reqs, single, http.StatusTooManyRequests)
		return
	}
	a.logDecision(r.Context(), "reserve", d, reqs)
	a.writeDecision(w, d, reqs)
}

type settleBody struct {
	ID     string `json:"id"`
	Actual *int64 `json:"actual"`
}

// settle serves POST /v1/settle.
func (a *api) settle(w http.ResponseWriter, r *http.Request) {
	var b settleBody
	if e := httpx.Decode(w, r, a.opts.MaxBodyBytes, &b); e != nil {
		httpx.WriteError(w, e)
		return
	}
	switch {
	case b.ID == "":
		httpx.WriteError(w, httpx.BadRequest("id", "required: the id /v1/reserve answered as reservation_id"))
		return
	case b.Actual == nil:
		httpx.WriteError(w, httpx.BadRequest("actual", "required: what the request really cost"))
		return
	}
	st, err := a.svc.Settle(r.Context(), b.ID, *b.Actual)
	if err != nil {
		httpx.WriteError(w, a.serviceError(r.Context(), "settle", err, true))
		return
	}
	if st == tokenlimit.UnknownReservation {
		httpx.WriteError(w, &httpx.Error{Status: http.StatusNotFound, Field: "id", Message: "no reservation with this id: it was never made, was denied, or expired and simply stands"})
		return
	}
	httpx.WriteJSON(w, http.StatusOK, struct {
		Settled bool `json:"settled"`
		Already bool `json:"already"`
	}{true, st == tokenlimit.AlreadySettled})
}

// writeServiceError answers err, the service's error for reqs: a refused
// plane secret (see refusedKey; tooMany is the status once its client is
// past its budget), or as serviceError maps it.
func (a *api) writeServiceError(w http.ResponseWriter, r *http.Request, op string, err error, reqs []service.Request, single bool, tooMany int) {
	if errors.Is(err, service.ErrUnauthorized) {
		a.refusedKey(w, r, err, reqs, tooMany)
		return
	}
	httpx.WriteError(w, a.serviceError(r.Context(), op, err, single))
}

// refusedKey answers a call whose api_key is a plane secret that names no
// usable key (unknown, revoked, expired, disabled): 401 saying why, or,
// once its client is past its budget of failed authentications,
// tooMany (429, or forward-auth's deny_status) with Retry-After. The client
// is the remote_address or ip descriptor of reqs, else the connection's
// address (see httpx.KeyClient).
func (a *api) refusedKey(w http.ResponseWriter, r *http.Request, err error, reqs []service.Request, tooMany int) {
	client := httpx.KeyClient(httpx.ConnAddr(r), reqs)
	e, _ := httpx.ServiceError(err, true)
	if d, over := a.opts.AuthFailures.RefusedKey(r.Context(), client); over {
		e = httpx.TooManyFailures(d, "api_key")
		e.Status = tooMany
		w.Header().Set("Retry-After", strconv.FormatInt(ratelimitheader.Seconds(httpx.RetryAfter(d)), 10))
	}
	a.log.DebugContext(r.Context(), "api key refused", "client", client, "status", e.Status, "reason", e.Message)
	httpx.WriteError(w, e)
}

// serviceError maps a service error to an answer: invalid input is 400
// naming the field, a reservation id bound to another request (or already
// settled) 409 naming id, and anything else (the store failed) 503, logged.
// single says the client used the single-set body form.
func (a *api) serviceError(ctx context.Context, op string, err error, single bool) *httpx.Error {
	switch {
	case errors.Is(err, service.ErrTooManyReservations):
		return &httpx.Error{Status: http.StatusServiceUnavailable, Message: "too many settlements wait for the rate-limit store; retry later"}
	case errors.Is(err, service.ErrStoreUnavailable):
		return &httpx.Error{Status: http.StatusServiceUnavailable, Message: "the rate-limit store is unavailable; retry later (settling applies once)"}
	case errors.Is(err, service.ErrReservationConflict):
		return &httpx.Error{Status: http.StatusConflict, Field: "id", Message: "this id already holds a reservation of a different request; nothing was charged"}
	case errors.Is(err, service.ErrReservationClosed):
		return &httpx.Error{Status: http.StatusConflict, Field: "id", Message: "this id was already settled; nothing was charged"}
	}
	e, failed := httpx.ServiceError(err, single)
	if failed {
		a.log.ErrorContext(ctx, "service call failed", "op", op, "error", redact.Error(err))
	}
	return e
}
