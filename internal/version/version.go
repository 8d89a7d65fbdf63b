// Package version is the one source of the version Sluice reports:
// --version, HELLO, INFO and the image's labels agree because they all
// read String.
package version

import (
	"runtime/debug"
	"sync"
)

// base is the version of this source tree, which a build without a stamp
// or VCS information reports.
const base = "0.1.0"

// stamped is set at build time:
//
//	go build -ldflags "-X github.com/sluice-rl/sluice/internal/version.stamped=1.2.3" ./cmd/sluice
var stamped string

// String is the stamped version or, without one, the module's version
// from the build information (a tagged `go install`), or base with the VCS
// revision the binary was built from, or base.
var String = sync.OnceValue(func() string {
	if stamped != "" {
		return stamped
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return base
	}
	return fromBuildInfo(info)
})

func fromBuildInfo(info *debug.BuildInfo) string {
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return base
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	v := base + "-devel+" + rev
	if modified == "true" {
		v += ".dirty"
	}
	return v
}
