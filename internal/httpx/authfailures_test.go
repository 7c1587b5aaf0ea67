package httpx_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
)

// TestAdminGateLimitsFailedAttempts: each client may fail the admin token
// 3 times (then once every 20 s here); past that the store denies and the
// client gets 429 with Retry-After for every admin call, the right token's
// too, until one more failure is allowed. An IPv6 client is its /64;
// another address or /64 has a budget of its own.
func TestAdminGateLimitsFailedAttempts(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := testkit.NewService(t, testkit.Setup{Store: store, Start: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC),
			Config: testkit.ParseConfig(t, "limits:\n  - {name: any, algorithm: fixed_window, limit: 10/s}\n")})
		failures := httpx.NewAuthFailures(e.Service, tokenlimit.TokenBucketLimit(3, 3, time.Minute))
		gate := httpx.NewAdminGate(map[string]string{"ops": "s3cret"}, true, failures)
		h := gate.Wrap("the admin endpoints", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
		call := func(addr, token string) *httptest.ResponseRecorder {
			r := httptest.NewRequest(http.MethodPost, "/v1/admin/reset", nil)
			r.RemoteAddr = addr
			r.Header.Set("Authorization", "Bearer "+token)
			// A header naming another client changes nothing.
			r.Header.Set("X-Forwarded-For", "198.51.100.9")
			w := httptest.NewRecorder()
			h(w, r)
			return w
		}
		for _, c := range []struct {
			what, addr, token string
			status            int
			retryAfter        string
		}{
			{"failure 1", "127.0.0.1:1", "wrong", http.StatusUnauthorized, ""},
			{"failure 2", "127.0.0.1:2", "", http.StatusUnauthorized, ""},
			{"failure 3", "127.0.0.1:3", "wrong", http.StatusUnauthorized, ""},
			{"failure 4", "127.0.0.1:4", "wrong", http.StatusTooManyRequests, "20"},
			{"the right token from the refused address", "127.0.0.1:5", "s3cret", http.StatusTooManyRequests, "20"},
			{"another address", "127.0.0.2:1", "s3cret", http.StatusNoContent, ""},
			{"v6: failure 1", "[2001:db8:1:2::1]:1", "wrong", http.StatusUnauthorized, ""},
			{"v6: failure 2, same /64", "[2001:db8:1:2::2]:1", "wrong", http.StatusUnauthorized, ""},
			{"v6: failure 3, same /64", "[2001:db8:1:2:ffff::3]:1", "wrong", http.StatusUnauthorized, ""},
			{"v6: failure 4, same /64", "[2001:db8:1:2::4]:1", "wrong", http.StatusTooManyRequests, "20"},
			{"v6: the right token, same /64", "[2001:db8:1:2::5]:1", "s3cret", http.StatusTooManyRequests, "20"},
			{"v6: another /64", "[2001:db8:1:3::1]:1", "s3cret", http.StatusNoContent, ""},
		} {
			w := call(c.addr, c.token)
			if w.Code != c.status || w.Header().Get("Retry-After") != c.retryAfter {
				t.Fatalf("%s: %d, Retry-After %q, body %s; want %d, %q", c.what, w.Code, w.Header().Get("Retry-After"), w.Body, c.status, c.retryAfter)
			}
			if c.status == http.StatusTooManyRequests && !strings.Contains(w.Body.String(), httpx.AuthFailuresLimit) {
				t.Errorf("%s: body %s, want it to name %s", c.what, w.Body, httpx.AuthFailuresLimit)
			}
		}
		e.Clock.Advance(19 * time.Second)
		if w := call("127.0.0.1:6", "s3cret"); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
			t.Fatalf("1 s before one more failure is allowed: %d, Retry-After %q; want 429, 1", w.Code, w.Header().Get("Retry-After"))
		}
		e.Clock.Advance(time.Second)
		for _, c := range []struct {
			token  string
			status int
		}{{"s3cret", http.StatusNoContent}, {"wrong", http.StatusUnauthorized}, {"wrong", http.StatusTooManyRequests}} {
			if w := call("127.0.0.1:7", c.token); w.Code != c.status {
				t.Fatalf("20 s on, Bearer %s: %d, want %d", c.token, w.Code, c.status)
			}
		}
	})
}
