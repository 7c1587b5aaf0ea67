// Package ratelimitheader is the one model of the rate-limit headers that
// tokenlimit's transports send: computed once from a decision (Of), then
// rendered as HTTP headers (SetHTTP, the API and the middleware), as name
// and value pairs (Pairs, Envoy's response_headers_to_add and gRPC
// metadata) or as OpenAI's and Anthropic's per-unit headers (SetOpenAI,
// SetAnthropic, the LLM proxy). Every transport therefore
// rounds alike and agrees on when Retry-After is sent.
//
// The fields, for the limit that constrains the request most:
//
//	Retry-After            whole seconds until the cost fits, rounded up, at least 1 (denied only)
//	X-RateLimit-Limit      the limit's capacity
//	X-RateLimit-Remaining  the cost it still admits now
//	X-RateLimit-Reset      whole seconds until it is whole again, rounded up
//	RateLimit              "<name>";r=<remaining>;t=<reset seconds>
//	RateLimit-Policy       "<name>";q=<capacity>;w=<window seconds>
//
// RateLimit and RateLimit-Policy follow draft-ietf-httpapi-ratelimit-headers.
// Retry-After is left out when the cost exceeds the limit: waiting cannot
// help.
package ratelimitheader

import (
	"net/http"
	"strconv"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// Fields are the rate-limit fields of one limit's answer.
type Fields struct {
	// Name names the limit in RateLimit and RateLimit-Policy.
	Name string
	// Limit is the limit's capacity; Remaining the cost it still admits.
	Limit, Remaining int64
	// ResetAfter is how long until the budget is whole again.
	ResetAfter time.Duration
	// RetryAfter is how long until the cost fits: set only when the request
	// was denied and waiting can help, 0 otherwise.
	RetryAfter time.Duration
	// Denied reports that the request was denied.
	Denied bool
	// Window is the policy's window (see tokenlimit.Limit.Window); 0 when
	// unknown, and then RateLimit-Policy is left out.
	Window time.Duration
}

// Of returns the fields of result r of the limit named name, whose window
// is window (0 if unknown), for a request that was denied or not.
func Of(name string, r tokenlimit.Result, denied bool, window time.Duration) Fields {
	f := Fields{Name: name, Limit: r.Limit, Remaining: r.Remaining, ResetAfter: r.ResetAfter, Denied: denied, Window: window}
	if denied && !r.CostExceedsLimit {
		f.RetryAfter = max(r.RetryAfter, time.Nanosecond)
	}
	return f
}

// Seconds is d in whole seconds rounded up, 0 for d <= 0.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// Canonical header names, as http.Header keys them.
const (
	RetryAfter          = "Retry-After"
	XRateLimitLimit     = "X-Ratelimit-Limit"
	XRateLimitRemaining = "X-Ratelimit-Remaining"
	XRateLimitReset     = "X-Ratelimit-Reset"
	RateLimit           = "Ratelimit"
	RateLimitPolicy     = "Ratelimit-Policy"
)

// Pair is one header: its canonical name and its value.
type Pair struct{ Name, Value string }

// Pairs renders f as headers, in the order of the package comment's table
// (Retry-After last).
func (f Fields) Pairs() []Pair {
	var values [6]string
	names, n := f.render(&values)
	p := make([]Pair, n)
	for i := range n {
		p[i] = Pair{names[i], values[i]}
	}
	return p
}

// RenderLower writes f's header values into values and returns their
// names in lower case, as HTTP/2 writes them, and their count, in the
// order of Pairs: what Pairs returns, without allocating the pairs. The
// values share one string, the one allocation.
func (f Fields) RenderLower(values *[6]string) (names *[6]string, n int) {
	names, n = f.render(values)
	if names == &allNames {
		return &allLowerNames, n
	}
	return &noPolicyLowerNames, n
}

// SetHTTP sets f's headers in h. Keys are set directly, already canonical
// (http.Header.Set would canonicalise each name again on every answer), and
// the values share one backing array.
func (f Fields) SetHTTP(h http.Header) {
	values := new([6]string)
	names, n := f.render(values)
	for i := range n {
		h[names[i]] = values[i : i+1 : i+1]
	}
}

// render writes f's header values into values and returns their names and
// count. The values are substrings of one string built in one buffer: one
// allocation whatever the numbers.
func (f Fields) render(values *[6]string) (*[6]string, int) {
	var buf [256]byte
	b := buf[:0]
	var ends [6]int
	n := 0
	end := func() { ends[n] = len(b); n++ }
	b = strconv.AppendInt(b, f.Limit, 10)
	end()
	b = strconv.AppendInt(b, f.Remaining, 10)
	end()
	b = strconv.AppendInt(b, Seconds(f.ResetAfter), 10)
	end()
	b = appendSFString(b, f.Name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, f.Remaining, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, Seconds(f.ResetAfter), 10)
	end()
	names := &noPolicyNames
	if f.Window > 0 {
		names = &allNames
		b = appendSFString(b, f.Name)
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, f.Limit, 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, max(1, Seconds(f.Window)), 10)
		end()
	}
	if f.RetryAfter > 0 {
		b = strconv.AppendInt(b, max(1, Seconds(f.RetryAfter)), 10)
		end()
	}
	all := string(b)
	start := 0
	for i := range n {
		values[i] = all[start:ends[i]]
		start = ends[i]
	}
	return names, n
}

