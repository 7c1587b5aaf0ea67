package httpx

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/peer"
	"github.com/tokenlimit/tokenlimit/internal/ratelimitheader"
	"github.com/tokenlimit/tokenlimit/service"
)

// AdminGate guards admin endpoints. A request passes only if an admin token
// is configured, the client is on loopback (unless FromAnywhere), and it
// carries "Authorization: Bearer <token>" of one of the named admin tokens;
// the handler then finds that token's name with AdminName. Tokens are
// compared as SHA-256 digests in constant time, each of them, so neither
// their content, their length nor which one matched leaks through timing.
// With failures, every request refused for its token (401) is a failed
// authentication of its connection's address, and an address past its
// budget is answered 429 whatever token it carries. The tokens may be
// replaced while requests pass (SetTokens). It is safe for concurrent use;
// the zero value refuses everything (no token).
type AdminGate struct {
	tokens       atomic.Pointer[[]adminToken]
	fromAnywhere bool
	failures     *AuthFailures // nil: failures are not counted
}

// Failures is the budget of failed authentications the gate counts its
// refusals in (nil: none), for the server's other credentials to share.
func (g *AdminGate) Failures() *AuthFailures { return g.failures }

// adminToken is one admin token's digest and its name.
type adminToken struct {
	name  string
	token peer.Token
}

// DefaultAdminName names an admin token given without a name.
const DefaultAdminName = "admin"

// NewAdminGate returns the gate of tokens, by name; none (or only empty
// tokens) disables the admin endpoints (403). fromAnywhere lets clients
// off loopback in. failures, if not nil, counts the attempts refused for
// their token.
func NewAdminGate(tokens map[string]string, fromAnywhere bool, failures *AuthFailures) *AdminGate {
	g := &AdminGate{fromAnywhere: fromAnywhere, failures: failures}
	g.SetTokens(tokens)
	return g
}

// SetTokens replaces the gate's tokens, by name, for the requests that
// arrive from then on; none (or only empty tokens) disables the admin
// endpoints.
func (g *AdminGate) SetTokens(tokens map[string]string) {
	list := make([]adminToken, 0, len(tokens))
	for name, token := range tokens {
		if token != "" {
			list = append(list, adminToken{name: name, token: peer.NewToken(token)})
		}
	}
	slices.SortFunc(list, func(a, b adminToken) int { return strings.Compare(a.name, b.name) })
	g.tokens.Store(&list)
}

// WithAdminToken returns named, the admin tokens by name, with token added
// under name (DefaultAdminName when ""): the options of a server that take
// one token and a map of more. An empty token adds nothing; a name taken
// twice is an error.
func WithAdminToken(named map[string]string, name, token string) (map[string]string, error) {
	if token == "" {
		return named, nil
	}
	name = cmp.Or(name, DefaultAdminName)
	if _, dup := named[name]; dup {
		return nil, fmt.Errorf("two admin tokens named %q", name)
	}
	out := maps.Clone(named)
	if out == nil {
		out = map[string]string{}
	}
	out[name] = token
	return out, nil
}

// adminNameKey is the context key of the name of the admin token a
// request passed the gate with.
type adminNameKey struct{}

// AdminName returns the name of the admin token the request of ctx passed
// the gate with; "" for a request that did not pass one.
func AdminName(ctx context.Context) string {
	name, _ := ctx.Value(adminNameKey{}).(string)
	return name
}

// Wrap answers 403 when no admin token is configured or the client is not
// on loopback (and FromAnywhere is off), 401 with WWW-Authenticate unless
// the request carries an admin token; otherwise it calls next with the
// token's name in the request's context (AdminName). what names the
// guarded feature in the messages, such as "the admin endpoints".
func (g *AdminGate) Wrap(what string, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, e := g.check(what, r)
		if e != nil && e.Status == http.StatusUnauthorized {
			e = g.failed(r, e)
		}
		if e != nil {
			switch e.Status {
			case http.StatusUnauthorized:
				w.Header().Set("WWW-Authenticate", `Bearer realm="tokenlimit admin"`)
			case http.StatusTooManyRequests:
				w.Header().Set("Retry-After", strconv.FormatInt(ratelimitheader.Seconds(e.wait), 10))
			}
			WriteError(w, &e.Error)
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), adminNameKey{}, name)))
	}
}

// Off says why the guarded endpoints refuse r whatever token it carries
// (no admin token configured, or r not from loopback), naming them as what;
// "" when a request with the token would be served.
func (g *AdminGate) Off(what string, r *http.Request) string {
	if _, e := g.check(what, r); e != nil && e.Status == http.StatusForbidden {
		return e.Message
	}
	return ""
}

// refusal is why the gate refuses a request, and for a 429 how long its
// client waits.
type refusal struct {
	Error
	wait time.Duration
}

