package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// version and revision are stamped at build time:
//
//	go build -ldflags "-X main.version=$(cat VERSION) -X main.revision=$(git rev-parse --short=12 HEAD)"
//
// (make build and the Dockerfile do). Empty, they fall back to what the Go
// toolchain recorded in the binary: the module version of a `go install
// ...@vX` build and the VCS revision of a build in a checkout.
var (
	version  string
	revision string
)

// buildInfo returns the binary's version, VCS revision and Go version, never
// empty ("unknown" when nothing recorded them).
func buildInfo() (ver, rev, goVersion string) {
	ver, rev, goVersion = version, revision, runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		if ver == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			ver = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && rev == "" {
				rev = s.Value
			}
		}
	}
	if ver == "" {
		ver = "unknown"
	}
	if rev == "" {
		rev = "unknown"
	}
	return ver, rev, goVersion
}

func versionLine() string {
	ver, rev, goVersion := buildInfo()
	return fmt.Sprintf("aep-gateway %s (revision %s, %s)", ver, rev, goVersion)
}

// newBuildInfoGauge is aep_build_info{version,revision,goversion} = 1, the
// usual way to put a binary's version on dashboards and in alerts.
func newBuildInfoGauge() prometheus.Collector {
	ver, rev, goVersion := buildInfo()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "aep_build_info",
		Help:        "Always 1; the labels say which build of aep-gateway runs.",
		ConstLabels: prometheus.Labels{"version": ver, "revision": rev, "goversion": goVersion},
	})
	g.Set(1)
	return g
}
