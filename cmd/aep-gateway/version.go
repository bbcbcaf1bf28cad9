package main

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aep-gateway/aep-gateway/internal/buildinfo"
)

// version and revision are stamped at build time:
//
//	go build -ldflags "-X main.version=$(cat VERSION) -X main.revision=$(git rev-parse --short=12 HEAD)"
//
// (make build and the Dockerfile do). Empty, they fall back to what the Go
// toolchain recorded in the binary: the module version of a `go install
// ...@vX` build (else VERSION's release) and the VCS revision of a build in a
// checkout.
var (
	version  string
	revision string
)

// buildInfo returns the binary's version, VCS revision and Go version, never
// empty (the VERSION release for an unstamped build from a checkout).
func buildInfo() (ver, rev, goVersion string) {
	in := buildinfo.Read(version, revision)
	return in.Version, in.Revision, in.GoVersion
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
