package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitfilterpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	istiov1alpha3 "istio.io/api/networking/v1alpha3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/service"
)

// The recipes' files (docs/deploy.md walks through them).
const (
	recipeRedis        = "kubernetes/redis.yaml"
	recipeValues       = "kubernetes/values.yaml"
	recipeIstio        = "istio/envoyfilter.yaml"
	recipeEnvoyGateway = "envoy-gateway/envoypatchpolicy.yaml"
	recipeLimits       = "../examples/quickstart.yaml"
)

// tokenlimitHost is the Service the chart makes from recipeValues when
// installed as the release tokenlimit in the namespace limits.
const tokenlimitHost = "tokenlimit.limits.svc.cluster.local"

// manifests splits a YAML file into its documents.
func manifests(t *testing.T, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(doc, "")) != "" {
			docs = append(docs, []byte(doc))
		}
	}
	return docs
}

// strict decodes doc into v, refusing a field v's type does not have.
func strict(t *testing.T, what string, doc []byte, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		t.Fatalf("%s does not decode strictly into %T: %v", what, v, err)
	}
}

// onlyObject decodes the one manifest of path strictly into obj, which
// must be a kind of apiVersion.
func onlyObject(t *testing.T, path, apiVersion, kind string, obj interface{ GetObjectKind() schema.ObjectKind }) {
	t.Helper()
	docs := manifests(t, path)
	if len(docs) != 1 {
		t.Fatalf("%s: %d manifests, want one %s", path, len(docs), kind)
	}
	strict(t, path, docs[0], obj)
	got, want := obj.GetObjectKind().GroupVersionKind(), schema.FromAPIVersionAndKind(apiVersion, kind)
	if got != want {
		t.Fatalf("%s: %v, want %v", path, got, want)
	}
}

// strictProto decodes v (YAML or JSON decoded into Go values) into m with
// protojson, which refuses unknown fields, and checks m against its
// protoc-gen-validate rules when it has them.
func strictProto(t *testing.T, what string, v any, m proto.Message) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := protojson.Unmarshal(data, m); err != nil {
		t.Fatalf("%s does not decode strictly into %T: %v", what, m, err)
	}
	validate(t, what, m)
}

// validate checks m against its protoc-gen-validate rules, when it has them.
func validate(t *testing.T, what string, m proto.Message) {
	t.Helper()
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
}

// strictRateLimits decodes v, a virtual host's rate_limits, strictly
// into Envoy's type and validates each (a patch is no whole virtual host).
func strictRateLimits(t *testing.T, what string, v any) []*routepb.RateLimit {
	t.Helper()
	data, err := json.Marshal(map[string]any{"rate_limits": v})
	if err != nil {
		t.Fatal(err)
	}
	var host routepb.VirtualHost
	if err := protojson.Unmarshal(data, &host); err != nil {
		t.Fatalf("%s does not decode strictly into Envoy's rate limits: %v", what, err)
	}
	for i, rl := range host.RateLimits {
		validate(t, fmt.Sprintf("%s rate_limits[%d]", what, i), rl)
	}
	return host.RateLimits
}

