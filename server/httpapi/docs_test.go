package httpapi_test

import (
	"maps"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/plane"
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

// TestOpenAPIDescribesEveryAdminRoute: every route and method the plane's
// admin API serves (as httpx.PlaneAdmin.Routes lists them, on serve and
// proxy alike) is an operation of docs/openapi.yaml behind the admin
// token; each write documents 400 (but a delete), 401 and the plane's
// 503, each conditional write its If-Match and 412; and the body a team
// or key is written with lists exactly the fields plane.Spec takes.
func TestOpenAPIDescribesEveryAdminRoute(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type operation struct {
		Security   []map[string]any `yaml:"security"`
		Parameters []map[string]any `yaml:"parameters"`
		Responses  map[string]any   `yaml:"responses"`
	}
	var spec struct {
		Paths      map[string]map[string]yaml.Node `yaml:"paths"`
		Components struct {
			Schemas map[string]struct {
				AdditionalProperties any            `yaml:"additionalProperties"`
				Properties           map[string]any `yaml:"properties"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(raw, &spec); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	for _, route := range (httpx.PlaneAdmin{}).Routes() {
		path, ok := spec.Paths[route.Path]
		if !ok {
			t.Errorf("docs/openapi.yaml has no path %s", route.Path)
			continue
		}
		for _, method := range route.Methods {
			node, ok := path[strings.ToLower(method)]
			if !ok {
				t.Errorf("docs/openapi.yaml has no %s %s", method, route.Path)
				continue
			}
			var op operation
			if err := node.Decode(&op); err != nil {
				t.Fatalf("%s %s: %v", method, route.Path, err)
			}
			what := method + " " + route.Path
			if len(op.Security) != 1 || op.Security[0]["admin"] == nil {
				t.Errorf("%s: security %v, want the admin token", what, op.Security)
			}
			want := []string{"401"}
			if method != http.MethodGet {
				want = append(want, "503")
				if method != http.MethodDelete {
					want = append(want, "400")
				}
			}
			conditional := strings.Contains(route.Path, "{id}") && method != http.MethodGet
			if conditional {
				want = append(want, "412")
				if !slices.ContainsFunc(op.Parameters, func(p map[string]any) bool { return p["$ref"] == "#/components/parameters/IfMatch" }) {
					t.Errorf("%s: no If-Match parameter", what)
				}
			}
			for _, status := range want {
				if op.Responses[status] == nil {
					t.Errorf("%s documents no %s answer", what, status)
				}
			}
		}
		for method := range path {
			if method != "parameters" && !slices.Contains(route.Methods, strings.ToUpper(method)) {
				t.Errorf("docs/openapi.yaml documents %s %s, which the API does not serve", strings.ToUpper(method), route.Path)
			}
		}
	}

	var fields []string
	for f := range reflect.TypeFor[plane.Spec]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		fields = append(fields, name)
	}
	rs := spec.Components.Schemas["RecordSpec"]
	documented := slices.Sorted(maps.Keys(rs.Properties))
	if slices.Sort(fields); !slices.Equal(documented, fields) || rs.AdditionalProperties != false {
		t.Errorf("RecordSpec documents %v (additionalProperties %v), want plane.Spec's fields %v and no others", documented, rs.AdditionalProperties, fields)
	}
}
