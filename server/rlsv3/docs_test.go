package rlsv3_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	bootstrappb "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	ratelimitfilterpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// examples/envoy.yaml, which docs/rls.md shows unchanged, is valid for
// Envoy (its protos and their validation rules) and sends the descriptors
// the quickstart limits expect: domain llm, a user from a header, and
// routes the configuration knows; its tokenlimit cluster is health checked
// through grpc.health.v1.
func TestDocsEnvoyBootstrap(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/rls.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../../examples/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- envoy-bootstrap")
	if !ok {
		t.Fatal("docs/rls.md: no <!-- envoy-bootstrap --> marker")
	}
	_, rest, _ = strings.Cut(rest, "```yaml\n")
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("docs/rls.md: no yaml block after the envoy-bootstrap marker")
	}
	var body []string // the example without its leading comment
	for i, line := range strings.SplitAfter(string(example), "\n") {
		if !strings.HasPrefix(line, "#") {
			body = strings.SplitAfter(string(example), "\n")[i:]
			break
		}
	}
	if strings.Join(body, "") != block {
		t.Fatal("docs/rls.md's Envoy bootstrap differs from examples/envoy.yaml: copy the file into the block")
	}
	var tree any
	if err := yaml.Unmarshal([]byte(block), &tree); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(tree)
	if err != nil {
		t.Fatal(err)
	}
	var boot bootstrappb.Bootstrap
	if err := protojson.Unmarshal(js, &boot); err != nil {
		t.Fatalf("not an Envoy bootstrap: %v", err)
	}
	if err := boot.ValidateAll(); err != nil {
		t.Fatalf("Envoy would reject it: %v", err)
	}

	// The routes the quickstart limits know.
	cfg := loadConfig(t, "../../examples/quickstart.yaml")
	known := map[string]bool{}
	for _, l := range cfg.Limits {
		if p, ok := l.Match["route"]; ok {
			known[string(p)] = true
		}
		for route := range l.Cost.Weights {
			known[route] = true
		}
	}
	var hcm hcmpb.HttpConnectionManager
	if err := boot.StaticResources.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	var filter ratelimitfilterpb.RateLimit
	if err := hcm.HttpFilters[0].GetTypedConfig().UnmarshalTo(&filter); err != nil {
		t.Fatal(err)
	}
	if filter.Domain != "llm" || filter.RateLimitService.GetGrpcService().GetEnvoyGrpc().GetClusterName() != "tokenlimit" {
		t.Errorf("filter: %v", &filter)
	}
	for _, r := range hcm.GetRouteConfig().VirtualHosts[0].Routes {
		path := r.GetMatch().GetPath()
		entries := r.GetRoute().GetRateLimits()
		if len(entries) != 1 {
			t.Errorf("route %v: %d rate_limits entries, want 1 (overlapping entries charge twice)", r.GetMatch(), len(entries))
			continue
		}
		var user, route string
		for _, a := range entries[0].Actions {
			if h := a.GetRequestHeaders(); h != nil {
				user = h.DescriptorKey
			}
			if g := a.GetGenericKey(); g != nil && g.DescriptorKey == "route" {
				route = g.DescriptorValue
			}
		}
		switch {
		case user != "user":
			t.Errorf("route %v: no user descriptor", r.GetMatch())
		case route != path:
			t.Errorf("route %v: route descriptor %q, want the route's own path", r.GetMatch(), route)
		case route != "" && !known[route]:
			t.Errorf("route %v: examples/quickstart.yaml knows no route %q", r.GetMatch(), route)
		}
	}
	for _, c := range boot.StaticResources.Clusters {
		if c.Name == "tokenlimit" {
			if port := c.LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue(); port != 8081 {
				t.Errorf("tokenlimit cluster: port %d, want 8081 (serve's --grpc-listen default)", port)
			}
			if len(c.HealthChecks) != 1 || c.HealthChecks[0].GetGrpcHealthCheck().GetServiceName() != "envoy.service.ratelimit.v3.RateLimitService" {
				t.Errorf("tokenlimit cluster: health checks %v, want one gRPC health check of the rate limit service", c.HealthChecks)
			}
		}
	}
}
