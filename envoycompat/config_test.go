package envoycompat_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokenlimit/tokenlimit/envoycompat"
)

// TestConfigErrors: every error names the file, the line, the field and
// the reason (envoyproxy/ratelimit's own wording where it has one).
func TestConfigErrors(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"unknown field", "domain: d\ndescriptors:\n  - key: k\n    colour: red\n", `f0.yaml:4: descriptors[0].colour: unknown field (want key, value,`},
		{"unknown rate_limit field", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      shadow_mode: true\n", `f0.yaml:7: descriptors[0].rate_limit.shadow_mode: unknown field`},
		{"empty domain", "descriptors:\n  - key: k\n", `f0.yaml:1: domain: config file cannot have empty domain`},
		{"empty file", "", `domain: config file cannot have empty domain`},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", `f0.yaml:3: descriptors[0].key: descriptor has empty key`},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", `f0.yaml:4: descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight'`},
		{"missing unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n", `f0.yaml:4: descriptors[0].rate_limit.unit: invalid rate limit unit ''`},
		{"unit with unlimited", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n", `f0.yaml:4: descriptors[0].rate_limit.unit: should not specify rate limit unit when unlimited`},
		{"negative requests", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n", `descriptors[0].rate_limit.requests_per_unit: want a whole number from 0 to 4294967295, got "-1"`},
		{"duplicate", "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n", `f0.yaml:5: descriptors[1]: duplicate descriptor composite key 'd.k_v'`},
		{"nested duplicate", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - {key: b}\n      - {key: b}\n", `descriptors[0].descriptors[1]: duplicate descriptor composite key 'd.a.b'`},
		{"empty replaces", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: \"\"}]}\n", `descriptors[0].rate_limit.replaces[0].name: should not have an empty replaces entry`},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: a, replaces: [{name: a}]}\n", `descriptors[0].rate_limit.replaces: replaces should not contain name of same descriptor`},
		{"share_threshold without wildcard", "domain: d\ndescriptors:\n  - {key: k, value: v, share_threshold: true}\n", `descriptors[0].share_threshold: share_threshold can only be used with wildcard values (ending with '*')`},
		{"bad bool", "domain: d\ndescriptors:\n  - {key: k, shadow_mode: maybe}\n", `f0.yaml:3: descriptors[0].shadow_mode: want true or false, got "maybe"`},
		{"descriptors not a list", "domain: d\ndescriptors: {key: k}\n", `f0.yaml:2: descriptors: want a list of descriptors`},
		{"yaml syntax", "domain: d\ndescriptors:\n  - key: [\n", `f0.yaml: yaml:`},
		{"metadata is not a field", "domain: d\ndescriptors:\n  - {key: k, metadata: {a: b}}\n", `descriptors[0].metadata: unknown field`},
		{"native file", "limits:\n  - name: a\n", `f0.yaml:1: limits: this is a tokenlimit configuration file, not an envoyproxy/ratelimit one`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := envoycompat.Parse([]envoycompat.File{{Name: "f0.yaml", Data: []byte(c.yaml)}}, envoycompat.LoadOptions{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error:\n%v\nwant it to contain\n%s", err, c.want)
			}
		})
	}
}

func TestConfigAllErrorsAtOnce(t *testing.T) {
	_, err := envoycompat.Parse([]envoycompat.File{
		{Name: "a.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    colour: red\n")},
		{Name: "b.yaml", Data: []byte("domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: eon}\n")},
	}, envoycompat.LoadOptions{})
	for _, want := range []string{"a.yaml:4: descriptors[0].colour", "b.yaml:4: descriptors[0].rate_limit.unit"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v: want it to contain %q", err, want)
		}
	}
}

func TestDuplicateDomain(t *testing.T) {
	files := []envoycompat.File{
		{Name: "a.yaml", Data: []byte("domain: d\ndescriptors:\n  - {key: k}\n")},
		{Name: "b.yaml", Data: []byte("domain: d\ndescriptors:\n  - {key: j}\n")},
	}
	_, err := envoycompat.Parse(files, envoycompat.LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), `b.yaml:1: domain: duplicate domain "d" in config file`) {
		t.Errorf("error %v: want the duplicate domain named in b.yaml", err)
	}
	if _, err := envoycompat.Parse(files, envoycompat.LoadOptions{MergeDomains: true}); err != nil {
		t.Errorf("merged: %v", err)
	}
	files[1].Data = []byte("domain: d\ndescriptors:\n  - {key: k}\n")
	if _, err := envoycompat.Parse(files, envoycompat.LoadOptions{MergeDomains: true}); err == nil || !strings.Contains(err.Error(), "duplicate descriptor composite key 'd.k'") {
		t.Errorf("merged duplicate descriptor: %v", err)
	}
}

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := envoycompat.Load(dir, envoycompat.LoadOptions{}); err == nil || !strings.Contains(err.Error(), "no *.yaml or *.yml file") {
		t.Errorf("empty directory: %v", err)
	}
	write("a.yaml", "domain: a\ndescriptors:\n  - {key: k, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	write("b.yml", "domain: b\ndescriptors:\n  - {key: k, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	write("notes.txt", "not yaml: [")
	cfg, err := envoycompat.Load(dir, envoycompat.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Domains(), ","); got != "a,b" || len(cfg.Limits) != 2 {
		t.Errorf("domains %s, %d limits; want a,b and 2", got, len(cfg.Limits))
	}
	write("native.yaml", "limits:\n  - name: x\n    limit: 1/s\n")
	_, err = envoycompat.Load(dir, envoycompat.LoadOptions{})
	if !errors.Is(err, envoycompat.ErrNativeConfig) || !strings.Contains(err.Error(), "native.yaml:1: limits:") {
		t.Errorf("mixed directory: %v; want ErrNativeConfig naming native.yaml", err)
	}
	if _, err := envoycompat.Load(filepath.Join(dir, "a.yaml"), envoycompat.LoadOptions{}); err == nil {
		t.Error("a file instead of a directory: no error")
	}
}
