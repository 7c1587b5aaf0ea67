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

// EvalSHA implements redisstore.Scripter. The call is never sent again
// (see once).
func (c Client) EvalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	return c.once(ctx, "evalsha", sha, keys, args)
}

// Eval implements redisstore.Scripter. The call is never sent again (see
// once).
func (c Client) Eval(ctx context.Context, src string, keys, args []string) ([]int64, error) {
	return c.once(ctx, "eval", src, keys, args)
}

// processor is what go-redis' clients (Client, ClusterClient, Ring) have to
// run a command they are given.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// sentOnce is a script or function call that go-redis must not send again:
// it resends a command whose reply it did not read (on an EOF, MaxRetries
// times, 3 by default; a ClusterClient also up to MaxRedirects times), and
// after a lost reply nobody knows whether the script ran, so a resent check
// could be charged twice and answered once. The store decides what a failed
// call means (each limit's failure mode); reservations and settlements,
// idempotent by id, are retried by the store itself.
type sentOnce struct{ *redis.Cmd }

// NoRetry tells go-redis not to resend the command once it was written.
func (sentOnce) NoRetry() bool { return true }

// once runs "verb target numkeys keys... args..." (EVALSHA, EVAL or FCALL)
// as a sentOnce command. A client that cannot run a given command (none of
// go-redis' own) makes the call through its own method, which may retry.
func (c Client) once(ctx context.Context, verb, target string, keys, args []string) ([]int64, error) {
	p, ok := c.c.(processor)
	if !ok {
		return c.fallback(ctx, verb, target, keys, args)
	}
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, verb, target, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	for _, a := range args {
		cmdArgs = append(cmdArgs, a)
	}
	cmd := sentOnce{redis.NewCmd(ctx, cmdArgs...)}
	_ = p.Process(ctx, cmd) // the error is cmd's too
	return cmd.Int64Slice()
}

// fallback makes the call through the client's own methods.
func (c Client) fallback(ctx context.Context, verb, target string, keys, args []string) ([]int64, error) {
	switch verb {
	case "evalsha":
		return c.c.EvalSha(ctx, target, keys, anys(args)...).Int64Slice()
	case "eval":
		return c.c.Eval(ctx, target, keys, anys(args)...).Int64Slice()
	}
	fc, ok := c.c.(functionClient)
	if !ok {
		return nil, redisstore.ErrNoFunctions
	}
	return fc.FCall(ctx, target, keys, anys(args)...).Int64Slice()
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
	if _, ok := c.c.(functionClient); !ok {
		return nil, redisstore.ErrNoFunctions
	}
	return c.once(ctx, "fcall", function, keys, args)
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
