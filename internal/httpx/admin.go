package httpx

import (
	"net/http"

	"github.com/tokenlimit/tokenlimit/internal/peer"
)

// AdminGate guards admin endpoints. A request passes only if an admin token
// is configured, the client is on loopback (unless FromAnywhere), and it
// carries "Authorization: Bearer <token>". Tokens are compared as SHA-256
// digests in constant time, so neither their content nor their length leaks
// through timing. The zero value refuses everything (no token).
type AdminGate struct {
	token        peer.Token
	enabled      bool
	fromAnywhere bool
}

// NewAdminGate returns the gate of token; an empty token disables the
// admin endpoints (403). fromAnywhere lets clients off loopback in.
func NewAdminGate(token string, fromAnywhere bool) AdminGate {
	return AdminGate{token: peer.NewToken(token), enabled: token != "", fromAnywhere: fromAnywhere}
}

// Wrap answers 403 when no admin token is configured or the client is not
// on loopback (and FromAnywhere is off), 401 with WWW-Authenticate unless
// the request carries the token; otherwise it calls next. what names the
// guarded feature in the messages, such as "the admin endpoints".
func (g AdminGate) Wrap(what string, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if e := g.check(what, r); e != nil {
			if e.Status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="tokenlimit admin"`)
			}
			WriteError(w, e)
			return
		}
		next(w, r)
	}
}

// Off says why the guarded endpoints refuse r whatever token it carries
// (no admin token configured, or r not from loopback), naming them as what;
// "" when a request with the token would be served.
func (g AdminGate) Off(what string, r *http.Request) string {
	if e := g.check(what, r); e != nil && e.Status == http.StatusForbidden {
		return e.Message
	}
	return ""
}

func (g AdminGate) check(what string, r *http.Request) *Error {
	switch {
	case !g.enabled:
		return &Error{Status: http.StatusForbidden, Field: "Authorization",
			Message: what + " are disabled: start the server with an admin token (--admin-token) to enable them"}
	case !g.fromAnywhere && !peer.IsLoopback(r):
		return &Error{Status: http.StatusForbidden,
			Message: what + " answer loopback clients only (serve --admin-from-anywhere to change it)"}
	case !g.token.CarriedBy(r):
		return &Error{Status: http.StatusUnauthorized, Field: "Authorization",
			Message: "want Authorization: Bearer <admin token>"}
	}
	return nil
}