// check returns the name of the admin token r carries, or why r is
// refused.
func (g *AdminGate) check(what string, r *http.Request) (string, *refusal) {
	var tokens []adminToken
	if p := g.tokens.Load(); p != nil {
		tokens = *p
	}
	switch {
	case len(tokens) == 0:
		return "", &refusal{Error: Error{Status: http.StatusForbidden, Field: "Authorization",
			Message: what + " are disabled: start the server with an admin token (--admin-token) to enable them"}}
	case !g.fromAnywhere && !peer.IsLoopback(r):
		return "", &refusal{Error: Error{Status: http.StatusForbidden,
			Message: what + " answer loopback clients only (serve --admin-from-anywhere to change it)"}}
	}
	if g.failures != nil {
		if d, held := g.failures.Held(ConnAddr(r)); held {
			return "", tooManyFailures(d)
		}
	}
	given := peer.TokenOf(r)
	found := -1
	for i, t := range tokens { // every one: how long this takes says nothing of which matched
		if t.token.Equal(given) {
			found = i
		}
	}
	if found < 0 {
		return "", &refusal{Error: Error{Status: http.StatusUnauthorized, Field: "Authorization",
			Message: "want Authorization: Bearer <admin token>"}}
	}
	return tokens[found].name, nil
}

// failed counts the failed authentication of r, refused with e (a 401),
// and returns e, or the 429 of a client past its budget. A failure the
// store cannot count leaves e as it is.
func (g *AdminGate) failed(r *http.Request, e *refusal) *refusal {
	if g.failures == nil {
		return e
	}
	if d, err := g.failures.Failed(r.Context(), ConnAddr(r)); err == nil && !d.Allowed {
		return tooManyFailures(d)
	}
	return e
}

// tooManyFailures is the 429 of a client whose budget of failed
// authentications d denied.
func tooManyFailures(d service.Decision) *refusal {
	return &refusal{Error: *TooManyFailures(d, "Authorization"), wait: RetryAfter(d)}
}

// TooManyFailures is the 429 naming field of a client whose budget of
// failed authentications d denied.
func TooManyFailures(d service.Decision, field string) *Error {
	return &Error{Status: http.StatusTooManyRequests, Field: field,
		Message: fmt.Sprintf("too many failed authentications from your address (%s): try again in %s", AuthFailuresLimit, RetryAfter(d).Round(time.Millisecond))}
}

// RetryAfter is the wait of d's tightest outcome.
func RetryAfter(d service.Decision) time.Duration {
	o, _ := d.Tightest()
	return o.RetryAfter
}

// ConnAddr is the address of r's connection: failed admin attempts are
// counted by it, never by a header the client writes (the loopback rule
// reads none either).
func ConnAddr(r *http.Request) string { return AddrHost(r.RemoteAddr) }

// AddrHost is the IP address of addr, an "ip:port" such as a connection's
// remote address, or addr itself when it is not of that form.
func AddrHost(addr string) string {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		return ap.Addr().String()
	}
	return addr
}

// adminNamePattern is what an admin token's name may be.
var adminNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// splitAdminToken reads "NAME:TOKEN" or a bare "TOKEN" (named
// DefaultAdminName): a value is NAME:TOKEN when what precedes its first
// ':' is a valid name, so a bare token holding ':' must be given with a
// name.
func splitAdminToken(value string) (name, token string) {
	if n, t, ok := strings.Cut(value, ":"); ok && adminNamePattern.MatchString(n) {
		return n, t
	}
	return DefaultAdminName, value
}

// ParseAdminTokens reads the value of --admin-token (or
// $TOKENLIMIT_ADMIN_TOKEN) as a server takes it: "TOKEN", one token named
// "admin"; "NAME:TOKEN", one named token; or "@FILE", a file read with
// readFile holding one NAME:TOKEN a line (blank lines and lines starting
// with # skipped). Names are 1-63 lowercase letters, digits, '_', '.', '-'
// and distinct; tokens are not empty and distinct. "" is no token. Errors
// name the flag and the line, never a token.
func ParseAdminTokens(value string, readFile func(string) ([]byte, error)) (map[string]string, error) {
	if value == "" {
		return nil, nil
	}
	file, ok := strings.CutPrefix(value, "@")
	if !ok {
		name, token := splitAdminToken(value)
		if token == "" {
			return nil, errors.New("--admin-token: NAME:TOKEN has an empty token")
		}
		return map[string]string{name: token}, nil
	}
	data, err := readFile(file)
	if err != nil {
		return nil, fmt.Errorf("--admin-token: %w", err)
	}
	tokens := map[string]string{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, token, ok := strings.Cut(line, ":")
		switch {
		case !ok || !adminNamePattern.MatchString(name):
			return nil, fmt.Errorf("--admin-token: %s:%d: want NAME:TOKEN, NAME 1-63 of a-z 0-9 _ . - (the line is not shown: it may hold a token)", file, i+1)
		case token == "":
			return nil, fmt.Errorf("--admin-token: %s:%d: the token of %q is empty", file, i+1, name)
		case tokens[name] != "":
			return nil, fmt.Errorf("--admin-token: %s:%d: a second token named %q", file, i+1, name)
		}
		for other, t := range tokens {
			if t == token {
				return nil, fmt.Errorf("--admin-token: %s:%d: %q has the token of %q: each name needs its own", file, i+1, name, other)
			}
		}
		tokens[name] = token
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("--admin-token: %s holds no NAME:TOKEN line", file)
	}
	return tokens, nil
}

// AdminBearer returns the token a client sends for value, --admin-token as
// a client takes it: "TOKEN", or the TOKEN of "NAME:TOKEN" (so that one
// $TOKENLIMIT_ADMIN_TOKEN serves a server and its command line). A file
// of tokens is the server's form only.
func AdminBearer(value string) (string, error) {
	if strings.HasPrefix(value, "@") {
		return "", errors.New("--admin-token: a client sends one token, TOKEN or NAME:TOKEN, not @FILE")
	}
	_, token := splitAdminToken(value)
	return token, nil
}
