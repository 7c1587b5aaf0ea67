// Package peer answers questions about who sent an HTTP request: whether
// its connection is local, which client it comes from through trusted
// proxies, and the bearer token it carries.
package peer

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// IsLoopback reports whether r's connection comes from a loopback address
// (127.0.0.0/8 or ::1). Headers such as X-Forwarded-For play no part.
func IsLoopback(r *http.Request) bool {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// Bearer returns the token of an "Authorization: Bearer <token>" header
// value, or "" if it is not one.
func Bearer(authorization string) string {
	scheme, token, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// ClientIP is the address of the client that sent r. The connection's peer
// is the client unless it is one of the trusted proxies; then
// X-Forwarded-For is read from right to left, skipping trusted proxies, and
// the first address that is not one is the client. If every hop is trusted,
// the leftmost is the client; an unparsable entry stops the walk at the hop
// that added it. The result is invalid if the peer's address is.
func ClientIP(r *http.Request, trusted []netip.Prefix) netip.Addr {
	addr := peerAddr(r.RemoteAddr)
	if !addr.IsValid() || !isTrusted(addr, trusted) {
		return addr
	}
	hops := forwardedFor(r.Header)
	for i := len(hops) - 1; i >= 0; i-- {
		hop, ok := parseHop(hops[i])
		if !ok {
			return addr
		}
		addr = hop
		if !isTrusted(addr, trusted) {
			return addr
		}
	}
	return addr
}

// ClientGroup is the client a request's address a stands for where one
// client's attempts are counted together (budgets of failed
// authentications): an IPv4 address whole, an IPv6 address by its /64
// ("2001:db8:1:2::/64"), since one site gets a /64 and picks any address
// in it at will. An IPv4-mapped address counts as IPv4; an invalid one is
// "".
func ClientGroup(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case !a.IsValid():
		return ""
	case a.Is4():
		return a.String()
	}
	return netip.PrefixFrom(a.WithZone(""), 64).Masked().String()
}

// forwardedFor lists the X-Forwarded-For entries of every such header, in
// order.
func forwardedFor(h http.Header) []string {
	var hops []string
	for _, v := range h.Values("X-Forwarded-For") {
		for hop := range strings.SplitSeq(v, ",") {
			hops = append(hops, strings.TrimSpace(hop))
		}
	}
	return hops
}

// parseHop parses an X-Forwarded-For entry: an address, or an address with
// a port ("1.2.3.4:80", "[::1]:80").
func parseHop(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}

func peerAddr(remote string) netip.Addr {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Token is a secret bearer token, kept as a digest so that comparing it
// with a request's leaks neither its content nor its length through timing.
type Token [sha256.Size]byte

// NewToken returns the token of secret.
func NewToken(secret string) Token { return sha256.Sum256([]byte(secret)) }

// CarriedBy reports whether r carries "Authorization: Bearer <secret>".
func (t Token) CarriedBy(r *http.Request) bool { return t.Equal(TokenOf(r)) }

// TokenOf returns the token r carries as "Authorization: Bearer <secret>";
// the zero Token, which no NewToken equals, when it carries none.
func TokenOf(r *http.Request) Token { return peerToken(Bearer(r.Header.Get("Authorization"))) }

// Equal reports whether t and u are the same token, in constant time.
func (t Token) Equal(u Token) bool { return subtle.ConstantTimeCompare(t[:], u[:]) == 1 }

func peerToken(s string) Token {
	if s == "" {
		return Token{} // never a digest: an absent token matches nothing
	}
	return NewToken(s)
}
