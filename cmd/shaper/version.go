package main

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// version and commit are stamped at build time: -ldflags "-X
// main.version=v1.2.3 -X main.commit=<revision>" (make build and make dist
// stamp git describe and git rev-parse HEAD). Left empty, they are what the
// Go toolchain recorded in the binary (see describeBuild).
var version, commit string

// build is what a binary says about itself, in shaper version and in the
// shaper_build_info metric.
type build struct {
	// version is the stamped version; else the module's version (go install
	// ...@v1.2.3, or the pseudo-version go build gives a checkout); else the
	// VCS revision, +dirty when the tree had changes; else "dev".
	version string
	// commit is the VCS revision the binary was built from, or "unknown"
	// (a build outside a checkout, such as go install ...@v1.2.3).
	commit string
	// goVersion is the Go toolchain that built it, such as go1.26.8.
	goVersion string
}

// currentBuild describes this binary.
func currentBuild() build {
	info, _ := debug.ReadBuildInfo() // nil without module support; describeBuild allows for it
	return describeBuild(build{version: version, commit: commit}, info)
}

// describeBuild completes stamped, the version and commit stamped into a
// binary ("" where none was), from the binary's Go build information, info
// (nil if there is none), and adds the Go version.
func describeBuild(stamped build, info *debug.BuildInfo) build {
	b := stamped
	b.goVersion = runtime.Version()
	var revision, modulever string
	var dirty bool
	if info != nil {
		modulever = info.Main.Version
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if b.commit == "" {
		b.commit = cmp.Or(revision, "unknown")
	}
	switch {
	case b.version != "":
	case modulever != "" && modulever != "(devel)":
		b.version = modulever
	case revision != "" && dirty:
		b.version = revision + "+dirty"
	default:
		b.version = cmp.Or(revision, "dev")
	}
	return b
}

// String is the line shaper version prints.
func (b build) String() string {
	return fmt.Sprintf("shaper %s (commit %s, %s %s/%s)", b.version, b.commit, b.goVersion, runtime.GOOS, runtime.GOARCH)
}

// collector is the shaper_build_info gauge: always 1, its labels say which
// build answers, so a dashboard can show a rollout.
func (b build) collector() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "shaper_build_info",
		Help:        "Always 1; the labels say which build of shaper this is.",
		ConstLabels: prometheus.Labels{"version": b.version, "commit": b.commit, "go_version": b.goVersion},
	})
	g.Set(1)
	return g
}

// versionCmd prints the build's version line.
func versionCmd(args []string, g *globals, stdout io.Writer) error {
	if err := parseFlags(flag.NewFlagSet("version", flag.ContinueOnError), args, g, nil); err != nil {
		return err
	}
	fmt.Fprintln(stdout, currentBuild())
	return nil
}
