package proxy

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/ratelimitheader"
	"github.com/tokenlimit/tokenlimit/internal/redact"
	"github.com/tokenlimit/tokenlimit/service"
)

// inFlightRetry is the Retry-After of a request denied by a concurrency
// limit: a slot frees when a request in flight completes, which no budget
// can foretell (the lease only bounds a crashed holder's slot).
const inFlightRetry = time.Second

// dialect is the API family a request speaks, which shapes the proxy's
// own answers: their error bodies and rate-limit headers.
type dialect uint8

const (
	// openAI: {"error":{"message","type","param","code"}} and
	// x-ratelimit-* headers.
	openAI dialect = iota
	// anthropic: {"type":"error","error":{"type","message"}} and
	// anthropic-ratelimit-* headers.
	anthropic
)

// dialectOf returns the dialect of r: Anthropic's for the Messages API and
// for any request carrying an anthropic-version header.
func dialectOf(r *http.Request) dialect {
	if KindOf(r.Method, r.URL.Path) == Messages || r.Header.Get("Anthropic-Version") != "" {
		return anthropic
	}
	return openAI
}

// apiError is the body of an OpenAI-style error.
type apiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// anthropicError is the body of an Anthropic-style error.
type anthropicError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// anthropicErrorType returns Anthropic's error type for an HTTP status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable:
		return "overloaded_error"
	}
	return "api_error"
}

// writeError answers status with an error body in dialect d; for OpenAI's,
// typ and code (null when empty) are the error's type and code; Anthropic's
// type follows from the status.
func writeError(w http.ResponseWriter, d dialect, status int, typ, code, msg string) {
	writeParamError(w, d, status, typ, code, "", msg)
}

