// Package rueidisclient adapts github.com/redis/rueidis to
// redisstore.Scripter. rueidis pipelines concurrent calls on shared
// connections automatically, which makes it the faster client under load.
// Dial, as the client's DialCtxFn, keeps a call that dials within its
// deadline.
package rueidisclient

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/rueidis"

	"github.com/tokenlimit/tokenlimit/redisstore"
)

// Client runs redisstore's scripts through a rueidis client. It is safe for
// concurrent use, as the client is.
type Client struct {
	c rueidis.Client
}

var _ redisstore.FunctionCaller = Client{}

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

// FCall implements redisstore.FunctionCaller.
func (c Client) FCall(ctx context.Context, function string, keys, args []string) ([]int64, error) {
	cmd := c.c.B().Fcall().Function(function).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	return c.c.Do(ctx, cmd).AsIntSlice()
}

// FunctionLoad implements redisstore.FunctionCaller: on Redis Cluster on
// every node the client knows (replicas, which refuse it, get theirs from
// their master), else on the client's server (a Sentinel client's master).
func (c Client) FunctionLoad(ctx context.Context, src string) error {
	if c.c.Mode() != rueidis.ClientModeCluster {
		return loaded(c.c.Do(ctx, c.c.B().FunctionLoad().FunctionCode(src).Build()).Error())
	}
	var errs []error
	for addr, node := range c.c.Nodes() {
		err := loaded(node.Do(ctx, node.B().FunctionLoad().FunctionCode(src).Build()).Error())
		if err != nil && !strings.HasPrefix(err.Error(), "READONLY") {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		}
	}
	return errors.Join(errs...)
}

// loaded is err, or nil if it says the library is already loaded.
func loaded(err error) error {
	if redisstore.IsLibraryLoaded(err) {
		return nil
	}
	return err
}
