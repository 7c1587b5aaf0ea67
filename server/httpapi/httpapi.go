// Package httpapi is tokenlimit's HTTP JSON API over a service.Service:
// checks (also as a forward-auth endpoint for Traefik / NGINX-style
// gateways), reservations, the effective limits, admin inspect and reset,
// and health endpoints. docs/api.md documents every endpoint, body, header
// and status code.
//
// Checks answer 200 when allowed, 429 when denied and 503 when a
// fail-closed limit cannot be decided, with Retry-After, X-RateLimit-* and
// the IETF RateLimit / RateLimit-Policy fields for the tightest enforced
// limit. Errors are JSON {"error": {"field": ..., "message": ...}}.
package httpapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"

	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/plane"
	"github.com/tokenlimit/tokenlimit/service"
)

// DefaultMaxBodyBytes is the largest request body accepted when
// Options.MaxBodyBytes is zero: 64 KiB.
const DefaultMaxBodyBytes = 64 << 10

// Options configures the handler. The zero value serves every endpoint
// except the admin ones, with no /metrics and a placeholder page at /.
type Options struct {
	// AdminToken is the bearer token of the admin endpoints
	// (/v1/admin/...), named AdminName in the audit log lines ("admin"
	// when empty). With no AdminTokens either, the admin endpoints are
	// disabled: they answer 403.
	AdminToken string
	AdminName  string
	// AdminTokens are more admin tokens, by name: each change made with
	// one is logged under its name, never the token.
	AdminTokens map[string]string
	// AdminFromAnywhere lets the admin endpoints answer clients that are
	// not on loopback. By default they answer only 127.0.0.0/8 and ::1,
	// even with the right token, so that a service listening on a public
	// address does not expose them.
	AdminFromAnywhere bool
	// AdminGate, if not nil, guards the admin endpoints in place of a gate
	// of AdminToken, AdminTokens and AdminFromAnywhere (which are then
	// unused): a server's own, shared with its dashboard, whose tokens it
	// may replace at run time and whose failed attempts it may count.
	AdminGate *httpx.AdminGate
	// AuthFailures, if not nil, counts the calls to /v1/check and
	// /v1/reserve whose api_key is a plane secret that names no usable key,
	// per client (see httpx.KeyClient), and refuses them with 429 once a
	// client is past its budget; nil counts nothing (401 each).
	AuthFailures *httpx.AuthFailures
	// TrustedProxies are the networks whose X-Forwarded-For the
	// forward-auth endpoint believes. A request from elsewhere is
	// attributed to its connection's address.
	TrustedProxies []netip.Prefix
	// MaxBodyBytes caps request bodies; larger ones get 413. Zero means
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Logger receives structured logs; slog.Default() when nil. Api keys
	// are logged only as a short prefix and their length.
	Logger *slog.Logger
	// Metrics, if not nil, is served at /metrics.
	Metrics http.Handler
	// Plane, if not nil, is the quota plane whose teams and keys the admin
	// endpoints /v1/admin/teams and /v1/admin/keys manage; the service
	// must have it too (service.Options.Plane).
	Plane *plane.Plane
	// Dashboard, if not nil, is served at / (and every path the API does
	// not own). When nil, / answers a small page pointing to /v1/limits.
	Dashboard http.Handler
}

// api holds what the handlers share. It is immutable after New.
type api struct {
	svc   *service.Service
	opts  Options
	log   *slog.Logger
	admin *httpx.AdminGate
}

