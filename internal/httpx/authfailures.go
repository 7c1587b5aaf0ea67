package httpx

import (
	"context"
	"net/netip"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/peer"
	"github.com/tokenlimit/tokenlimit/service"
)

// AuthFailuresLimit is the name of each client's budget of failed
// authentications, in the store's keys and in metrics: the LLM proxy's
// api keys and every server's admin tokens draw from it. A configuration
// cannot give a limit this name.
const AuthFailuresLimit = "proxy:auth-failures"

// AuthFailures counts failed authentications per client in the service's
// store (so across replicas): lim per client, one per failure, failing
// open on the replica's local budget while the store fails. A client is
// an IPv4 address, or an IPv6 /64 (peer.ClientGroup). Once the store
// denies a client, this replica remembers it (Held) until the budget
// allows one more failure, without a store call. It is safe for
// concurrent use.
type AuthFailures struct {
	svc   *service.Service
	limit *config.Limit
}

// NewAuthFailures returns the budget of failed authentications lim per
// client, decided by svc.
func NewAuthFailures(svc *service.Service, lim tokenlimit.Limit) *AuthFailures {
	return &AuthFailures{svc: svc, limit: &config.Limit{Name: AuthFailuresLimit, Key: []string{"ip"}, Limit: lim,
		Cost: config.Cost{Constant: 1}, FailOpen: true, FailOpenShare: 1, LocalCache: true}}
}

// Held returns the denial of the client at addr (an address, or any other
// text naming the client when its address is unknown) while this replica
// remembers it; false when there is none.
func (f *AuthFailures) Held(addr string) (service.Decision, bool) {
	return f.svc.LocalDenial(f.limit, clientOf(addr))
}

// Failed charges a failed authentication to the client at addr. A
// decision that is not Allowed means the client is past its budget: it
// should be refused (429) until the decision's retry-after. The charge is
// made whatever happens to ctx's cancellation: a client that leaves must
// not keep its failure from being counted.
func (f *AuthFailures) Failed(ctx context.Context, addr string) (service.Decision, error) {
	return f.svc.CheckLimit(context.WithoutCancel(ctx), f.limit, clientOf(addr))
}

// clientOf is the descriptors of the client at addr: its group when addr
// is an address (peer.ClientGroup), else addr itself.
func clientOf(addr string) map[string]string {
	if a, err := netip.ParseAddr(addr); err == nil {
		addr = peer.ClientGroup(a)
	}
	return map[string]string{"ip": addr}
}
