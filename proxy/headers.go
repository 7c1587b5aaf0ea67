package proxy

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/redact"
	"github.com/tokenlimit/tokenlimit/service"
)

// inFlightRetry is the Retry-After of a request denied by a concurrency
// limit: a slot frees when a request in flight completes, which no budget
// can foretell (the lease only bounds a crashed holder's slot).
const inFlightRetry = time.Second

// apiError is the body of an OpenAI-style error.
type apiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// writeError answers status with an OpenAI-style error body; an empty code
// is null.
func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	writeParamError(w, status, typ, code, "", msg)
}

// writeParamError is writeError naming the request's parameter at fault; an
// empty param is null.
func writeParamError(w http.ResponseWriter, status int, typ, code, param, msg string) {
	var e apiError
	e.Error.Message, e.Error.Type = msg, typ
	if code != "" {
		e.Error.Code = &code
	}
	if param != "" {
		e.Error.Param = &param
	}
	body, _ := json.Marshal(e) // cannot fail: strings and nil pointers
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// unitOf returns what the named limit counts; a limit removed by a reload
// since the decision counts requests.
func (p *Proxy) unitOf(name string) service.Unit {
	if u, ok := p.svc.UnitOf(name); ok {
		return u
	}
	return service.Requests
}

// setRateHeaders sets OpenAI's x-ratelimit-{limit,remaining,reset}-requests
// from the tightest enforced limit counting requests, and -tokens from the
// tightest counting tokens. Concurrency limits are not reported there. The
// reset is how long until the limit is whole again, as a Go duration
// rounded up to the millisecond ("6m0s", "1.5s", "20ms").
func (p *Proxy) setRateHeaders(h http.Header, d service.Decision) {
	for _, u := range []service.Unit{service.Requests, service.Tokens} {
		var of []service.Outcome
		for _, o := range d.Limits {
			if !o.Shadow && p.unitOf(o.Name) == u {
				of = append(of, o)
			}
		}
		t, ok := service.Decision{Limits: of}.Tightest()
		if !ok {
			continue
		}
		h.Set("X-Ratelimit-Limit-"+u.String(), strconv.FormatInt(t.Limit, 10))
		h.Set("X-Ratelimit-Remaining-"+u.String(), strconv.FormatInt(t.Remaining, 10))
		h.Set("X-Ratelimit-Reset-"+u.String(), ceilMillis(t.ResetAfter).String())
	}
}

// ceilMillis rounds d up to a whole millisecond.
func ceilMillis(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// deny answers 429 for decision d, naming its tightest limit: the body is
// OpenAI's rate_limit_exceeded error, typed "tokens" or "requests" by what
// the limit counts; Retry-After is in whole seconds rounded up and
// retry-after-ms in milliseconds. A request that can never fit its limit
// gets x-should-retry: false and no Retry-After.
func (p *Proxy) deny(w http.ResponseWriter, c *call, d service.Decision) {
	o, _ := d.Tightest()
	unit := p.unitOf(o.Name)
	p.setRateHeaders(w.Header(), d)
	typ := "requests"
	if unit == service.Tokens {
		typ = "tokens"
	}
	wait := ceilMillis(o.RetryAfter)
	if unit == service.InFlight {
		wait = inFlightRetry
	}
	var msg string
	switch {
	case o.CostExceedsLimit:
		msg = fmt.Sprintf("Request too large for %s on %s: Limit %d, Requested %d. The input or output tokens must be reduced in order to run successfully.",
			o.Name, typ, o.Limit, o.Cost)
		w.Header().Set("X-Should-Retry", "false")
	case unit == service.InFlight:
		msg = fmt.Sprintf("Too many requests in flight for %s: Limit %d, In flight %d. Please try again in %s.",
			o.Name, o.Limit, o.Limit-o.Remaining, wait)
	default:
		msg = fmt.Sprintf("Rate limit reached for %s on %s: Limit %d, Used %d, Requested %d. Please try again in %s.",
			o.Name, typ, o.Limit, o.Limit-o.Remaining, o.Cost, wait)
	}
	if !o.CostExceedsLimit {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
		w.Header().Set("Retry-After-Ms", strconv.FormatInt(wait.Milliseconds(), 10))
	}
	p.log.Info("denied", "request_id", c.id, "limit", o.Name, "key", redact.Hint(c.req.Descriptors["api_key"]),
		"requested", o.Cost, "remaining", o.Remaining, "retry_after", wait)
	writeError(w, http.StatusTooManyRequests, typ, "rate_limit_exceeded", msg)
}
