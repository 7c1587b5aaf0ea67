package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/goredisclient"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
)

// The Redis store over rueidis, dialling through rueidisclient.Dial so that
// a call with a deadline keeps it when it dials. (Compiled, not run: it
// needs a Redis at 127.0.0.1:6379; the package's tests run the same calls
// on real servers.)
func ExampleNew() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}, DialCtxFn: rueidisclient.Dial})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	store, err := redisstore.New(rueidisclient.New(client), redisstore.Options{Prefix: "myapp:"})
	if err != nil {
		panic(err)
	}
	limiter, err := tokenlimit.NewLimiter(store)
	if err != nil {
		panic(err)
	}
	r, err := limiter.AllowN(context.Background(), "user=alice", tokenlimit.GCRALimit(10, 5, time.Minute), 1)
	fmt.Println(r.Allowed, err)
}

// The same store over go-redis, here a Cluster client: keys that must be
// checked together share a hash tag ("{key=k1}").
func ExampleNew_goRedis() {
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:7000"}})
	defer client.Close()
	store, err := redisstore.New(goredisclient.New(client), redisstore.Options{})
	if err != nil {
		panic(err)
	}
	limiter, err := tokenlimit.NewLimiter(store)
	if err != nil {
		panic(err)
	}
	d, err := limiter.Check(context.Background(),
		tokenlimit.Item{Key: "{key=k1}", Limit: tokenlimit.TokenBucketLimit(10, 2, time.Second), Cost: 3},
		tokenlimit.Item{Key: "{key=k1}:daily", Limit: tokenlimit.FixedWindowLimit(100_000, 24*time.Hour), Cost: 3},
	)
	fmt.Println(d.Allowed, err)
}
