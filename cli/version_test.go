package cli

import (
	"bytes"
	"context"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionPrintsVersionCommitDateAndGo(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := Run(context.Background(), []string{"version"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tokenlimit ", "\ncommit ", "\nbuilt ", "\ngo         " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("version output lacks %q:\n%s", want, out.String())
		}
	}
	if err := Run(context.Background(), []string{"version", "extra"}, io.Discard, io.Discard); ExitCode(err) != ExitUsage {
		t.Errorf("version with an argument: %v, want a usage error", err)
	}
}

// Without stamps the version comes from the build information; what the
// toolchain did not record reads "unknown", never an empty field.
func TestBuildVersionFallsBackToBuildInfo(t *testing.T) {
	info := &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123abc"}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"},
	}}
	v := buildVersion(info, true)
	if v.Version != "v1.4.0" || v.Commit != "0123abc" || v.BuildDate != "2026-12-01T10:00:00Z" || v.Go != runtime.Version() {
		t.Errorf("from build info: %+v", v)
	}
	if v := buildVersion(nil, false); v.Version != "unknown" || v.Commit != "unknown" || v.BuildDate != "unknown" {
		t.Errorf("with no build info: %+v, want unknown fields", v)
	}
}
