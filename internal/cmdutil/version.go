package cmdutil

import (
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// version is set by the build: go build -ldflags "-X
// github.com/teamster-fleet/teamster/internal/cmdutil.version=v1.2.3", as
// make build (git describe) and deploy/Dockerfile (its VERSION) do.
var version string

// Version is this binary's version: the one the build set (version), or
// else, from the build information Go embeds, the main module's version
// when it was built as a released module (go install …@v1.2.3), or the VCS
// revision it was built from (its first 12 hex digits, "-dirty" when the
// tree had uncommitted changes); otherwise "devel" (go run, go test, a build
// with -buildvcs=false).
var Version = sync.OnceValue(func() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return versionOf(bi)
})

func versionOf(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// VersionLine is what --version prints after the command's name.
func VersionLine() string { return Version() + " (" + runtime.Version() + ")" }

// buildInfo is teamster_build_info: 1, labelled with the version and the Go
// version, so that dashboards can tell a fleet's builds apart.
func buildInfo() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "teamster", Name: "build_info",
		Help:        "Always 1; its labels are the binary's version and the Go version it was built with.",
		ConstLabels: prometheus.Labels{"version": Version(), "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}
