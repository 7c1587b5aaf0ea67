package proxy_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
)

// waitConfig: one call a second per api key; a call denied waits up to 2 s.
const waitConfig = `
limits:
  - {name: per-key, key: [api_key], algorithm: fixed_window, limit: 1/s, cost: 1, wait: 2s}
api_keys:
  sk-demo-alice-0001: {user: alice}
`

// TestWaitHoldsTheCall: a call its limit's wait covers is held, not
// answered 429, and forwarded once its budget refills on the service's
// clock; a client that leaves while its call waits is charged nothing and
// nothing is forwarded.
func TestWaitHoldsTheCall(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, withConfig(waitConfig))
		if resp, body := e.post("/v1/chat/completions", alice, chatBody); resp.StatusCode != http.StatusOK {
			t.Fatalf("first call: status %d, body %s", resp.StatusCode, body)
		}
		e.waitSettled()
		status := make(chan int, 1)
		go func() {
			resp, _ := e.post("/v1/chat/completions", alice, chatBody)
			status <- resp.StatusCode
		}()
		asleep := func(n int) {
			testkit.Eventually(t, 10*time.Second, "calls waiting", func() bool { return e.clock.Timers() == 2*n })
		}
		asleep(1)
		if n := len(e.up.Calls()); n != 1 {
			t.Fatalf("the upstream got %d calls while the second waited, want 1", n)
		}
		e.clock.Advance(time.Second)
		if s := <-status; s != http.StatusOK {
			t.Fatalf("the waiting call: status %d, want 200 once its budget refilled", s)
		}
		e.waitSettled()

		ctx, cancel := context.WithCancel(context.Background())
		left := make(chan error, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody))
			req.Header.Set("Authorization", "Bearer "+alice)
			req.Header.Set("Content-Type", "application/json")
			resp, err := e.srv.Client().Do(req)
			if err == nil {
				resp.Body.Close()
			}
			left <- err
		}()
		asleep(1)
		cancel()
		if err := <-left; err == nil {
			t.Fatal("the call that left got an answer")
		}
		asleep(0)
		if n := len(e.up.Calls()); n != 2 {
			t.Errorf("the upstream got %d calls, want 2: the call that left is not forwarded", n)
		}
		if u := e.used(alice, "")["per-key"]; u != 1 {
			t.Errorf("per-key holds %d in this second, want 1: the call that left charged nothing", u)
		}
	})
}
