package main

import (
	"fmt"
	"runtime"

	"github.com/aep-gateway/aep-gateway/internal/buildinfo"
)

// version is set at build time:
//
//	go build -ldflags "-X main.version=v1.2.3" ./cmd/aepctl
//
// Without it, the module version and VCS revision recorded by the Go
// toolchain are used, and VERSION's release for a build from a checkout.
var version = ""

// versionString is what --version prints.
func versionString() string {
	in := buildinfo.Read(version, "")
	s := "aepctl " + in.Version
	if rev := in.Revision; rev != "unknown" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		s += " " + rev
		if in.Modified {
			s += "+dirty"
		}
	}
	return fmt.Sprintf("%s %s %s/%s", s, in.GoVersion, runtime.GOOS, runtime.GOARCH)
}