// The Redis of the recipe is a Deployment and a Service that selects its
// pods, where values.yaml's URL points.
func TestRecipeRedis(t *testing.T) {
	docs := manifests(t, recipeRedis)
	if len(docs) != 2 {
		t.Fatalf("%s: %d manifests, want a Deployment and a Service", recipeRedis, len(docs))
	}
	var d appsv1.Deployment
	var s corev1.Service
	strict(t, recipeRedis+" Deployment", docs[0], &d)
	strict(t, recipeRedis+" Service", docs[1], &s)
	if d.Kind != "Deployment" || s.Kind != "Service" {
		t.Fatalf("%s: kinds %s and %s, want Deployment then Service", recipeRedis, d.Kind, s.Kind)
	}
	pod := d.Spec.Template
	for k, v := range s.Spec.Selector {
		if pod.Labels[k] != v || d.Spec.Selector.MatchLabels[k] != v {
			t.Errorf("the Service selects %s=%s, which the Deployment's pods (%v) do not carry", k, v, pod.Labels)
		}
	}
	c := pod.Spec.Containers[0]
	if len(s.Spec.Ports) != 1 || len(c.Ports) != 1 || s.Spec.Ports[0].TargetPort.String() != c.Ports[0].Name || c.Ports[0].ContainerPort != 6379 {
		t.Errorf("the Service's ports %+v do not reach the container's %+v on 6379", s.Spec.Ports, c.Ports)
	}
	if sc := c.SecurityContext; sc == nil || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || !*pod.Spec.SecurityContext.RunAsNonRoot {
		t.Errorf("redis securityContext %+v, want a read-only root, no privilege escalation, not root", sc)
	}

	values := recipeChartValues(t)
	u, err := url.Parse(values.Redis.URL)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%s.%s.svc.cluster.local:%d", s.Name, s.Namespace, s.Spec.Ports[0].Port); u.Host != want {
		t.Errorf("%s: redis.url reaches %s, want the recipe's Redis at %s", recipeValues, u.Host, want)
	}
}

// chartValues is the part of the chart's values the recipe sets.
type chartValues struct {
	ReplicaCount int `json:"replicaCount"`
	Redis        struct {
		URL string `json:"url"`
	} `json:"redis"`
	Config map[string]any `json:"config"`
}

func recipeChartValues(t *testing.T) chartValues {
	t.Helper()
	data, err := os.ReadFile(recipeValues)
	if err != nil {
		t.Fatal(err)
	}
	var v chartValues
	strict(t, recipeValues, data, &v)
	return v
}

// The chart, installed as the recipe says, renders two replicas on the
// recipe's Redis with the quickstart limits, behind the Service the gateway
// recipes name.
func TestRecipeChartValues(t *testing.T) {
	r := renderRelease(t, "tokenlimit", "-f", recipeValues)
	if d := r.deployment; d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	if got := r.service.Name + ".limits.svc.cluster.local"; got != tokenlimitHost {
		t.Errorf("the Service is %s, want %s (the gateway recipes' target)", got, tokenlimitHost)
	}
	if !slices.ContainsFunc(r.service.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "grpc" && p.Port == 8081 }) {
		t.Errorf("service ports %+v, want grpc on 8081", r.service.Spec.Ports)
	}
	if r.secret == nil || !slices.ContainsFunc(r.deployment.Spec.Template.Spec.Containers[0].Env, func(e corev1.EnvVar) bool {
		return e.Name == "TOKENLIMIT_REDIS_URL" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef.Name == r.secret.Name
	}) {
		t.Errorf("the pods do not take the Redis URL from the chart's Secret")
	}
	rendered, err := config.Parse([]byte(r.configMap.Data["config.yaml"]), "the ConfigMap")
	if err != nil {
		t.Fatal(err)
	}
	quickstart, err := config.Load(recipeLimits)
	if err != nil {
		t.Fatal(err)
	}
	for _, limits := range [][]config.Limit{rendered.Limits, quickstart.Limits} {
		for i := range limits {
			limits[i].Line = 0 // where each is written differs
		}
	}
	if !reflect.DeepEqual(rendered.Limits, quickstart.Limits) {
		t.Errorf("the recipe's limits differ from %s, whose descriptors the gateway recipes send:\n%+v\nwant\n%+v", recipeLimits, rendered.Limits, quickstart.Limits)
	}
}

// envoyFilter is an Istio EnvoyFilter object. Its spec is decoded with
// protojson into istio.io/api's message: Istio's own JSON decoding
// (istio.io/client-go) lets unknown fields pass.
type envoyFilter struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              map[string]any `json:"spec"`
}

