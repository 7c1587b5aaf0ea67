package httpapi

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/service"
)

// setRateLimitHeaders describes the tightest enforced limit of d (see
// service.Decision.Tightest) in h:
//
//	Retry-After            whole seconds until the cost fits, rounded up (429 only)
//	X-RateLimit-Limit      the limit's capacity
//	X-RateLimit-Remaining  the cost it still admits now
//	X-RateLimit-Reset      whole seconds until it is whole again, rounded up
//	RateLimit              "<name>";r=<remaining>;t=<reset seconds>
//	RateLimit-Policy       "<name>";q=<capacity>;w=<window seconds>
//
// RateLimit and RateLimit-Policy follow draft-ietf-httpapi-ratelimit-headers-11.
// A decision with no enforced limit, or that is unavailable (503), sets none.
// Retry-After is left out when the cost exceeds the limit: waiting cannot help.
// Headers are set by their canonical keys directly: http.Header.Set would
// canonicalise each name again on every answer.
func (a *api) setRateLimitHeaders(h http.Header, d service.Decision, reqs []service.Request) {
	o, ok := d.Tightest()
	if !ok || d.Unavailable {
		return
	}
	if !d.Allowed && !o.CostExceedsLimit {
		h["Retry-After"] = []string{strconv.FormatInt(max(1, ceilDiv(o.RetryAfter, time.Second)), 10)}
	}
	limit := strconv.FormatInt(o.Limit, 10)
	remaining := strconv.FormatInt(o.Remaining, 10)
	reset := strconv.FormatInt(ceilDiv(o.ResetAfter, time.Second), 10)
	h["X-Ratelimit-Limit"] = []string{limit}
	h["X-Ratelimit-Remaining"] = []string{remaining}
	h["X-Ratelimit-Reset"] = []string{reset}
	name := sfString(o.Name)
	h["Ratelimit"] = []string{name + ";r=" + remaining + ";t=" + reset}
	var desc map[string]string
	if o.Request >= 0 && o.Request < len(reqs) {
		desc = reqs[o.Request].Descriptors
	}
	if l, ok := a.svc.LimitFor(o.Name, desc); ok {
		h["Ratelimit-Policy"] = []string{name + ";q=" + limit + ";w=" + strconv.FormatInt(windowSeconds(l), 10)}
	}
}

// windowSeconds is the RateLimit-Policy window of l in whole seconds,
// rounded up (at least 1): service.PolicyOf's window, the one the Envoy RLS
// reports too — the period of a window algorithm, and for a token bucket or
// GCRA the time an empty bucket takes to refill completely, which is the
// window in which its capacity (the policy's quota) is granted.
func windowSeconds(l tokenlimit.Limit) int64 {
	return max(1, ceilDiv(service.PolicyOf(l).Window, time.Second))
}

// sfString quotes s as a Structured Field String (RFC 9651 §3.3.3): only
// printable ASCII, with '"' and '\' escaped. Other bytes become '?'. Limit
// names are plain ASCII already, so this only guards the syntax.
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
