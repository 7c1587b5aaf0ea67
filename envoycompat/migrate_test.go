package envoycompat_test

import (
	"strings"
	"testing"

	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/envoycompat"
)

func TestMigrate(t *testing.T) {
	cfg := parse(t, envoycompat.LoadOptions{}, `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 60, name: Per User}
  - key: user
    value: alice
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: path
    value: "/v1/*"
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: path
    value: "/a*b"
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: "pre*"
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: vip
    rate_limit: {unlimited: true}
  - key: tenant
    descriptors:
      - key: plan
        value: free
        rate_limit: {unit: day, requests_per_unit: 100, replaces: [{name: Per User}]}
`)
	m, err := envoycompat.Migrate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	native, err := config.Parse(m.YAML, "migrated.yaml")
	if err != nil {
		t.Fatalf("migrated YAML does not load natively: %v\n%s", err, m.YAML)
	}
	var got []string
	for _, l := range native.Limits {
		got = append(got, l.Name+" "+l.Limit.String()+" key="+strings.Join(l.Key, ","))
	}
	want := []string{
		"per-user fixed_window 60/1m0s key=user",
		"api.user_alice fixed_window 1000/1h0m0s key=",
	}
	if len(native.Limits) != 5 || got[0] != want[0] || !strings.HasPrefix(got[1], "api.user_alice fixed_window") {
		t.Errorf("limits:\n%s", strings.Join(got, "\n"))
	}
	if !native.Limits[1].Shadow || native.Limits[1].Match["user"] != "alice" || native.Limits[2].Match["path"] != "/v1/*" || native.Limits[3].Match["path"] != "/a*b" || native.Limits[4].Match["plan"] != "free" {
		t.Errorf("limits: %+v", native.Limits)
	}
	notes := strings.Join(m.CompatOnly, "\n")
	for _, want := range []string{
		"api.vip: unlimited",
		`api.pre*: a key-only descriptor whose key ends in '*'`,
		"api.tenant.plan_free: replaces Per User",
		"api.user_alice: natively applies together with per-user",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("compat-only notes:\n%s\nwant %q", notes, want)
		}
	}
}
