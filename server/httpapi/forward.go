package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/internal/peer"
	"github.com/tokenlimit/tokenlimit/service"
)

// bodyHeader carries, in the NGINX mode (deny_status=403), the JSON body of
// a denial or an unavailable answer: auth_request drops the sub-request's
// body, but can hand a header to the page it answers the client with.
const bodyHeader = "X-Tokenlimit-Body"

// forwardAuth serves /v1/forward-auth, for any method: the descriptors come
// from the request's headers, as a gateway's forward-auth (Caddy
// forward_auth, Traefik forwardAuth, NGINX auth_request) sends them, and the
// answer is the status, rate-limit headers and JSON body of /v1/check.
//
// The query parameter deny_status=403 makes a denial answer 403 instead of
// 429, for NGINX auth_request, which treats any status but 2xx, 401 and 403
// as an error; a denial or unavailable answer then also carries its body in
// the X-Tokenlimit-Body header.
func (a *api) forwardAuth(w http.ResponseWriter, r *http.Request) {
	denyStatus := http.StatusTooManyRequests
	switch v := r.URL.Query().Get("deny_status"); v {
	case "", "429":
	case "403":
		denyStatus = http.StatusForbidden
	default:
		httpx.WriteError(w, httpx.BadRequest("deny_status", "want 429 or 403, got %q", v))
		return
	}
	req, e := a.headerRequest(r)
	if e != nil {
		httpx.WriteError(w, e)
		return
	}
	reqs := []service.Request{req}
	d, err := a.svc.Check(r.Context(), reqs...)
	if err != nil {
		a.writeServiceError(w, r, "forward-auth", err, reqs, true, denyStatus)
		return
	}
	a.logDecision(r.Context(), "forward-auth", d, reqs)
	a.setRateLimitHeaders(w.Header(), d, reqs)
	code, body := status(d), bodyOf(d)
	if code == http.StatusTooManyRequests {
		code = denyStatus
	}
	if denyStatus == http.StatusForbidden && code != http.StatusOK {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(body) // strings, numbers and booleans always encode
		w.Header()[bodyHeader] = []string{strings.TrimSuffix(b.String(), "\n")}
	}
	httpx.WriteJSON(w, code, body)
}

// The headers forward-auth reads, one value each.
const (
	hdrForwardedURI = "X-Forwarded-Uri"
	hdrOriginalURI  = "X-Original-Uri"
	hdrCost         = "X-Cost"
)

// headerRequest builds a check from forward-auth headers:
//
//	api_key  Authorization: Bearer <key>, else X-Api-Key
//	user     X-User
//	model    X-Model
//	tenant   X-Tenant
//	route    the path of X-Forwarded-Uri, else of X-Original-URI
//	ip       the client address (see clientIP)
//	cost     X-Cost, a non-negative integer (absent: 1)
//
// A header given twice, or X-Forwarded-Uri and X-Original-URI naming two
// different routes, is a 400: a gateway sets one value, so a second one was
// written by the client and neither can be believed. (A gateway that sets
// X-Original-URI and passes the client's X-Forwarded-Uri on would otherwise
// let the client pick its route, and so its cost.)
func (a *api) headerRequest(r *http.Request) (service.Request, *httpx.Error) {
	h := r.Header
	var dup *httpx.Error
	one := func(name string) string {
		vs := h.Values(name)
		if len(vs) > 1 && dup == nil {
			dup = httpx.BadRequest(http.CanonicalHeaderKey(name), "given %d times; the gateway must set it once", len(vs))
		}
		if len(vs) == 0 {
			return ""
		}
		return strings.TrimSpace(vs[0])
	}
	d := map[string]string{}
	set := func(name, v string) {
		if v != "" {
			d[name] = v
		}
	}
	set("api_key", strings.TrimSpace(peer.Bearer(one("Authorization"))))
	if apiKey := one("X-Api-Key"); d["api_key"] == "" {
		set("api_key", apiKey)
	}
	set("user", one("X-User"))
	set("model", one("X-Model"))
	set("tenant", one("X-Tenant"))
	fwd, orig := routeOf(one(hdrForwardedURI)), routeOf(one(hdrOriginalURI))
	cost := one(hdrCost)
	if dup != nil {
		return service.Request{}, dup
	}
	if fwd != "" && orig != "" && fwd != orig {
		return service.Request{}, httpx.BadRequest(hdrForwardedURI, "names route %q while X-Original-URI names %q; the gateway must set one and drop the client's", fwd, orig)
	}
	set("route", fwd)
	set("route", orig)
	if ip := peer.ClientIP(r, a.opts.TrustedProxies); ip.IsValid() {
		d["ip"] = ip.String()
	}
	req := service.Request{Descriptors: d}
	if cost != "" {
		n, err := strconv.ParseInt(cost, 10, 64)
		if err != nil || n < 0 {
			return req, httpx.BadRequest(hdrCost, "want a non-negative integer, got %q", cost)
		}
		req.Cost = n
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
