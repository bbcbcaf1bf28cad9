// Package buildinfo says which build of aep-gateway a binary is: the
// release in the repository's VERSION file (Release, kept equal to it by a
// test), the VCS revision the Go toolchain recorded, and what the build
// stamped with -ldflags over both.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Release is the repository's VERSION: what a binary built from a checkout
// without -ldflags (go run, go build) reports, so that a version is never
// "(devel)" or "unknown". TestReleaseIsTheVERSIONFile keeps it true.
const Release = "0.1.0"

// Info is a binary's build.
type Info struct {
	Version   string // stamped, else the module version of a `go install ...@vX` build, else Release
	Revision  string // stamped, else vcs.revision, else "unknown"
	Modified  bool   // the checkout had uncommitted changes (vcs.modified)
	GoVersion string
}

// Read returns the build of the running binary; version and revision are
// the -ldflags stamps (empty when not stamped).
func Read(version, revision string) Info {
	in := Info{Version: version, Revision: revision, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if in.Revision == "" {
					in.Revision = s.Value
				}
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
	}
	if in.Version == "" {
		in.Version = Release
	}
	if in.Revision == "" {
		in.Revision = "unknown"
	}
	return in
}
