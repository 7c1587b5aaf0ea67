package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/tokenlimit/tokenlimit/config"
)

const chart = "helm/tokenlimit"

// kubeVersion is the Kubernetes the chart is rendered for: the oldest it
// supports (Chart.yaml's kubeVersion; a preStop sleep needs 1.30).
const kubeVersion = "1.30.0"

func TestChartLints(t *testing.T) {
	out, err := exec.Command(helm(t), "lint", "--strict", chart).CombinedOutput()
	if err != nil {
		t.Fatalf("helm lint --strict %s: %v\n%s", chart, err, out)
	}
}

// rendered is a chart's manifests, decoded strictly into Kubernetes' types.
type rendered struct {
	kinds          []string
	configMap      *corev1.ConfigMap
	secret         *corev1.Secret
	deployment     *appsv1.Deployment
	service        *corev1.Service
	pdb            *policyv1.PodDisruptionBudget
	hpa            *autoscalingv2.HorizontalPodAutoscaler
	serviceMonitor *serviceMonitor
}

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// (monitoring.coreos.com/v1) that the chart writes, mirrored here to decode
// it strictly without depending on the operator's module.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// template runs helm template on the chart with args, and returns its
// output and error.
func template(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return templateRelease(t, "rel", args...)
}

// templateRelease is template for the release named release.
func templateRelease(t *testing.T, release string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helm(t), append([]string{"template", release, chart, "--namespace", "limits", "--kube-version", kubeVersion}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), &exitErr{err, stderr.String()}
	}
	return string(out), nil
}

type exitErr struct {
	err    error
	stderr string
}

func (e *exitErr) Error() string { return e.err.Error() + ": " + e.stderr }

// render renders the chart with args and decodes every manifest strictly
// (a field the type does not have fails the test).
func render(t *testing.T, args ...string) rendered {
	t.Helper()
	return renderRelease(t, "rel", args...)
}

// renderRelease is render for the release named release.
func renderRelease(t *testing.T, release string, args ...string) rendered {
	t.Helper()
	out, err := templateRelease(t, release, args...)
	if err != nil {
		t.Fatalf("helm template %v: %v", args, err)
	}
	var r rendered
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(out, -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(doc, "")) == "" {
			continue
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("a manifest's kind: %v\n%s", err, doc)
		}
		var into any
		switch meta.Kind {
		case "ConfigMap":
			r.configMap = &corev1.ConfigMap{}
			into = r.configMap
		case "Secret":
			r.secret = &corev1.Secret{}
			into = r.secret
		case "Deployment":
			r.deployment = &appsv1.Deployment{}
			into = r.deployment
		case "Service":
			r.service = &corev1.Service{}
			into = r.service
		case "PodDisruptionBudget":
			r.pdb = &policyv1.PodDisruptionBudget{}
			into = r.pdb
		case "HorizontalPodAutoscaler":
			r.hpa = &autoscalingv2.HorizontalPodAutoscaler{}
			into = r.hpa
		case "ServiceMonitor":
			r.serviceMonitor = &serviceMonitor{}
			into = r.serviceMonitor
		default:
			t.Fatalf("the chart renders a %s %s the test does not know", meta.APIVersion, meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			t.Fatalf("%s does not decode strictly into its type: %v\n%s", meta.Kind, err, doc)
		}
		r.kinds = append(r.kinds, meta.Kind)
	}
	return r
}

func TestChartDefaults(t *testing.T) {
	r := render(t)
	if got := strings.Join(r.kinds, ","); got != "PodDisruptionBudget,ConfigMap,Service,Deployment" {
		t.Errorf("kinds rendered by default: %s, want a PodDisruptionBudget, the ConfigMap, the Service and the Deployment", got)
	}
	d := r.deployment
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas: %v, want 2", d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("probes on %s and %s, want readiness on /readyz and liveness on /healthz", c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
	}
	sc := c.SecurityContext
	if sc == nil || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || !*sc.RunAsNonRoot || !*pod.SecurityContext.RunAsNonRoot {
		t.Errorf("securityContext %+v, want a read-only root, no privilege escalation, not root", sc)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds != 5 {
		t.Errorf("preStop %+v, want a sleep of 5 s (the image has no shell)", c.Lifecycle)
	}
	if grace := *pod.TerminationGracePeriodSeconds; grace < 5+10 {
		t.Errorf("terminationGracePeriodSeconds %d: shorter than the preStop's 5 s and the server's 10 s drain", grace)
	}
	for _, e := range c.Env {
		if e.Name == "TOKENLIMIT_REDIS_URL" || e.Name == "TOKENLIMIT_ADMIN_TOKEN" {
			t.Errorf("with no Redis and no admin token set, the pod still gets %s", e.Name)
		}
	}
	if got := r.service.Spec.Ports; len(got) != 2 || got[0].Name != "http" || got[0].Port != 8080 || got[1].Name != "grpc" || got[1].Port != 8081 {
		t.Errorf("service ports %+v, want http 8080 and grpc 8081", got)
	}
	if r.pdb.Spec.MaxUnavailable == nil || r.pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1", r.pdb.Spec.MaxUnavailable)
	}
	// The ConfigMap holds a configuration tokenlimit accepts, mounted where
	// the container's --config reads it.
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(r.configMap.Data["config.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(path); err != nil {
		t.Errorf("the chart's default configuration does not load: %v", err)
	}
	if !slices.Contains(c.Args, "--config=/etc/tokenlimit/config.yaml") || c.VolumeMounts[0].MountPath != "/etc/tokenlimit" || pod.Volumes[0].ConfigMap.Name != r.configMap.Name {
		t.Errorf("the container does not read the ConfigMap's config.yaml: args %v, mounts %+v", c.Args, c.VolumeMounts)
	}
	if !slices.Contains(c.Args, "--store-timeout=50ms") {
		t.Errorf("args %v lack --store-timeout=50ms", c.Args)
	}
}

