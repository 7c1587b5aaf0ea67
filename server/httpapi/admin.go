package httpapi

import (
	"net/http"
	"slices"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/peer"
	"github.com/tokenlimit/tokenlimit/service"
)

// admin wraps an admin handler: 403 when no admin token is configured, 401
// unless the request carries "Authorization: Bearer <AdminToken>". Tokens
// are compared as SHA-256 digests in constant time, so neither their content
// nor their length leaks through timing.
func (a *api) admin(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a.opts.AdminToken == "" {
			writeError(w, &apiError{Status: http.StatusForbidden, Field: "Authorization",
				Message: "admin endpoints are disabled: start the server with an admin token to enable them"})
			return
		}
		if !a.opts.AdminFromAnywhere && !peer.IsLoopback(r) {
			writeError(w, &apiError{Status: http.StatusForbidden,
				Message: "admin endpoints answer loopback clients only (serve --admin-from-anywhere to change it)"})
			return
		}
		if !a.adminKey.CarriedBy(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tokenlimit admin"`)
			writeError(w, &apiError{Status: http.StatusUnauthorized, Field: "Authorization",
				Message: "want Authorization: Bearer <admin token>"})
			return
		}
		next(w, r)
	}
}

// inspectBody is the body of /v1/admin/inspect.
type inspectBody struct {
	Descriptors map[string]string `json:"descriptors"`
}

// inspect serves POST /v1/admin/inspect: the live state of every limit the
// descriptors select, charging nothing.
func (a *api) inspect(w http.ResponseWriter, r *http.Request) {
	var b inspectBody
	if e := decode(w, r, a.opts.MaxBodyBytes, &b); e != nil {
		writeError(w, e)
		return
	}
	d, err := a.svc.Inspect(r.Context(), service.Request{Descriptors: b.Descriptors})
	if err != nil {
		writeError(w, a.serviceError(r.Context(), "inspect", err, true))
		return
	}
	writeJSON(w, http.StatusOK, struct {
		At     string        `json:"at"`
		Limits []outcomeBody `json:"limits"`
	}{d.At.UTC().Format(time.RFC3339Nano), outcomesBody(d.Limits)})
}

// resetBody is the body of /v1/admin/reset.
type resetBody struct {
	Descriptors map[string]string `json:"descriptors"`
	Limit       string            `json:"limit"`
}

// reset serves POST /v1/admin/reset: the budgets the descriptors select, or
// only the named limit's, are made whole.
func (a *api) reset(w http.ResponseWriter, r *http.Request) {
	var b resetBody
	if e := decode(w, r, a.opts.MaxBodyBytes, &b); e != nil {
		writeError(w, e)
		return
	}
	if b.Limit != "" && !a.hasLimit(b.Limit) {
		writeError(w, &apiError{Status: http.StatusNotFound, Field: "limit", Message: "no limit named " + b.Limit + " (see GET /v1/limits)"})
		return
	}
	keys, err := a.svc.Reset(r.Context(), service.Request{Descriptors: b.Descriptors}, b.Limit)
	if err != nil {
		writeError(w, a.serviceError(r.Context(), "reset", err, true))
		return
	}
	a.log.InfoContext(r.Context(), "admin reset", "descriptors", redacted(b.Descriptors), "limit", b.Limit, "keys", len(keys))
	if keys == nil {
		keys = []string{}
	}
	writeJSON(w, http.StatusOK, struct {
		Reset []string `json:"reset"`
	}{keys})
}

func (a *api) hasLimit(name string) bool {
	return slices.ContainsFunc(a.svc.Limits(), func(l service.LimitInfo) bool { return l.Name == name })
}

// limits serves GET /v1/limits: the limits in force and their version.
func (a *api) limits(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		ConfigVersion int64               `json:"config_version"`
		Limits        []service.LimitInfo `json:"limits"`
	}{a.svc.ConfigVersion(), a.svc.Limits()})
}

// healthz serves GET /healthz: 200 whenever the process answers.
func (a *api) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Status string `json:"status"`
	}{"ok"})
}

// readyz serves GET /readyz: 200 while the store is healthy, 503 while it
// is failing (its circuit breaker is not closed).
func (a *api) readyz(w http.ResponseWriter, _ *http.Request) {
	h := a.svc.Health()
	code, st := http.StatusOK, "ok"
	if h.Degraded {
		code, st = http.StatusServiceUnavailable, "degraded"
	}
	writeJSON(w, code, struct {
		Status  string `json:"status"`
		Store   string `json:"store"`
		Breaker string `json:"breaker"`
	}{st, h.Store, h.Breaker})
}
