package redisstore

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tokenlimit/tokenlimit/internal/redistest"
)

// luaRedis starts a Redis for a test of the Lua's parts on their own, and
// returns a client of it and lib.lua's source, which such a test's script
// starts with.
func luaRedis(t *testing.T) (*redis.Client, string) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	lib, err := luaFiles.ReadFile("lua/lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	return c, string(lib)
}
