package httpapi

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/tokenlimit/tokenlimit/internal/peer"
	"github.com/tokenlimit/tokenlimit/service"
)

// forwardAuth serves /v1/forward-auth, for any method: the descriptors come
// from the request's headers, as a gateway's forward-auth (Traefik
// forwardAuth, NGINX auth_request) sends them, and the answer is the status
// and rate-limit headers of /v1/check with a one-line text body.
//
// The query parameter deny_status=403 makes a denial answer 403 instead of
// 429, for NGINX auth_request, which treats any status but 2xx, 401 and 403
// as an error.
func (a *api) forwardAuth(w http.ResponseWriter, r *http.Request) {
	denyStatus := http.StatusTooManyRequests
	switch v := r.URL.Query().Get("deny_status"); v {
	case "", "429":
	case "403":
		denyStatus = http.StatusForbidden
	default:
		writeError(w, badRequest("deny_status", "want 429 or 403, got %q", v))
		return
	}
	req, e := a.headerRequest(r)
	if e != nil {
		writeError(w, e)
		return
	}
	reqs := []service.Request{req}
	d, err := a.svc.Check(r.Context(), reqs...)
	if err != nil {
		writeError(w, a.serviceError(r.Context(), "forward-auth", err, true))
		return
	}
	a.logDecision(r.Context(), "forward-auth", d, reqs)
	a.setRateLimitHeaders(w.Header(), d, reqs)
	code, text := status(d), ""
	switch code {
	case http.StatusTooManyRequests:
		code, text = denyStatus, "rate limit exceeded\n"
		if o, ok := d.Tightest(); ok {
			text = "rate limit exceeded: " + o.Name + "\n"
		}
	case http.StatusServiceUnavailable:
		text = "rate limiter unavailable\n"
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(text))
}

// headerRequest builds a check from forward-auth headers:
//
//	api_key  Authorization: Bearer <key>, else X-Api-Key
//	user     X-User
//	model    X-Model
//	tenant   X-Tenant
//	route    the path of X-Forwarded-Uri, else of X-Original-URI
//	ip       the client address (see clientIP)
//	cost     X-Cost, a non-negative integer (absent: 1)
func (a *api) headerRequest(r *http.Request) (service.Request, *apiError) {
	h := r.Header
	d := map[string]string{}
	set := func(name, v string) {
		if v = strings.TrimSpace(v); v != "" {
			d[name] = v
		}
	}
	set("api_key", peer.Bearer(h.Get("Authorization")))
	if d["api_key"] == "" {
		set("api_key", h.Get("X-Api-Key"))
	}
	set("user", h.Get("X-User"))
	set("model", h.Get("X-Model"))
	set("tenant", h.Get("X-Tenant"))
	uri := h.Get("X-Forwarded-Uri")
	if uri == "" {
		uri = h.Get("X-Original-URI")
	}
	set("route", routeOf(uri))
	if ip := peer.ClientIP(r, a.opts.TrustedProxies); ip.IsValid() {
		d["ip"] = ip.String()
	}
	req := service.Request{Descriptors: d}
	if v := h.Get("X-Cost"); v != "" {
		cost, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || cost < 0 {
			return req, badRequest("X-Cost", "want a non-negative integer, got %q", v)
		}
		req.Cost = cost
	}
	return req, nil
}

// routeOf is the path of a request URI: "/v1/chat?x=1" is "/v1/chat".
func routeOf(uri string) string {
	if i := strings.IndexAny(uri, "?#"); i >= 0 {
		uri = uri[:i]
	}
	return uri
}
