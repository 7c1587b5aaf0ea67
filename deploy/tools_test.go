package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// helmVersion is the helm the tests run, built by scripts/test.sh with
// go install helm.sh/helm/v3/cmd/helm@helmVersion into helmPath.
const helmVersion = "v3.22.0"

// helmPath is where scripts/test.sh builds the pinned helm, once per
// machine: $XDG_CACHE_HOME/tokenlimit/tools/helm-<version>/helm (or
// ~/.cache/...). $TOKENLIMIT_HELM overrides it.
func helmPath() string {
	if p := os.Getenv("TOKENLIMIT_HELM"); p != "" {
		return p
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "tokenlimit", "tools", "helm-"+helmVersion, "helm")
}

// helm is the pinned helm's path, or the test skips (fails under CI=true).
func helm(t *testing.T) string {
	t.Helper()
	p := helmPath()
	if _, err := os.Stat(p); err != nil {
		missing(t, "helm "+helmVersion+" not found at "+p+": run scripts/test.sh, which builds it there (go install helm.sh/helm/v3/cmd/helm@"+helmVersion+")")
	}
	return p
}

// podman is podman's path, or the test skips (fails under CI=true).
func podman(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("podman")
	if err != nil {
		missing(t, "podman not found on PATH: apt-get install podman runc, or run scripts/test.sh")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		missing(t, "runc not found on PATH: apt-get install runc, or run scripts/test.sh")
	}
	return p
}

// missing skips the test loudly, or fails it under CI=true, where every
// part must be there.
func missing(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Log("\n" + strings.Repeat("!", 72) + "\nSKIPPING: " + msg + "\n" + strings.Repeat("!", 72))
	t.Skip(msg)
}
