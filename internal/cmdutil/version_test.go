package cmdutil

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// The version comes from the build: a released module's version, else the
// VCS revision (12 hex digits, -dirty for a modified tree), else devel.
func TestVersionOfABuild(t *testing.T) {
	rev := []debug.BuildSetting{{Key: "vcs.revision", Value: "604a766e1f2c9d0b8a7e6f5d4c3b2a1908070605"}}
	for _, c := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"released module", debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}, Settings: rev}, "v1.4.0"},
		{"checkout", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: rev}, "604a766e1f2c"},
		{"modified checkout", debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: append(rev, debug.BuildSetting{Key: "vcs.modified", Value: "true"})}, "604a766e1f2c-dirty"},
		{"no VCS information", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel"},
	} {
		if got := versionOf(&c.bi); got != c.want {
			t.Errorf("%s: version %q, want %q", c.name, got, c.want)
		}
	}
}

// A daemon's registry exports teamster_build_info 1, labelled with the
// version and the Go version.
func TestTheRegistryExportsBuildInfo(t *testing.T) {
	mfs, err := Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "teamster_build_info" {
			continue
		}
		m := mf.GetMetric()
		if len(m) != 1 || m[0].GetGauge().GetValue() != 1 {
			t.Fatalf("teamster_build_info: %v, want one series of value 1", m)
		}
		labels := map[string]string{}
		for _, l := range m[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["version"] != Version() || labels["goversion"] != runtime.Version() {
			t.Fatalf("teamster_build_info labels %v, want version %q and goversion %q", labels, Version(), runtime.Version())
		}
		return
	}
	t.Fatal("no teamster_build_info in the registry")
}
