package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/httplimit"
	"github.com/tokenlimit/tokenlimit/memstore"
)

// Limit each api key to a bucket of 10 that refills 2 per second; an
// embedding costs 3.
func Example() {
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		panic(err)
	}
	// A stopped clock keeps this example's output exact; leave WithClock
	// out to use time.Now.
	stopped := func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }
	limiter, err := tokenlimit.NewLimiter(store, tokenlimit.WithClock(stopped))
	if err != nil {
		panic(err)
	}
	mw, err := httplimit.New(limiter, tokenlimit.TokenBucketLimit(10, 2, time.Second), httplimit.Options{
		Name: "embed",
		Key:  httplimit.KeyFromHeader("X-Api-Key"),
		Cost: func(*http.Request) (int64, error) { return 3, nil },
	})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "embedded\n")
	})))
	defer srv.Close()

	for range 4 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		req.Header.Set("X-Api-Key", "k1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		_ = resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	// Output:
	// 200 "embed";r=7;t=2
	// 200 "embed";r=4;t=3
	// 200 "embed";r=1;t=5
	// 429 "embed";r=1;t=5
}
