package rlsv3_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/plane"
	"github.com/tokenlimit/tokenlimit/server/rlsv3"
	"github.com/tokenlimit/tokenlimit/service"
)

// TestRefusedPlaneSecret: a descriptor api_key that has a plane secret's
// form but names no usable key (unknown, revoked) answers OVER_LIMIT with
// x-tokenlimit-auth: refused and a body saying why, never an error status
// (which a default Envoy admits). Refusals are counted per client, its
// remote_address entry (Envoy's action), else the gRPC peer: past its
// budget (2 a minute here) a client's refusals say too-many-failures with
// retry-after, while another client's do not, and a valid key from the
// same client is still decided as usual.
func TestRefusedPlaneSecret(t *testing.T) {
	t.Parallel()
	p, err := plane.Open(context.Background(), plane.NewMemoryStore(), plane.Options{Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	te := testkit.NewService(t, testkit.Setup{Store: testkit.Memory, Start: base,
		Config: parseConfig(t, "limits:\n  - {name: per-key, key: [api_key], algorithm: fixed_window, limit: 100/min}\n"),
		Edit:   func(o *service.Options) { o.Plane = p }})
	svc := te.Service
	failures := httpx.NewAuthFailures(svc, tokenlimit.TokenBucketLimit(2, 2, time.Minute))
	client := serveWith(t, svc, rlsv3.Options{AuthFailures: failures})
	_, secret, err := p.CreateKey(context.Background(), plane.Spec{Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	revoked, gone, err := p.CreateKey(context.Background(), plane.Spec{Name: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteKey(context.Background(), revoked.ID, plane.AnyVersion); err != nil {
		t.Fatal(err)
	}
	ask := func(kv ...string) *rlspb.RateLimitResponse {
		t.Helper()
		resp, err := client.ShouldRateLimit(context.Background(), request("d", desc(kv...)))
		if err != nil {
			t.Fatalf("ShouldRateLimit %v: %v, want an answer", kv, err)
		}
		return resp
	}
	refused := func(step string, resp *rlspb.RateLimitResponse, want, body string) {
		t.Helper()
		if resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT || header(resp.ResponseHeadersToAdd, rlsv3.AuthHeader) != want || !strings.Contains(string(resp.RawBody), body) {
			t.Errorf("%s: %v %v %q, want OVER_LIMIT with %s: %s and a body saying %q", step, resp.OverallCode, resp.ResponseHeadersToAdd, resp.RawBody, rlsv3.AuthHeader, want, body)
		}
	}
	const unknown = "tl-00000000000000000000000000000000000000000000000000000000000000ff"
	refused("an unknown secret", ask("api_key", unknown, "remote_address", "203.0.113.7"), rlsv3.AuthRefused, "unknown or revoked key")
	refused("a revoked key's secret", ask("api_key", gone, "remote_address", "203.0.113.7"), rlsv3.AuthRefused, "unknown or revoked key")
	third := ask("api_key", unknown, "remote_address", "203.0.113.7")
	refused("the client's third refusal", third, rlsv3.AuthTooManyFailures, "too many failed authentications from 203.0.113.7")
	if header(third.ResponseHeadersToAdd, "retry-after") == "" {
		t.Errorf("the third refusal has no retry-after: %v", third.ResponseHeadersToAdd)
	}
	refused("another client", ask("api_key", unknown, "remote_address", "203.0.113.8"), rlsv3.AuthRefused, "unknown or revoked key")
	if resp := ask("api_key", secret, "remote_address", "203.0.113.7"); resp.OverallCode != rlspb.RateLimitResponse_OK {
		t.Errorf("a valid key from the refused client: %v %q, want OK", resp.OverallCode, resp.RawBody)
	}
	// Without remote_address: the gRPC peer, this test's loopback address.
	for range 2 {
		refused("a refusal from the peer", ask("api_key", unknown), rlsv3.AuthRefused, "unknown or revoked key")
	}
	refused("the peer's third refusal", ask("api_key", unknown), rlsv3.AuthTooManyFailures, "too many failed authentications from 127.0.0.1")
}

func header(hs []*corepb.HeaderValue, key string) string {
	for _, h := range hs {
		if h.Key == key {
			return h.Value
		}
	}
	return ""
}