// The Istio recipe inserts Envoy's rate limit filter before the router of
// the ingress gateway, pointed at tokenlimit's gRPC port in the domain llm,
// and sends the quickstart limits' descriptors.
func TestRecipeIstio(t *testing.T) {
	var obj envoyFilter
	onlyObject(t, recipeIstio, "networking.istio.io/v1alpha3", "EnvoyFilter", &obj)
	var spec istiov1alpha3.EnvoyFilter
	strictProto(t, recipeIstio+" spec", obj.Spec, &spec)
	var filter *ratelimitfilterpb.RateLimit
	var rateLimits []*routepb.RateLimit
	for i, p := range spec.ConfigPatches {
		what := fmt.Sprintf("%s configPatches[%d]", recipeIstio, i)
		if p.Match.GetContext() != istiov1alpha3.EnvoyFilter_GATEWAY {
			t.Errorf("%s: context %v, want GATEWAY", what, p.Match.GetContext())
		}
		switch p.ApplyTo {
		case istiov1alpha3.EnvoyFilter_HTTP_FILTER:
			sub := p.Match.GetListener().GetFilterChain().GetFilter().GetSubFilter().GetName()
			if p.Patch.Operation != istiov1alpha3.EnvoyFilter_Patch_INSERT_BEFORE || sub != "envoy.filters.http.router" {
				t.Errorf("%s: %v %s, want INSERT_BEFORE envoy.filters.http.router", what, p.Patch.Operation, sub)
			}
			filter = rateLimitFilter(t, what, p.Patch.Value.AsMap())
		case istiov1alpha3.EnvoyFilter_VIRTUAL_HOST:
			value := p.Patch.Value.AsMap()
			rateLimits = strictRateLimits(t, what, value["rate_limits"])
			delete(value, "rate_limits")
			if len(value) != 0 {
				t.Errorf("%s: merges %v into the virtual host, want only rate_limits", what, value)
			}
		default:
			t.Errorf("%s: applies to %v, want HTTP_FILTER or VIRTUAL_HOST", what, p.ApplyTo)
		}
	}
	if filter == nil {
		t.Fatalf("%s inserts no rate limit filter", recipeIstio)
	}
	// Istio names a Service's cluster outbound|port||host.
	want := "outbound|8081||" + tokenlimitHost
	if got := filter.RateLimitService.GetGrpcService().GetEnvoyGrpc().GetClusterName(); got != want {
		t.Errorf("%s: the filter asks cluster %q, want %q (tokenlimit's gRPC port)", recipeIstio, got, want)
	}
	checkDescriptors(t, recipeIstio, filter.Domain, rateLimits)
}

// envoyPatchPolicy mirrors the fields of Envoy Gateway's EnvoyPatchPolicy
// (gateway.envoyproxy.io/v1alpha1, github.com/envoyproxy/gateway v1.9.1
// api/v1alpha1/envoypatchpolicy_types.go) that the recipe writes, with their
// JSON names, to decode it strictly without Envoy Gateway's module: that
// module requires go 1.26.7 (the workspace's go line would follow) and 287
// modules (controller-runtime, gateway-api, client-go, ...) for a type
// made of strings and one raw JSON value (docs/dependencies.md).
type envoyPatchPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Type        string `json:"type"`
		JSONPatches []struct {
			Type      string `json:"type"`
			Name      string `json:"name"`
			Operation struct {
				Op    string          `json:"op"`
				Path  *string         `json:"path"`
				Value json.RawMessage `json:"value"`
			} `json:"operation"`
		} `json:"jsonPatches"`
		TargetRef struct {
			Group string `json:"group"`
			Kind  string `json:"kind"`
			Name  string `json:"name"`
		} `json:"targetRef"`
	} `json:"spec"`
}

