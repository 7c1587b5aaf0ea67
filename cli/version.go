package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// The build's stamps, set by a release build with
//
//	-ldflags "-X github.com/tokenlimit/tokenlimit/cli.version=v1.2.3 -X ...cli.commit=... -X ...cli.buildDate=..."
//
// (scripts/release.sh and scripts/image.sh do). Empty: read from the
// binary's build information instead (see buildVersion).
var (
	version   string
	commit    string
	buildDate string
)

// versionInfo is what `tokenlimit version` prints.
type versionInfo struct {
	Version   string // the module version, such as v1.2.3; "(devel)" for a build from a checkout
	Commit    string // the VCS revision; "unknown" when the build recorded none
	BuildDate string // RFC 3339, UTC: the stamp, else the commit's time (vcs.time); "unknown" when the build recorded neither
	Go        string // the Go version that built the binary, such as go1.26.8
	Platform  string // GOOS/GOARCH
}

// buildVersion is the binary's version: the ldflags stamps where set, else
// what the Go toolchain recorded (the main module's version, which is the
// tag for `go install ...@vX`, and the vcs.revision and vcs.time settings
// of a build from a git checkout).
func buildVersion(info *debug.BuildInfo, ok bool) versionInfo {
	v := versionInfo{Version: version, Commit: commit, BuildDate: buildDate, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if ok {
		for _, s := range info.Settings {
			switch {
			case s.Key == "vcs.revision" && v.Commit == "":
				v.Commit = s.Value
			case s.Key == "vcs.time" && v.BuildDate == "":
				v.BuildDate = s.Value
			}
		}
		if v.Version == "" {
			v.Version = info.Main.Version
		}
	}
	for _, field := range []*string{&v.Version, &v.Commit, &v.BuildDate} {
		if *field == "" {
			*field = "unknown"
		}
	}
	return v
}

func versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, build date and Go version of this binary",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, ok := debug.ReadBuildInfo()
			return printVersion(cmd.OutOrStdout(), buildVersion(info, ok))
		},
	}
}

func printVersion(out io.Writer, v versionInfo) error {
	_, err := fmt.Fprintf(out, "tokenlimit %s\ncommit     %s\nbuilt      %s\ngo         %s %s\n", v.Version, v.Commit, v.BuildDate, v.Go, v.Platform)
	return err
}
