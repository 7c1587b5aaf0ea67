// Package httplimit is net/http middleware that rate-limits requests with a
// tokenlimit.Limiter: each request's key and cost come from functions of the
// request, and it answers as the tokenlimit service does: a denied request
// gets 429 with Retry-After, X-RateLimit-*, the IETF RateLimit and
// RateLimit-Policy fields, and the service's JSON body; an admitted one goes
// on to the next handler with the same headers; a bad or missing key gets a
// 400 naming what is missing (or a default key); a failing store lets the
// request through unchanged unless the middleware fails closed.
//
//	mw, err := httplimit.New(limiter, tokenlimit.TokenBucketLimit(10, 2, time.Second), httplimit.Options{
//		Key: httplimit.KeyFromHeader("X-Api-Key"),
//	})
//	if err != nil { ... }
//	http.ListenAndServe(addr, mw.Handler(mux))
package httplimit

import (
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/guard"
	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/internal/ratelimitheader"
)

// Options configures a Middleware. The zero value limits every client
// address to the limit, one unit of cost per request, failing open.
type Options struct {
	// Name names the limit in the RateLimit and RateLimit-Policy headers
	// and the 429 body. Empty means "default".
	Name string

	// Key returns the budget key of a request, such as an api key or a
	// user id; requests with the same key share one budget. Nil means
	// KeyFromIP: the address of the connection's peer.
	//
	// A request with no key (Key returns "" and no error, or a *KeyError)
	// is charged under DefaultKey if it is set, and otherwise answered 400
	// naming the KeyError's Field (or "key"). Any other error is a 400
	// with the error's message.
	Key func(*http.Request) (string, error)

	// DefaultKey is the budget of requests that carry no key. Empty means
	// they are refused with 400.
	DefaultKey string

	// Cost returns what a request takes from its budget, 0 to
	// tokenlimit.MaxCost; 0 only peeks. Nil means 1 per request. An error
	// is a 400 naming "cost" (or the field of a *tokenlimit.FieldError).
	Cost func(*http.Request) (int64, error)

	// FailClosed answers 503 when the store fails. False, the zero value,
	// fails open: the request goes to the next handler unchanged, with no
	// rate-limit headers, and the failure is logged.
	FailClosed bool

	// Logger receives store failures at warn level. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// KeyError reports that a request carries no usable key; Field names what
// is missing as the client would write it, such as "X-Api-Key". Key
// functions return it so that DefaultKey applies and the 400 names it.
type KeyError = guard.KeyError

// Middleware limits the requests of the handlers it wraps. It is safe for
// concurrent use; all handlers it wraps share its budgets.
type Middleware struct {
	g    *guard.Guard
	key  func(*http.Request) (string, error)
	cost func(*http.Request) (int64, error)
}

// New returns middleware that decides requests under limit with l. It fails
// if l is nil, limit is invalid, or DefaultKey is not a valid key.
func New(l *tokenlimit.Limiter, limit tokenlimit.Limit, opts Options) (*Middleware, error) {
	g, err := guard.New("httplimit", l, limit, guard.Guard{
		Name: opts.Name, DefaultKey: opts.DefaultKey, FailClosed: opts.FailClosed, Log: opts.Logger,
	})
	if err != nil {
		return nil, err
	}
	m := &Middleware{g: g, key: opts.Key, cost: opts.Cost}
	if m.key == nil {
		m.key = KeyFromIP
	}
	if m.cost == nil {
		m.cost = func(*http.Request) (int64, error) { return 1, nil }
	}
	return m, nil
}

// Handler returns next behind the limit.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, keyErr := m.key(r)
		cost, costErr := m.cost(r)
		o := m.g.Decide(r.Context(), key, keyErr, cost, costErr)
		switch o.Verdict {
		case guard.Pass:
			next.ServeHTTP(w, r)
		case guard.Allow:
			ratelimitheader.Of(m.g.Name, o.Result, false, m.g.Window).SetHTTP(w.Header())
			next.ServeHTTP(w, r)
		case guard.Deny:
			ratelimitheader.Of(m.g.Name, o.Result, true, m.g.Window).SetHTTP(w.Header())
			out := httpx.OutcomeOf(o.Result)
			out.Name, out.Key, out.Cost = m.g.Name, o.Key, o.Cost
			httpx.WriteJSON(w, http.StatusTooManyRequests, httpx.Decision{Limits: []httpx.Outcome{out}})
		case guard.Invalid:
			httpx.WriteError(w, httpx.BadRequest(o.Field, "%s", o.Reason))
		case guard.Unavailable:
			httpx.WriteError(w, &httpx.Error{Status: http.StatusServiceUnavailable, Message: "the rate-limit store failed; retry later"})
		}
	})
}

// KeyFromIP returns the address of r's connection peer ("192.0.2.1",
// "2001:db8::1"), without its port. It ignores X-Forwarded-For: behind a
// proxy, key on what the proxy sets instead.
func KeyFromIP(r *http.Request) (string, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if host == "" {
		return "", &KeyError{Field: "RemoteAddr", Reason: "the connection has no peer address"}
	}
	return host, nil
}

// KeyFromHeader returns a Key function that reads the header name (with
// spaces trimmed); a request without it, or with it empty, has no key and
// is refused naming the header (or takes DefaultKey).
func KeyFromHeader(name string) func(*http.Request) (string, error) {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		if v := strings.TrimSpace(r.Header.Get(name)); v != "" {
			return v, nil
		}
		return "", &KeyError{Field: name, Reason: "missing: the request must carry this header"}
	}
}
