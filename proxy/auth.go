package proxy

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/internal/peer"
	"github.com/tokenlimit/tokenlimit/internal/ratelimitheader"
	"github.com/tokenlimit/tokenlimit/internal/redact"
	"github.com/tokenlimit/tokenlimit/plane"
	"github.com/tokenlimit/tokenlimit/service"
)

// AuthFailuresLimit is the name of each client's budget of failed
// authentications (Options.AuthFailures) in the store's keys and in
// metrics, shared with the admin tokens' failed attempts. A configuration
// cannot give a limit this name.
const AuthFailuresLimit = httpx.AuthFailuresLimit

// apiKeyOf returns the api key of r: its Authorization bearer token, else
// its x-api-key (Anthropic's clients send one or the other); "" if none.
func apiKeyOf(r *http.Request) string {
	if key := peer.Bearer(r.Header.Get("Authorization")); key != "" {
		return key
	}
	return r.Header.Get("X-Api-Key")
}

// identify sets c.req's descriptors (api_key, ip, route) from r's api key:
// the key itself if the configuration lists it; a plane key's, as the
// service resolves its secret (never the secret itself); or UnknownKey
// under DefaultPlanForUnknownKeys (never the unknown key itself). Otherwise
// it answers 401, or 429 to an address past its budget of failed
// authentications, and returns false.
func (p *Proxy) identify(w http.ResponseWriter, r *http.Request, c *call) bool {
	ip, key := p.clientIP(r), apiKeyOf(r)
	desc := map[string]string{"api_key": key, "ip": ip, "route": r.URL.Path}
	if d, held := p.failures.Held(ip); held {
		p.log.Debug("refused: too many failed authentications", "request_id", c.id, "ip", ip)
		p.refuseAddress(w, c, d)
		return false
	}
	req, pk, err := p.svc.Authenticate(service.Request{Descriptors: desc})
	switch {
	case err == nil:
		c.req = req
		if pk != nil {
			c.keyID = pk.ID
		}
		return true
	case errors.Is(err, service.ErrUnknownAPIKey) && p.opts.UnknownKeys == DefaultPlanForUnknownKeys:
		if !p.svc.KnownAPIKey(UnknownKey) {
			req.Descriptors["api_key"] = UnknownKey
			c.req = req
			return true
		}
		p.log.Error("the configuration lists the api key " + UnknownKey + ", which names unknown keys: rejecting them")
	}
	p.authFailed(w, r, c, ip, key, err)
	return false
}

// authFailed charges a failed authentication from ip to its budget and
// answers 401 saying why, or 429 if the store denies the charge.
func (p *Proxy) authFailed(w http.ResponseWriter, r *http.Request, c *call, ip, key string, why error) {
	d, err := p.failures.Failed(r.Context(), ip)
	switch {
	case err != nil:
		p.log.Error("counting a failed authentication failed", "request_id", c.id, "error", err)
	case !d.Allowed:
		p.log.Warn("too many failed authentications: refusing the address", "request_id", c.id, "ip", ip)
		p.refuseAddress(w, c, d)
		return
	}
	hint := redact.Hint(key)
	msg := fmt.Sprintf("Incorrect API key provided: %s. This proxy does not know that key.", hint)
	switch {
	case key == "" && c.dialect == anthropic:
		msg = "x-api-key header is required (or Authorization: Bearer YOUR_KEY)."
	case key == "":
		msg = "You didn't provide an API key. Send it as an Authorization header using Bearer auth (Authorization: Bearer YOUR_KEY)."
	case errors.Is(why, plane.ErrKeyDisabled):
		msg = fmt.Sprintf("The API key %s is disabled (the key or its team).", hint)
	case errors.Is(why, plane.ErrKeyExpired):
		msg = fmt.Sprintf("The API key %s has expired (the key or its team).", hint)
	}
	p.log.Info("authentication failed", "request_id", c.id, "ip", ip, "key", hint, "reason", reason(why), "path", r.URL.Path)
	writeError(w, c.dialect, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", msg)
}

// reason names why a key was refused, for the log.
func reason(err error) string {
	switch {
	case errors.Is(err, plane.ErrKeyDisabled):
		return "disabled"
	case errors.Is(err, plane.ErrKeyExpired):
		return "expired"
	case errors.Is(err, service.ErrUnauthorized):
		return "unknown or revoked plane key"
	}
	return "unknown key"
}

// refuseAddress answers 429 to a client address whose budget of failed
// authentications d denied, whatever key it sent: Retry-After, and
// retry-after-ms when the wait is at most MaxRetryWait (else
// x-should-retry: false).
func (p *Proxy) refuseAddress(w http.ResponseWriter, c *call, d service.Decision) {
	o, _ := d.Tightest()
	wait := ratelimitheader.CeilMillis(o.RetryAfter)
	h := w.Header()
	h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
	if wait > p.opts.MaxRetryWait {
		h.Set("X-Should-Retry", "false")
	} else {
		h.Set("Retry-After-Ms", strconv.FormatInt(wait.Milliseconds(), 10))
	}
	writeError(w, c.dialect, http.StatusTooManyRequests, "requests", "rate_limit_exceeded",
		fmt.Sprintf("Too many failed authentications from your address (%s). Please try again in %s.", AuthFailuresLimit, wait))
}

// credentials sets the upstream request's credential h in dialect d: the
// client's Authorization and x-api-key are dropped when the proxy holds
// the upstream's key (which replaces them) or when c was made with a plane
// key (whose secret never leaves the proxy); otherwise they go as they
// came.
func (p *Proxy) credentials(h http.Header, c *call, d dialect) {
	if p.opts.UpstreamAPIKey == "" && (c == nil || c.keyID == "") {
		return
	}
	h.Del("Authorization")
	h.Del("X-Api-Key")
	switch {
	case p.opts.UpstreamAPIKey == "":
	case d == anthropic:
		h.Set("X-Api-Key", p.opts.UpstreamAPIKey)
	default:
		h.Set("Authorization", "Bearer "+p.opts.UpstreamAPIKey)
	}
}

// who is how logs name c's api key: the plane key's id, or the key
// shortened by redact.Hint.
func (c *call) who() string {
	if c.keyID != "" {
		return c.keyID
	}
	return redact.Hint(c.req.Descriptors["api_key"])
}
