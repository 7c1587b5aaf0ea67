// Package rueidisclient adapts github.com/redis/rueidis to
// redisstore.Scripter. rueidis pipelines concurrent calls on shared
// connections automatically, which makes it the faster client under load.
package rueidisclient

import (
	"context"

	"github.com/redis/rueidis"

	"github.com/tokenlimit/tokenlimit/redisstore"
)

// Client runs redisstore's scripts through a rueidis client. It is safe for
// concurrent use, as the client is.
type Client struct {
	c rueidis.Client
}

var _ redisstore.Scripter = Client{}

// New wraps c, which must not be nil.
func New(c rueidis.Client) Client {
	return Client{c: c}
}

// EvalSHA implements redisstore.Scripter.
func (c Client) EvalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	cmd := c.c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	return c.c.Do(ctx, cmd).AsIntSlice()
}

// Eval implements redisstore.Scripter.
func (c Client) Eval(ctx context.Context, src string, keys, args []string) ([]int64, error) {
	cmd := c.c.B().Eval().Script(src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	return c.c.Do(ctx, cmd).AsIntSlice()
}
