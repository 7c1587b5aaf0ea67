package service_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/service"
)

// Limits from YAML, decided for requests described by descriptors: the
// embedded bucket of the quickstart, where a chat costs 1 and an embedding 3.
func Example() {
	cfg, err := config.Parse([]byte(`
limits:
  - name: llm-budget
    key: [user]
    algorithm: token_bucket
    capacity: 10
    refill: 2/s
    cost:
      by: route
      weights: {/v1/chat: 1, /v1/embed: 3}
`), "example.yaml")
	if err != nil {
		panic(err)
	}
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		panic(err)
	}
	stopped := func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }
	svc, err := service.New(cfg, service.Options{Store: store, Clock: stopped})
	if err != nil {
		panic(err)
	}
	for _, route := range []string{"/v1/chat", "/v1/embed", "/v1/embed", "/v1/embed", "/v1/embed"} {
		d, err := svc.Check(context.Background(), service.Request{Descriptors: map[string]string{"user": "alice", "route": route}})
		if err != nil {
			panic(err)
		}
		o, _ := d.Tightest()
		fmt.Println(route, d.Allowed, o.Key, o.Remaining)
	}
	// Output:
	// /v1/chat true llm-budget|user=alice 9
	// /v1/embed true llm-budget|user=alice 6
	// /v1/embed true llm-budget|user=alice 3
	// /v1/embed true llm-budget|user=alice 0
	// /v1/embed false llm-budget|user=alice 0
}