// New returns the API's handler over svc. It fails if svc is nil or an
// option is invalid (a negative MaxBodyBytes, an invalid trusted prefix).
func New(svc *service.Service, opts Options) (http.Handler, error) {
	if svc == nil {
		return nil, errors.New("httpapi: New: service is nil")
	}
	if opts.MaxBodyBytes < 0 {
		return nil, errors.New("httpapi: New: MaxBodyBytes must not be negative")
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	for _, p := range opts.TrustedProxies {
		if !p.IsValid() {
			return nil, errors.New("httpapi: New: TrustedProxies holds an invalid prefix")
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	gate := opts.AdminGate
	if gate == nil {
		tokens, err := httpx.WithAdminToken(opts.AdminTokens, opts.AdminName, opts.AdminToken)
		if err != nil {
			return nil, fmt.Errorf("httpapi: New: %w", err)
		}
		gate = httpx.NewAdminGate(tokens, opts.AdminFromAnywhere, nil)
	}
	a := &api{svc: svc, opts: opts, log: opts.Logger, admin: gate}
	return a.routes(), nil
}

// endpoint is one path of the API and the methods it answers.
type endpoint struct {
	path    string
	methods []string // nil: any method
	handler http.HandlerFunc
}

func (a *api) endpoints() []endpoint {
	post := []string{http.MethodPost}
	get := []string{http.MethodGet}
	eps := []endpoint{
		{"/v1/check", post, a.check},
		{"/v1/forward-auth", nil, a.forwardAuth},
		{"/v1/reserve", post, a.reserve},
		{"/v1/settle", post, a.settle},
		{"/v1/limits", get, a.limits},
		{"/v1/admin/inspect", post, a.admin.Wrap("admin endpoints", a.inspect)},
		{"/v1/admin/reset", post, a.admin.Wrap("admin endpoints", httpx.ResetHandler(a.svc, a.log, a.opts.MaxBodyBytes))},
		{"/healthz", get, a.healthz},
		{"/readyz", get, a.readyz},
	}
	if a.opts.Plane != nil {
		admin := httpx.PlaneAdmin{Plane: a.opts.Plane, Service: a.svc, Gate: a.admin, Log: a.log, MaxBody: a.opts.MaxBodyBytes}
		for _, r := range admin.Routes() {
			eps = append(eps, endpoint{r.Path, r.Methods, r.Handler})
		}
	}
	return eps
}

// routes builds the mux: each endpoint under its methods, a JSON 405 for
// the others, a JSON 404 for unknown API paths, and / for the dashboard;
// every request gets a request id.
func (a *api) routes() http.Handler {
	mux := http.NewServeMux()
	for _, e := range a.endpoints() {
		if e.methods == nil {
			mux.Handle(e.path, e.handler)
			continue
		}
		for _, m := range e.methods {
			mux.Handle(m+" "+e.path, e.handler)
		}
		mux.Handle(e.path, methodNotAllowed(e.methods))
	}
	if a.opts.Metrics != nil {
		mux.Handle("/metrics", a.opts.Metrics)
	}
	mux.HandleFunc("/v1/", notFound)
	if a.opts.Dashboard != nil {
		mux.Handle("/", a.opts.Dashboard)
	} else {
		mux.HandleFunc("GET /{$}", rootPage)
		mux.HandleFunc("/", notFound)
	}
	return withRequestID(mux)
}

func methodNotAllowed(methods []string) http.HandlerFunc {
	allow := methods
	if len(methods) == 1 && methods[0] == http.MethodGet {
		allow = []string{http.MethodGet, http.MethodHead}
	}
	header := strings.Join(allow, ", ")
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", header)
		httpx.WriteError(w, &httpx.Error{Status: http.StatusMethodNotAllowed, Field: "method",
			Message: r.Method + " is not allowed on " + r.URL.Path + "; use " + header})
	}
}

func notFound(w http.ResponseWriter, r *http.Request) {
	httpx.WriteError(w, &httpx.Error{Status: http.StatusNotFound, Field: "path",
		Message: "no endpoint " + r.URL.Path + "; see docs/api.md"})
}

const rootHTML = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tokenlimit</title></head>
<body><h1>tokenlimit</h1>
<p>This server runs without its dashboard. See the <a href="/v1/limits">effective limits</a>
(<code>GET /v1/limits</code>), <a href="/healthz">/healthz</a> and <a href="/readyz">/readyz</a>.</p>
</body></html>
`

func rootPage(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write([]byte(rootHTML))
}