// writeParamError is writeError naming the request's parameter at fault in
// OpenAI's body; an empty param is null.
func writeParamError(w http.ResponseWriter, d dialect, status int, typ, code, param, msg string) {
	var body []byte
	if d == anthropic {
		e := anthropicError{Type: "error"}
		e.Error.Type, e.Error.Message = anthropicErrorType(status), msg
		body, _ = json.Marshal(e) // cannot fail: strings
	} else {
		var e apiError
		e.Error.Message, e.Error.Type = msg, typ
		if code != "" {
			e.Error.Code = &code
		}
		if param != "" {
			e.Error.Param = &param
		}
		body, _ = json.Marshal(e) // cannot fail: strings and nil pointers
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// setRateHeaders sets the rate-limit headers of c's dialect from decision
// d: the tightest enforced limit counting requests, and the tightest
// counting tokens (of any class). Concurrency limits are not reported there.
//
// OpenAI's are x-ratelimit-{limit,remaining,reset}-{requests,tokens}, the
// reset being how long until the limit is whole again, as a Go duration
// rounded up to the millisecond ("6m0s", "1.5s", "20ms"). Anthropic's are
// anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}, the reset
// being the time it is whole again in RFC 3339, rounded up to the second,
// and anthropic-ratelimit-input-tokens-* and -output-tokens-* from the
// tightest limit counting input tokens (cost: input_tokens or
// uncached_input_tokens) and output tokens (cost: output_tokens).
// Spend budgets are reported in both dialects as x-ratelimit-*-usd (see
// usdHeaders).
func (p *Proxy) setRateHeaders(h http.Header, c *call, d service.Decision) {
	p.usdHeaders(h, d)
	for _, al := range d.Alerts {
		h.Add(service.AlertHeader, al.String())
	}
	for _, u := range []struct {
		name string
		of   func(service.Unit) bool
	}{
		{"requests", func(u service.Unit) bool { return u == service.Requests }},
		{"tokens", service.Unit.IsTokens},
		{"input-tokens", func(u service.Unit) bool { return u == service.InputTokens }},
		{"output-tokens", func(u service.Unit) bool { return u == service.OutputTokens }},
	} {
		t, ok := p.tightestOf(d, u.of)
		switch {
		case !ok:
		case c.dialect == anthropic:
			ratelimitheader.Of(t.Name, t.Result, false, 0).SetAnthropic(h, u.name, d.At)
		case u.name == "requests" || u.name == "tokens": // OpenAI's API has no input or output headers
			ratelimitheader.Of(t.Name, t.Result, false, 0).SetOpenAI(h, u.name)
		}
	}
}

// tightestOf returns the tightest enforced outcome of d among the limits
// whose unit is of; false if there is none.
func (p *Proxy) tightestOf(d service.Decision, of func(service.Unit) bool) (service.Outcome, bool) {
	var in []service.Outcome
	for _, o := range d.Limits {
		if !o.Shadow && of(o.Unit) {
			in = append(in, o)
		}
	}
	return service.Decision{Limits: in}.Tightest()
}

// deny answers 429 for decision d, naming its tightest limit and where it
// comes from (see denier): the body is OpenAI's rate_limit_exceeded error
// (Anthropic's rate_limit_error), typed "tokens", "requests" or "usd" by
// what the limit counts. A wait up to
// MaxRetryWait is told exactly: Retry-After in whole seconds rounded up and
// retry-after-ms in milliseconds, which the SDKs sleep before retrying. A
// longer wait is told not to be waited for (see MaxRetryWait): code
// insufficient_quota, x-should-retry: false, Retry-After in seconds and the
// reset time in the message, no retry-after-ms. A request that can never
// fit its limit gets x-should-retry: false and no Retry-After.
func (p *Proxy) deny(w http.ResponseWriter, c *call, d service.Decision) {
	o, _ := d.Tightest()
	unit, who := o.Unit, denier(o)
	p.setRateHeaders(w.Header(), c, d)
	typ, amount := denialTerms(unit)
	wait := ratelimitheader.CeilMillis(o.RetryAfter)
	if unit == service.InFlight {
		wait = inFlightRetry
	}
	h := w.Header()
	code, retry := "rate_limit_exceeded", true
	var msg string
	switch {
	case o.CostExceedsLimit:
		msg = fmt.Sprintf("Request too large for %s on %s: Limit %s, Requested %s. The input or output tokens must be reduced in order to run successfully.",
			who, typ, amount(o.Limit), amount(o.Cost))
		retry = false
	case unit == service.InFlight:
		msg = fmt.Sprintf("Too many requests in flight for %s: Limit %d, In flight %d. Please try again in %s.",
			who, o.Limit, o.Limit-o.Remaining, wait)
		h.Set("Retry-After-Ms", strconv.FormatInt(wait.Milliseconds(), 10))
	case wait > p.opts.MaxRetryWait:
		code, retry = "insufficient_quota", false
		msg = exhausted(o, d.At, wait)
	default:
		msg = fmt.Sprintf("Rate limit reached for %s on %s: Limit %s, Used %s, Requested %s. Please try again in %s.",
			who, typ, amount(o.Limit), amount(o.Limit-o.Remaining), amount(o.Cost), wait)
		h.Set("Retry-After-Ms", strconv.FormatInt(wait.Milliseconds(), 10))
	}
	if !o.CostExceedsLimit {
		h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
	}
	if !retry {
		h.Set("X-Should-Retry", "false")
	}
	p.log.Info("denied", "request_id", c.id, "limit", o.Name, "limit_level", o.Level.String(), "limit_level_name", o.LevelName, "key", redact.Hint(c.req.Descriptors["api_key"]),
		"requested", o.Cost, "remaining", o.Remaining, "retry_after", wait, "retry", retry)
	writeError(w, c.dialect, http.StatusTooManyRequests, typ, code, msg)
}

// denier names the limit of outcome o and the level it comes from, for a
// 429's message: `team "acme" budget "usd-monthly"`, `key "laptop" limit
// "rpm"`, `plan "pro" limit "tokens-per-key"`, or only `limit "rpm"` for a
// configured limit of a call without a plan. A spend limit is a budget.
func denier(o service.Outcome) string {
	noun := "limit"
	if o.Unit == service.USD {
		noun = "budget"
	}
	if o.LevelName == "" {
		return fmt.Sprintf("%s %q", noun, o.Name)
	}
	return fmt.Sprintf("%s %q %s %q", o.Level, o.LevelName, noun, o.Name)
}

// exhausted is the message of a denial by o, decided at at, that is not
// worth waiting for: `team "acme" budget "usd-monthly" exhausted: $50.00 of
// $50.00 used, resets 2027-01-01T00:00:00Z (in 744h0m0s); this request
// needs $0.02, so retrying sooner will not succeed.`
func exhausted(o service.Outcome, at time.Time, wait time.Duration) string {
	typ, amount := denialTerms(o.Unit)
	counted := func(n int64) string { return amount(n) + " " + typ }
	if o.Unit == service.USD {
		counted = amount
	}
	return fmt.Sprintf("%s exhausted: %s of %s used, resets %s (in %s); this request needs %s, so retrying sooner will not succeed.",
		denier(o), amount(o.Limit-o.Remaining), counted(o.Limit), ratelimitheader.ResetTime(at, wait), wait, counted(o.Cost))
}

// denialTerms returns how a 429 names what a limit counting u counts (its
// error type) and writes an amount of it.
func denialTerms(u service.Unit) (string, func(int64) string) {
	switch {
	case u.IsTokens():
		return "tokens", func(n int64) string { return strconv.FormatInt(n, 10) }
	case u == service.USD:
		return "usd", func(n int64) string { return "$" + config.FormatUSD(n) }
	}
	return "requests", func(n int64) string { return strconv.FormatInt(n, 10) }
}