// The Envoy Gateway recipe adds a cluster for tokenlimit's gRPC port, the
// rate limit filter in the domain llm and the quickstart limits'
// descriptors, to the Gateway eg.
func TestRecipeEnvoyGateway(t *testing.T) {
	var policy envoyPatchPolicy
	onlyObject(t, recipeEnvoyGateway, "gateway.envoyproxy.io/v1alpha1", "EnvoyPatchPolicy", &policy)
	if ref := policy.Spec.TargetRef; ref.Kind != "Gateway" || ref.Group != "gateway.networking.k8s.io" || policy.Spec.Type != "JSONPatch" {
		t.Errorf("%s: a %s patch of %s %s, want a JSONPatch of a Gateway", recipeEnvoyGateway, policy.Spec.Type, ref.Group, ref.Kind)
	}
	var cluster clusterpb.Cluster
	var filter *ratelimitfilterpb.RateLimit
	var rateLimits []*routepb.RateLimit
	for i, p := range policy.Spec.JSONPatches {
		what := fmt.Sprintf("%s jsonPatches[%d]", recipeEnvoyGateway, i)
		if p.Operation.Op != "add" || p.Operation.Value == nil {
			t.Fatalf("%s: op %q, want an add with a value", what, p.Operation.Op)
		}
		var value any
		if err := json.Unmarshal(p.Operation.Value, &value); err != nil {
			t.Fatal(err)
		}
		switch p.Type {
		case "type.googleapis.com/envoy.config.cluster.v3.Cluster":
			strictProto(t, what, value, &cluster)
		case "type.googleapis.com/envoy.config.listener.v3.Listener":
			filter = rateLimitFilter(t, what, value)
		case "type.googleapis.com/envoy.config.route.v3.RouteConfiguration":
			if path := p.Operation.Path; path == nil || *path != "/virtual_hosts/0/rate_limits" {
				t.Errorf("%s: adds at %v, want the virtual host's rate_limits", what, path)
			}
			rateLimits = strictRateLimits(t, what, value)
		default:
			t.Errorf("%s: patches a %s", what, p.Type)
		}
	}
	if filter == nil {
		t.Fatalf("%s adds no rate limit filter", recipeEnvoyGateway)
	}
	if got := filter.RateLimitService.GetGrpcService().GetEnvoyGrpc().GetClusterName(); got != cluster.Name {
		t.Errorf("%s: the filter asks cluster %q, the policy adds %q", recipeEnvoyGateway, got, cluster.Name)
	}
	addr := cluster.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if addr.GetAddress() != tokenlimitHost || addr.GetPortValue() != 8081 {
		t.Errorf("%s: the cluster reaches %s:%d, want %s:8081", recipeEnvoyGateway, addr.GetAddress(), addr.GetPortValue(), tokenlimitHost)
	}
	checkDescriptors(t, recipeEnvoyGateway, filter.Domain, rateLimits)
}

// rateLimitFilter decodes an HTTP filter strictly, which must be Envoy's
// rate limit filter, and returns its configuration.
func rateLimitFilter(t *testing.T, what string, value any) *ratelimitfilterpb.RateLimit {
	t.Helper()
	var f hcmpb.HttpFilter
	strictProto(t, what, value, &f)
	var rl ratelimitfilterpb.RateLimit
	if err := f.GetTypedConfig().UnmarshalTo(&rl); err != nil {
		t.Fatalf("%s: %s is not the rate limit filter: %v", what, f.Name, err)
	}
	if !rl.FailureModeDeny || rl.RateLimitService.GetTransportApiVersion().String() != "V3" {
		t.Errorf("%s: failure_mode_deny %v, transport %v; want a filter that fails closed on the v3 API", what, rl.FailureModeDeny, rl.RateLimitService.GetTransportApiVersion())
	}
	return &rl
}

