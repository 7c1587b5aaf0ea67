// Package grpclimit is a gRPC server interceptor, unary and stream, that
// rate-limits calls with a tokenlimit.Limiter as package httplimit does for
// net/http: each call's key and cost come from functions, an admitted call
// gets the rate-limit headers as response metadata (x-ratelimit-*,
// ratelimit, ratelimit-policy), a denied one RESOURCE_EXHAUSTED with the
// same metadata and retry-after, a bad or missing key INVALID_ARGUMENT
// naming what is missing (or a default key), and a failing store lets the
// call through unchanged unless the interceptor fails closed (UNAVAILABLE).
//
//	in, err := grpclimit.New(limiter, limit, grpclimit.Options{Key: grpclimit.KeyFromMetadata("x-api-key")})
//	srv := grpc.NewServer(grpc.UnaryInterceptor(in.Unary()), grpc.StreamInterceptor(in.Stream()))
package grpclimit

import (
	"context"
	"log/slog"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/guard"
	"github.com/tokenlimit/tokenlimit/internal/ratelimitheader"
)

// Options configures an Interceptor. The zero value limits every peer
// address to the limit, one unit of cost per call (per stream), failing
// open.
type Options struct {
	// Name names the limit in the ratelimit and ratelimit-policy metadata.
	// Empty means "default".
	Name string

	// Key returns the budget key of a call from its context (metadata,
	// peer) and full method name ("/pkg.Service/Method"). Nil means
	// KeyFromPeer: the address of the connection's peer.
	//
	// A call with no key (Key returns "" and no error, or a *KeyError) is
	// charged under DefaultKey if it is set, and otherwise refused with
	// INVALID_ARGUMENT naming the KeyError's Field (or "key"). Any other
	// error is INVALID_ARGUMENT with the error's message.
	Key func(ctx context.Context, fullMethod string) (string, error)

	// DefaultKey is the budget of calls that carry no key. Empty means
	// they are refused.
	DefaultKey string

	// Cost returns what a call takes from its budget, 0 to
	// tokenlimit.MaxCost; req is the unary request, nil for a stream
	// (charged once, when it opens). Nil means 1 per call. An error is
	// INVALID_ARGUMENT naming "cost" (or the field of a
	// *tokenlimit.FieldError).
	Cost func(ctx context.Context, fullMethod string, req any) (int64, error)

	// FailClosed answers UNAVAILABLE when the store fails. False, the zero
	// value, fails open: the call goes to its handler unchanged, with no
	// rate-limit metadata, and the failure is logged.
	FailClosed bool

	// Logger receives store failures at warn level. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// KeyError reports that a call carries no usable key; Field names what is
// missing, such as the metadata key "x-api-key".
type KeyError = guard.KeyError

// Interceptor limits the calls of a gRPC server. It is safe for concurrent
// use; its unary and stream interceptors share its budgets.
type Interceptor struct {
	g    *guard.Guard
	key  func(context.Context, string) (string, error)
	cost func(context.Context, string, any) (int64, error)
}

// New returns an interceptor that decides calls under limit with l. It
// fails if l is nil, limit is invalid, or DefaultKey is not a valid key.
func New(l *tokenlimit.Limiter, limit tokenlimit.Limit, opts Options) (*Interceptor, error) {
	g, err := guard.New("grpclimit", l, limit, guard.Guard{
		Name: opts.Name, DefaultKey: opts.DefaultKey, FailClosed: opts.FailClosed, Log: opts.Logger,
	})
	if err != nil {
		return nil, err
	}
	in := &Interceptor{g: g, key: opts.Key, cost: opts.Cost}
	if in.key == nil {
		in.key = KeyFromPeer
	}
	if in.cost == nil {
		in.cost = func(context.Context, string, any) (int64, error) { return 1, nil }
	}
	return in, nil
}

// Unary returns the unary server interceptor.
func (in *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := in.admit(ctx, info.FullMethod, req, func(md metadata.MD) error { return grpc.SetHeader(ctx, md) }); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Stream returns the stream server interceptor; a stream is charged once,
// when it opens.
func (in *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := in.admit(ss.Context(), info.FullMethod, nil, ss.SetHeader); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// admit decides a call: nil to go on (with the rate-limit metadata set by
// setHeader when admitted), else the status to answer. A denied call's
// metadata goes out with its status.
func (in *Interceptor) admit(ctx context.Context, method string, req any, setHeader func(metadata.MD) error) error {
	key, keyErr := in.key(ctx, method)
	cost, costErr := in.cost(ctx, method, req)
	o := in.g.Decide(ctx, key, keyErr, cost, costErr)
	switch o.Verdict {
	case guard.Allow, guard.Deny:
		denied := o.Verdict == guard.Deny
		md := metadata.MD{}
		for _, p := range ratelimitheader.Of(in.g.Name, o.Result, denied, in.g.Window).Pairs() {
			md[strings.ToLower(p.Name)] = []string{p.Value}
		}
		if err := setHeader(md); err != nil {
			return status.Errorf(codes.Internal, "grpclimit: set the rate-limit metadata: %v", err)
		}
		if denied {
			return status.Errorf(codes.ResourceExhausted, "grpclimit: %s: over the limit (%d of %d left)", in.g.Name, o.Result.Remaining, o.Result.Limit)
		}
	case guard.Invalid:
		return status.Errorf(codes.InvalidArgument, "%s: %s", o.Field, o.Reason)
	case guard.Unavailable:
		return status.Error(codes.Unavailable, "grpclimit: the rate-limit store failed; retry later")
	}
	return nil
}

// KeyFromPeer returns the address of the call's peer, without its port.
func KeyFromPeer(ctx context.Context, _ string) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "", &KeyError{Field: "peer", Reason: "the call has no peer address"}
	}
	host, _, err := net.SplitHostPort(p.Addr.String())
	if err != nil {
		host = p.Addr.String()
	}
	return host, nil
}

// KeyFromMetadata returns a Key function that reads the incoming metadata
// key name (lower case, with spaces trimmed); a call without it has no key
// and is refused naming it (or takes DefaultKey).
func KeyFromMetadata(name string) func(context.Context, string) (string, error) {
	name = strings.ToLower(name)
	return func(ctx context.Context, _ string) (string, error) {
		if vs := metadata.ValueFromIncomingContext(ctx, name); len(vs) > 0 {
			if v := strings.TrimSpace(vs[0]); v != "" {
				return v, nil
			}
		}
		return "", &KeyError{Field: name, Reason: "missing: the call must carry this metadata"}
	}
}