var (
	allNames      = [6]string{XRateLimitLimit, XRateLimitRemaining, XRateLimitReset, RateLimit, RateLimitPolicy, RetryAfter}
	noPolicyNames = [6]string{XRateLimitLimit, XRateLimitRemaining, XRateLimitReset, RateLimit, RetryAfter}

	allLowerNames      = [6]string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "ratelimit", "ratelimit-policy", "retry-after"}
	noPolicyLowerNames = [6]string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "ratelimit", "retry-after"}
)

// SetOpenAI sets OpenAI's X-Ratelimit-{Limit,Remaining,Reset}-<unit> from
// f, unit being "Requests" or "Tokens". The reset is a Go duration rounded
// up to the millisecond ("6m0s", "1.5s", "20ms"), as OpenAI writes it.
func (f Fields) SetOpenAI(h http.Header, unit string) {
	h.Set("X-Ratelimit-Limit-"+unit, strconv.FormatInt(f.Limit, 10))
	h.Set("X-Ratelimit-Remaining-"+unit, strconv.FormatInt(f.Remaining, 10))
	h.Set("X-Ratelimit-Reset-"+unit, CeilMillis(f.ResetAfter).String())
}

// SetAnthropic sets Anthropic's Anthropic-Ratelimit-<unit>-{Limit,
// Remaining,Reset} from f, unit being "Requests" or "Tokens". The reset is
// the time the budget is whole again, at + ResetAfter rounded up to the
// second, in RFC 3339 UTC; at is when the store decided.
func (f Fields) SetAnthropic(h http.Header, unit string, at time.Time) {
	prefix := "Anthropic-Ratelimit-" + unit + "-"
	h.Set(prefix+"Limit", strconv.FormatInt(f.Limit, 10))
	h.Set(prefix+"Remaining", strconv.FormatInt(f.Remaining, 10))
	h.Set(prefix+"Reset", ResetTime(at, f.ResetAfter))
}

// ResetTime returns at + after rounded up to the second, in RFC 3339 UTC:
// when a budget is whole again (or a denied call may pass), as Anthropic
// writes it.
func ResetTime(at time.Time, after time.Duration) string {
	reset := at.Add(after)
	if r := reset.Truncate(time.Second); r.Before(reset) {
		reset = r.Add(time.Second)
	}
	return reset.UTC().Format(time.RFC3339)
}

// CeilMillis rounds d up to a whole millisecond.
func CeilMillis(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// sfString quotes s as a Structured Field String (RFC 9651 §3.3.3): only
// printable ASCII, with '"' and '\' escaped. Other bytes become '?'. Limit
// names are plain ASCII already, so this only guards the syntax.
func sfString(s string) string {
	return string(appendSFString(make([]byte, 0, len(s)+2), s))
}

// appendSFString appends sfString(s) to b.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	if plainSF(s) {
		return append(append(b, s...), '"')
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// plainSF reports whether s is printable ASCII without '"' or '\\': a
// Structured Field String as it is, between the quotes.
func plainSF(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
