// Package peer answers questions about who is on the other end of an HTTP
// request's connection.
package peer

import (
	"net/http"
	"net/netip"
)

// IsLoopback reports whether r's connection comes from a loopback address
// (127.0.0.0/8 or ::1). Headers such as X-Forwarded-For play no part.
func IsLoopback(r *http.Request) bool {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}
