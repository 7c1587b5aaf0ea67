package httpapi

import (
	"math"
	"math/bits"
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
func (a *api) setRateLimitHeaders(h http.Header, d service.Decision, reqs []service.Request) {
	o, ok := d.Tightest()
	if !ok || d.Unavailable {
		return
	}
	if !d.Allowed && !o.CostExceedsLimit {
		h.Set("Retry-After", strconv.FormatInt(max(1, ceilDiv(o.RetryAfter, time.Second)), 10))
	}
	limit := strconv.FormatInt(o.Limit, 10)
	remaining := strconv.FormatInt(o.Remaining, 10)
	reset := strconv.FormatInt(ceilDiv(o.ResetAfter, time.Second), 10)
	h.Set("X-RateLimit-Limit", limit)
	h.Set("X-RateLimit-Remaining", remaining)
	h.Set("X-RateLimit-Reset", reset)
	name := sfString(o.Name)
	h.Set("RateLimit", name+";r="+remaining+";t="+reset)
	var desc map[string]string
	if o.Request >= 0 && o.Request < len(reqs) {
		desc = reqs[o.Request].Descriptors
	}
	if l, ok := a.svc.LimitFor(o.Name, desc); ok {
		h.Set("RateLimit-Policy", name+";q="+limit+";w="+strconv.FormatInt(windowSeconds(l), 10))
	}
}

// windowSeconds is the RateLimit-Policy window of l, in whole seconds
// rounded up (at least 1): the period of a window algorithm, and for a token
// bucket or GCRA the time an empty bucket takes to refill completely, which
// is the window in which its capacity (the policy's quota) is granted.
func windowSeconds(l tokenlimit.Limit) int64 {
	if l.Algorithm != tokenlimit.TokenBucket && l.Algorithm != tokenlimit.GCRA {
		return max(1, ceilDiv(l.Period, time.Second))
	}
	num, den := l.Interval() // µs per unit of cost: num/den
	// Capacity × num can pass 64 bits for extreme limits: divide in 128.
	hi, lo := bits.Mul64(uint64(l.Capacity()), uint64(num))
	perSecond := uint64(den) * uint64(time.Second/time.Microsecond)
	if hi >= perSecond {
		return math.MaxInt64
	}
	q, rem := bits.Div64(hi, lo, perSecond)
	if rem > 0 {
		q++
	}
	return max(1, int64(min(q, math.MaxInt64)))
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
