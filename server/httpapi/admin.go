package httpapi

import (
	"net/http"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/service"
)

// inspectBody is the body of /v1/admin/inspect.
type inspectBody struct {
	Descriptors map[string]string `json:"descriptors"`
}

// inspect serves POST /v1/admin/inspect: the live state of every limit the
// descriptors select, charging nothing.
func (a *api) inspect(w http.ResponseWriter, r *http.Request) {
	var b inspectBody
	if e := httpx.Decode(w, r, a.opts.MaxBodyBytes, &b); e != nil {
		httpx.WriteError(w, e)
		return
	}
	d, err := a.svc.Inspect(r.Context(), service.Request{Descriptors: b.Descriptors})
	if err != nil {
		httpx.WriteError(w, a.serviceError(r.Context(), "inspect", err, true))
		return
	}
	httpx.WriteJSON(w, http.StatusOK, struct {
		At     string          `json:"at"`
		Limits []httpx.Outcome `json:"limits"`
	}{d.At.UTC().Format(time.RFC3339Nano), outcomesBody(d.Limits)})
}

// limits serves GET /v1/limits: the limits in force and their version.
func (a *api) limits(w http.ResponseWriter, _ *http.Request) {
	httpx.WriteJSON(w, http.StatusOK, struct {
		ConfigVersion int64         `json:"config_version"`
		Limits        []httpx.Limit `json:"limits"`
	}{a.svc.ConfigVersion(), httpx.LimitsOf(a.svc.Limits())})
}

// healthz serves GET /healthz: 200 whenever the process answers.
func (a *api) healthz(w http.ResponseWriter, _ *http.Request) {
	httpx.WriteJSON(w, http.StatusOK, struct {
		Status string `json:"status"`
	}{"ok"})
}

// readyz serves GET /readyz: 200 while the store is healthy, 503 while it
// is failing (its circuit breaker is not closed, or it has not answered since
// the start), with the store's name and its last error.
func (a *api) readyz(w http.ResponseWriter, _ *http.Request) {
	h := a.svc.Health()
	code, st := http.StatusOK, "ok"
	switch {
	case h.Degraded:
		code, st = http.StatusServiceUnavailable, "degraded"
	case h.KeySpaceFull:
		st = "key_space_full" // still ready: stored keys keep being decided
	}
	httpx.WriteJSON(w, code, struct {
		Status string `json:"status"`
		httpx.Health
	}{st, httpx.HealthOf(h)})
}