// A changed configuration changes the pod template's checksum, which rolls
// the pods; an unchanged one keeps it.
func TestChartConfigChecksumRollsPods(t *testing.T) {
	checksum := func(args ...string) string {
		sum := render(t, args...).deployment.Spec.Template.Annotations["checksum/config"]
		if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(sum) {
			t.Fatalf("checksum/config %q, want a sha256", sum)
		}
		return sum
	}
	a, again := checksum(), checksum()
	b := checksum("--set", "config.limits[0].capacity=20")
	if a != again || a == b {
		t.Errorf("checksums %s, %s (same config), %s (changed): want equal, then different", a, again, b)
	}
}

func TestChartEverythingOn(t *testing.T) {
	r := render(t, "--set", "redis.url=redis://:pw@redis:6379/0", "--set", "adminToken.existingSecret=tokenlimit-admin",
		"--set", "autoscaling.enabled=true", "--set", "serviceMonitor.enabled=true", "--set", "extraArgs[0]=--trusted-proxy=10.0.0.0/8")
	if r.secret == nil || r.secret.StringData["redis-url"] != "redis://:pw@redis:6379/0" {
		t.Fatalf("the chart's Secret %+v, want the Redis URL under redis-url", r.secret)
	}
	c := r.deployment.Spec.Template.Spec.Containers[0]
	env := map[string]*corev1.SecretKeySelector{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			env[e.Name] = e.ValueFrom.SecretKeyRef
		}
	}
	if ref := env["TOKENLIMIT_REDIS_URL"]; ref == nil || ref.Name != r.secret.Name || ref.Key != "redis-url" {
		t.Errorf("TOKENLIMIT_REDIS_URL from %+v, want the Secret %s's redis-url", ref, r.secret.Name)
	}
	if ref := env["TOKENLIMIT_ADMIN_TOKEN"]; ref == nil || ref.Name != "tokenlimit-admin" || ref.Key != "admin-token" {
		t.Errorf("TOKENLIMIT_ADMIN_TOKEN from %+v, want the Secret tokenlimit-admin's admin-token", ref)
	}
	for _, a := range c.Args {
		if strings.Contains(a, "pw@") {
			t.Errorf("the Redis URL's password is in the container's args: %s", a)
		}
	}
	if !slices.Contains(c.Args, "--trusted-proxy=10.0.0.0/8") {
		t.Errorf("args %v lack the extra argument", c.Args)
	}
	if r.deployment.Spec.Replicas != nil {
		t.Errorf("with the autoscaler on, the Deployment still sets replicas %d", *r.deployment.Spec.Replicas)
	}
	if r.hpa == nil || r.hpa.Spec.ScaleTargetRef.Name != r.deployment.Name || r.hpa.Spec.MinReplicas == nil || *r.hpa.Spec.MinReplicas != 2 {
		t.Errorf("HorizontalPodAutoscaler %+v, want it scaling the Deployment from 2", r.hpa)
	}
	if sm := r.serviceMonitor; sm == nil || len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor %+v, want /metrics on the http port", sm)
	}
}

// values.schema.json refuses what cannot work or must not be written in
// values, naming the field.
func TestChartSchemaRefuses(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"--set", "replicaCount=-1"}, "replicaCount"},
		{[]string{"--set-string", "adminToken=hunter2"}, "adminToken"},
		{[]string{"--set", "adminToken.token=hunter2"}, "adminToken"},
		{[]string{"--set-string", "store.timeout=0"}, "store"},
		{[]string{"--set-string", "store.timeout=0s"}, "store"},
		{[]string{"--set-string", "store.timeout=-5ms"}, "store"},
		{[]string{"--set", "redis.url=http://redis:6379"}, "redis"},
		{[]string{"--set", "replicas=3"}, "replicas"},
	} {
		out, err := template(t, tc.set...)
		if err == nil {
			t.Errorf("%v: rendered, want values.schema.json to refuse it:\n%.300s", tc.set, out)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "values don't meet the specifications of the schema") || !strings.Contains(msg, tc.want) {
			t.Errorf("%v: %v, want the schema's refusal naming %s", tc.set, msg, tc.want)
		}
	}
	// What it accepts: a store timeout above 0 in any unit.
	for _, ok := range []string{"0.5s", "250us"} {
		if _, err := template(t, "--set-string", "store.timeout="+ok); err != nil {
			t.Errorf("store.timeout=%s: %v, want it accepted", ok, err)
		}
	}
}
