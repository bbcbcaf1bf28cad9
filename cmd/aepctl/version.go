package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is set at build time:
//
//	go build -ldflags "-X main.version=v1.2.3" ./cmd/aepctl
//
// Without it, the module version and VCS revision recorded by the Go
// toolchain are used.
var version = ""

// versionString is what --version prints.
func versionString() string {
	v, rev, modified := version, "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	s := "aepctl " + v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		s += " " + rev
		if modified {
			s += "+dirty"
		}
	}
	return fmt.Sprintf("%s %s %s/%s", s, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
