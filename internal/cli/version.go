package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/urfave/cli/v2"
)

// newVersionCmd is `gpuguard version` (and `gpuguard --version`, which
// normalize turns into it).
func newVersionCmd(s Streams, version string) *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print gpuguard's version, VCS revision and Go version",
		Action: func(c *cli.Context) error {
			fmt.Fprintln(s.stdout(), versionString(version, readBuildInfo))
			return nil
		},
	}
}

// readBuildInfo is debug.ReadBuildInfo; tests replace it.
var readBuildInfo = debug.ReadBuildInfo

// versionString is the one version line: "gpuguard VERSION (module MODVER,
// revision REV, modified, goX.Y.Z)". VERSION is the one set with -ldflags
// "-X main.version=..." when set, else the module's version as the go
// command recorded it (`go install ...@v1.2.3`, or a pseudo-version from
// the repository's tags), else "devel"; MODVER is that module version when
// it differs from VERSION; the revision and whether the tree was modified
// are what the go command recorded from git (not with -buildvcs=false).
func versionString(version string, info func() (*debug.BuildInfo, bool)) string {
	var extra []string
	bi, ok := info()
	if version == "" || version == "dev" {
		version = "devel"
		if ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			version = bi.Main.Version
		}
	}
	goVersion := runtime.Version()
	if ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" && bi.Main.Version != version {
		extra = append(extra, "module "+bi.Main.Version)
	}
	if ok {
		settings := map[string]string{}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
		if rev := settings["vcs.revision"]; rev != "" {
			if len(rev) > 12 {
				rev = rev[:12]
			}
			extra = append(extra, "revision "+rev)
			if settings["vcs.modified"] == "true" {
				extra = append(extra, "modified")
			}
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
	}
	extra = append(extra, goVersion)
	return fmt.Sprintf("gpuguard %s (%s)", version, strings.Join(extra, ", "))
}