// checkDescriptors checks that the rate limits a recipe adds send, for
// every path, one descriptor {user, route}, and asks the service, running
// the quickstart limits, which limits each selects and at what cost.
func checkDescriptors(t *testing.T, recipe, domain string, rateLimits []*routepb.RateLimit) {
	t.Helper()
	if domain != "llm" {
		t.Errorf("%s: domain %q, want llm (the quickstart limits' Envoy examples)", recipe, domain)
	}
	cfg, err := config.Load(recipeLimits)
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(cfg, service.Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	// Each path: the route it is sent as and the limits (name: cost) that
	// descriptor selects in examples/quickstart.yaml.
	cases := []struct {
		path, route string
		limits      map[string]int64
	}{
		{"/v1/chat", "/v1/chat", map[string]int64{"llm-budget": 1}},
		{"/v1/embed?model=small", "/v1/embed", map[string]int64{"llm-budget": 3}},
		{"/v1/sensitive", "/v1/sensitive", map[string]int64{"hard-cap": 1, "llm-budget": 1}},
		{"/v1/models", "other", map[string]int64{"llm-budget": 1}},
		{"/", "other", map[string]int64{"llm-budget": 1}},
	}
	for i, c := range cases {
		descriptors := sent(t, recipe, rateLimits, c.path)
		if len(descriptors) != 1 {
			t.Errorf("%s: %s sends %d descriptors %v, want one", recipe, c.path, len(descriptors), descriptors)
			continue
		}
		d := descriptors[0]
		if d["route"] != c.route || d["user"] == "" || len(d) != 2 {
			t.Errorf("%s: %s sends %v, want {user, route: %s}", recipe, c.path, d, c.route)
			continue
		}
		// Envoy's RLS request, as tokenlimit's RLS hands it to the service:
		// the descriptor's entries and the domain (server/rlsv3).
		d["user"] = fmt.Sprintf("user-%d", i)
		d["domain"] = domain
		decision, err := svc.Check(context.Background(), service.Request{Descriptors: d})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, o := range decision.Limits {
			got[o.Name] = o.Cost
		}
		if !reflect.DeepEqual(got, c.limits) {
			t.Errorf("%s: %s selects %v, want %v", recipe, c.path, got, c.limits)
		}
	}
}

// sent returns the descriptors Envoy sends for a request to path carrying
// the x-user-id header, following the rate limit actions the recipes use
// (request_headers and header_value_match on :path with a prefix or a
// regular expression); an action it does not know fails the test. A rate
// limit whose actions do not all produce an entry sends nothing (Envoy).
func sent(t *testing.T, recipe string, rateLimits []*routepb.RateLimit, path string) []map[string]string {
	t.Helper()
	headers := map[string]string{":path": path, "x-user-id": "someone"}
	var out []map[string]string
	for _, rl := range rateLimits {
		d := map[string]string{}
		complete := true
		for _, a := range rl.Actions {
			switch {
			case a.GetRequestHeaders() != nil:
				h := a.GetRequestHeaders()
				v, ok := headers[h.HeaderName]
				complete = complete && ok
				d[h.DescriptorKey] = v
			case a.GetHeaderValueMatch() != nil:
				m := a.GetHeaderValueMatch()
				matched := true
				for _, h := range m.Headers {
					matched = matched && stringMatches(t, recipe, h.GetStringMatch(), headers[h.Name])
				}
				expect := m.ExpectMatch == nil || m.ExpectMatch.Value
				complete = complete && matched == expect
				d[m.DescriptorKey] = m.DescriptorValue
			default:
				t.Fatalf("%s: an action the test does not know: %v", recipe, a)
			}
		}
		if complete {
			out = append(out, d)
		}
	}
	return out
}

func stringMatches(t *testing.T, recipe string, m *matcherpb.StringMatcher, v string) bool {
	t.Helper()
	switch {
	case m.GetPrefix() != "":
		return strings.HasPrefix(v, m.GetPrefix())
	case m.GetSafeRegex() != nil:
		// Envoy's safe_regex is RE2, as Go's regexp; it must match the
		// whole value.
		return regexp.MustCompile(`^(?:` + m.GetSafeRegex().Regex + `)$`).MatchString(v)
	}
	t.Fatalf("%s: a string matcher the test does not know: %v", recipe, m)
	return false
}
