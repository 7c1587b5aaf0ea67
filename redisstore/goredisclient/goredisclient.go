// Package goredisclient adapts github.com/redis/go-redis/v9 to
// redisstore.Scripter: pass any client (redis.NewClient, NewFailoverClient
// for Sentinel, NewClusterClient, NewUniversalClient).
//
// Build the client with ContextTimeoutEnabled: true. Without it go-redis
// ignores the context's deadline and waits for its own ReadTimeout (3 s by
// default), so a slow Redis stalls decisions instead of letting each limit
// fall back to its failure mode.
package goredisclient

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/tokenlimit/tokenlimit/redisstore"
)

// Client runs redisstore's scripts through a go-redis client. It is safe for
// concurrent use, as the client is.
type Client struct {
	c redis.Scripter
}

var _ redisstore.FunctionCaller = Client{}

// New wraps c, which must not be nil.
func New(c redis.Scripter) Client {
	return Client{c: c}
}

// EvalSHA implements redisstore.Scripter.
func (c Client) EvalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	return c.c.EvalSha(ctx, sha, keys, anys(args)...).Int64Slice()
}

// Eval implements redisstore.Scripter.
func (c Client) Eval(ctx context.Context, src string, keys, args []string) ([]int64, error) {
	return c.c.Eval(ctx, src, keys, anys(args)...).Int64Slice()
}

// functionClient is what go-redis' clients (Client, ClusterClient, Ring,
// UniversalClient) have to run functions.
type functionClient interface {
	FCall(ctx context.Context, function string, keys []string, args ...any) *redis.Cmd
	FunctionLoad(ctx context.Context, code string) *redis.StringCmd
}

// FCall implements redisstore.FunctionCaller; a client without FCall
// answers redisstore.ErrNoFunctions.
func (c Client) FCall(ctx context.Context, function string, keys, args []string) ([]int64, error) {
	fc, ok := c.c.(functionClient)
	if !ok {
		return nil, redisstore.ErrNoFunctions
	}
	return fc.FCall(ctx, function, keys, anys(args)...).Int64Slice()
}

// FunctionLoad implements redisstore.FunctionCaller: on every master of a
// ClusterClient, on every shard of a Ring, else on the client's server (a
// failover client's master).
func (c Client) FunctionLoad(ctx context.Context, src string) error {
	load := func(ctx context.Context, n *redis.Client) error { return loaded(n.FunctionLoad(ctx, src).Err()) }
	switch cc := c.c.(type) {
	case *redis.ClusterClient:
		return cc.ForEachMaster(ctx, load)
	case *redis.Ring:
		return cc.ForEachShard(ctx, load)
	case functionClient:
		return loaded(cc.FunctionLoad(ctx, src).Err())
	}
	return redisstore.ErrNoFunctions
}

// loaded is err, or nil if it says the library is already loaded.
func loaded(err error) error {
	if redisstore.IsLibraryLoaded(err) {
		return nil
	}
	return err
}

func anys(args []string) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}
