package proxy_test

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/service"
)

// TestAlertHeaderOnThePlainAnswer: the call whose reservation crosses an
// alert_at threshold carries X-Tokenlimit-Alert on its answer, though the
// answer's other headers are read after settling; the calls before and
// after carry none.
func TestAlertHeaderOnThePlainAnswer(t *testing.T) {
	t.Parallel()
	const cfg = `
limits:
  - {name: calls, key: [api_key], algorithm: fixed_window, limit: 10/min, cost: 1, alert_at: ["50%"]}
api_keys:
  sk-demo-alice-0001: {user: alice}
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, withConfig(cfg))
		chat := `{"model":"gpt-4o","max_tokens":100,"messages":[{"role":"user","content":"Say hello"}]}`
		var got []string
		for range 6 {
			resp := e.send(context.Background(), http.MethodPost, "/v1/chat/completions", alice, chat)
			_, body := e.readAll(resp)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			e.waitSettled()
			got = append(got, resp.Header.Get(service.AlertHeader))
		}
		if want := []string{"", "", "", "", "calls;threshold=50%", ""}; !slices.Equal(got, want) {
			t.Errorf("alert headers %q, want %q", got, want)
		}
	})
}
