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

var _ redisstore.Scripter = Client{}

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

func anys(args []string) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}
