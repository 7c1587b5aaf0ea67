package httpapi_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// apiPaths are the endpoints the handler serves; the docs must describe
// each.
var apiPaths = []string{"/v1/check", "/v1/forward-auth", "/v1/reserve", "/v1/settle", "/v1/limits",
	"/v1/admin/inspect", "/v1/admin/reset", "/v1/admin/teams", "/v1/admin/teams/{id}", "/v1/admin/teams/{id}/usage", "/v1/admin/keys",
	"/v1/admin/keys/{id}", "/v1/admin/keys/{id}/rotate", "/v1/admin/keys/{id}/usage", "/healthz", "/readyz"}

func TestDocsDescribeEveryEndpoint(t *testing.T) {
	t.Parallel()
	md, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Paths map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(raw, &spec); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	var documented []string
	for p := range spec.Paths {
		documented = append(documented, p)
	}
	slices.Sort(documented)
	want := slices.Sorted(slices.Values(apiPaths))
	if !slices.Equal(documented, want) {
		t.Errorf("docs/openapi.yaml paths %v, want %v", documented, want)
	}
	for _, p := range apiPaths {
		if !strings.Contains(string(md), "## POST "+p) && !strings.Contains(string(md), "## GET "+p) && !strings.Contains(string(md), "## ANY "+p) && !strings.Contains(string(md), p+"`") {
			t.Errorf("docs/api.md has no section for %s", p)
		}
	}
	if !strings.Contains(string(md), "draft-ietf-httpapi-ratelimit-headers-11") {
		t.Error("docs/api.md does not name the RateLimit draft it follows")
	}
}
