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

// RefusedKey charges a refused plane secret (an api_key descriptor of a
// plane key's form that names no usable key) to the client named client,
// and returns the client's denial when it is past its budget: remembered
// here, or denied by the store. A valid key is never refused for its
// client's failures: a client may be a gateway's one address for all its
// callers, and a secret of 32 random bytes is not guessed by trying. A nil
// f counts nothing. The charge is made whatever happens to ctx.
func (f *AuthFailures) RefusedKey(ctx context.Context, client string) (service.Decision, bool) {
	if f == nil {
		return service.Decision{}, false
	}
	if d, held := f.Held(client); held {
		return d, true
	}
	d, err := f.Failed(ctx, client)
	return d, err == nil && !d.Allowed
}

// KeyClient names the client of a call whose api key was refused: the
// remote_address (Envoy's action of that name) or ip descriptor of reqs,
// the first given, else conn, the address of the connection (a
// gateway's, shared by its callers).
func KeyClient(conn string, reqs []service.Request) string {
	for _, key := range [...]string{"remote_address", "ip"} {
		for _, q := range reqs {
			if v := q.Descriptors[key]; v != "" {
				return v
			}
		}
	}
	return conn
}
