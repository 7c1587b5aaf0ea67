package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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
// While scripts/test.sh still builds it (TOKENLIMIT_HELM_BUILD holds the
// build's process id), it waits for the build to end.
func helm(t *testing.T) string {
	t.Helper()
	p := helmPath()
	waitForHelmBuild(t, p)
	if _, err := os.Stat(p); err != nil {
		missing(t, "helm "+helmVersion+" not found at "+p+": run scripts/test.sh, which builds it there (go install helm.sh/helm/v3/cmd/helm@"+helmVersion+")")
	}
	return p
}

// waitForHelmBuild returns once the helm at p exists or the build
// process named by $TOKENLIMIT_HELM_BUILD (scripts/test.sh starts it in
// the background, so that the other packages' tests need not wait for it)
// has ended; at once when no build is named. The build moves the binary
// into place whole once it is built, so a helm that exists is complete.
func waitForHelmBuild(t *testing.T, p string) {
	pid, err := strconv.Atoi(os.Getenv("TOKENLIMIT_HELM_BUILD"))
	if err != nil || pid <= 0 {
		return
	}
	logged := false
	for {
		if _, err := os.Stat(p); err == nil {
			return
		}
		if syscall.Kill(pid, 0) != nil { // the build has ended
			return
		}
		if !logged {
			t.Logf("waiting for scripts/test.sh's helm build (process %d) to put helm at %s", pid, p)
			logged = true
		}
		time.Sleep(time.Second) // polls a condition another process makes true
	}
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
