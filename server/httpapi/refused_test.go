package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/plane"
	"github.com/tokenlimit/tokenlimit/server/httpapi"
	"github.com/tokenlimit/tokenlimit/service"
)

// newRefusedEnv is an API whose plane has one key (its secret is
// returned) and whose refused secrets are counted, 2 a minute per client.
func newRefusedEnv(t *testing.T) (*env, string) {
	t.Helper()
	p, err := plane.Open(context.Background(), plane.NewMemoryStore(), plane.Options{Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	te := testkit.NewService(t, testkit.Setup{Store: testkit.Memory, Start: base, Config: testkit.ParseConfig(t, planeConfig),
		Edit: func(o *service.Options) { o.Plane = p }})
	h, err := httpapi.New(te.Service, httpapi.Options{Plane: p, Logger: testkit.Quiet(),
		AuthFailures: httpx.NewAuthFailures(te.Service, tokenlimit.TokenBucketLimit(2, 2, time.Minute))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	_, secret, err := p.CreateKey(context.Background(), plane.Spec{Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, clock: te.Clock, svc: te.Service, url: srv.URL, client: srv.Client()}, secret
}

const unknownSecret = "tl-00000000000000000000000000000000000000000000000000000000000000ff"

// TestForwardAuthCountsRefusedSecrets: /v1/forward-auth with a bearer
// plane secret that names no usable key answers 401, counted per client
// (here the connection: no trusted proxy); past the budget it answers the
// deny_status (403 for NGINX's auth_request), and a valid key still 200.
func TestForwardAuthCountsRefusedSecrets(t *testing.T) {
	t.Parallel()
	e, secret := newRefusedEnv(t)
	for i, want := range []int{http.StatusUnauthorized, http.StatusUnauthorized, http.StatusForbidden} {
		if r := e.do(http.MethodGet, "/v1/forward-auth?deny_status=403", "", "Authorization: Bearer "+unknownSecret); r.status != want {
			t.Fatalf("refusal %d: %d %s, want %d", i+1, r.status, r.body, want)
		}
	}
	if r := e.do(http.MethodGet, "/v1/forward-auth?deny_status=403", "", "Authorization: Bearer "+secret); r.status != http.StatusOK {
		t.Errorf("a valid key from the refused client: %d %s, want 200", r.status, r.body)
	}
}

// TestRefusedPlaneSecretsAreCounted: /v1/check and /v1/reserve with an
// api_key of a plane secret's form that names no usable key answer 401
// naming api_key, counted per client: the request's remote_address (or
// ip) descriptor, else the connection's address. Past its budget (2 a
// minute here) a client's refusals answer 429 with Retry-After, another
// client's still 401, and a valid key from the same client is decided as
// usual: a client may be a gateway's one address for all its callers.
func TestRefusedPlaneSecretsAreCounted(t *testing.T) {
	t.Parallel()
	e, secret := newRefusedEnv(t)
	const unknown = unknownSecret
	check := func(path, key, client string) response {
		t.Helper()
		body := `{"descriptors": {"api_key": "` + key + `"` + client + `}}`
		if path == "/v1/reserve" {
			body = `{"id": "r1", "descriptors": {"api_key": "` + key + `"` + client + `}}`
		}
		return e.post(path, body)
	}
	from7, from8 := `, "remote_address": "203.0.113.7"`, `, "ip": "203.0.113.8"`
	wantError(t, check("/v1/check", unknown, from7), http.StatusUnauthorized, "api_key", "unknown or revoked key")
	wantError(t, check("/v1/reserve", unknown, from7), http.StatusUnauthorized, "api_key", "unknown or revoked key")
	third := check("/v1/check", unknown, from7)
	wantError(t, third, http.StatusTooManyRequests, "api_key", "too many failed authentications")
	if third.header.Get("Retry-After") == "" {
		t.Errorf("the third refusal has no Retry-After: %v", third.header)
	}
	wantError(t, check("/v1/check", unknown, from8), http.StatusUnauthorized, "api_key", "unknown or revoked key")
	if r := check("/v1/check", secret, from7); r.status != http.StatusOK {
		t.Errorf("a valid key from the refused client: %d %s, want 200", r.status, r.body)
	}
	// Without a client descriptor: the connection's address.
	for range 2 {
		wantError(t, check("/v1/check", unknown, ""), http.StatusUnauthorized, "api_key", "unknown or revoked key")
	}
	wantError(t, check("/v1/check", unknown, ""), http.StatusTooManyRequests, "api_key", "too many failed authentications")
}
