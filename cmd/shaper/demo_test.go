package main

import (
	"bytes"
	"debug/buildinfo"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/shaper-dev/shaper/internal/repotest"
)

// The demo's embedded brokers: in a checkout build, nowhere in a release build.
var demoOnlyDeps = []string{"github.com/nats-io/nats-server/v2/server", "github.com/twmb/franz-go/pkg/kfake"}

// goListDeps returns every package the shaper binary depends on, built with
// the given go build arguments.
func goListDeps(t *testing.T, buildArgs ...string) []string {
	t.Helper()
	args := append(append([]string{"list", "-deps"}, buildArgs...), ".")
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.Fields(string(out))
}

func TestReleaseBuildLeavesNATSServerAndKfakeOut(t *testing.T) {
	for _, pkg := range goListDeps(t, "-tags", "nodemo") {
		if strings.Contains(pkg, "nats-server") || strings.Contains(pkg, "kfake") {
			t.Errorf("shaper built with -tags nodemo depends on %s", pkg)
		}
	}
}

func TestReleaseBuildKeepsTheBrokerClients(t *testing.T) {
	deps := goListDeps(t, "-tags", "nodemo")
	for _, want := range []string{"github.com/nats-io/nats.go/jetstream", "github.com/segmentio/kafka-go"} {
		if !slices.Contains(deps, want) {
			t.Errorf("shaper built with -tags nodemo does not depend on %s; the NATS and Kafka sources need it", want)
		}
	}
}

// TestCheckoutBuildKeepsTheDemo is what makes the test above mean something:
// the packages it looks for are there in the default build, which make run
// and go run ./cmd/shaper demo use.
func TestCheckoutBuildKeepsTheDemo(t *testing.T) {
	deps := goListDeps(t)
	for _, want := range demoOnlyDeps {
		if !slices.Contains(deps, want) {
			t.Errorf("shaper built without tags does not depend on %s; the demo needs it", want)
		}
	}
}

// TestMakeBuildIsTheReleaseBuildAndMakeRunHasTheDemo reads the recipes of
// the Makefile's build and run targets.
func TestMakeBuildIsTheReleaseBuildAndMakeRunHasTheDemo(t *testing.T) {
	recipes := map[string]string{}
	target := ""
	for _, line := range strings.Split(string(repotest.Read(t, filepath.Join(repoRoot, "Makefile"))), "\n") {
		switch {
		case strings.HasPrefix(line, "\t") && target != "":
			recipes[target] += strings.TrimSpace(line) + "\n"
		case strings.Contains(line, ":") && !strings.HasPrefix(line, "#") && !strings.Contains(line, "="):
			target, _, _ = strings.Cut(line, ":")
		default:
			target = ""
		}
	}
	if build := recipes["build"]; !strings.Contains(build, " build ") || !strings.Contains(build, "-tags nodemo") {
		t.Errorf("make build runs %q; want a go build with -tags nodemo", build)
	}
	if run := recipes["run"]; !strings.Contains(run, " demo") || strings.Contains(run, "nodemo") {
		t.Errorf("make run runs %q; want the demo, built without -tags nodemo", run)
	}
}

// TestReleaseBuildDemoExitsTwoAndSaysWhereTheDemoIs builds the release
// binary and runs its demo command. It also reads the module list stamped
// into the binary, which is what vulnerability scanners report from.
func TestReleaseBuildDemoExitsTwoAndSaysWhereTheDemoIs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "shaper")
	if out, err := exec.Command("go", "build", "-tags", "nodemo", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags nodemo: %v\n%s", err, out)
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range info.Deps {
		if strings.Contains(m.Path, "nats-server") || strings.Contains(m.Path, "kfake") {
			t.Errorf("the release binary lists module %s %s", m.Path, m.Version)
		}
	}
	tests := []struct {
		name string
		give []string
	}{
		{"bare", []string{"demo"}},
		{"with flags", []string{"demo", "--rate", "5", "--source", "kafka"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(bin, tt.give...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != exitUsage {
				t.Fatalf("shaper %s: %v; want exit %d", strings.Join(tt.give, " "), err, exitUsage)
			}
			const want = "shaper: this build leaves the demo out; run it from a checkout: make run\n"
			if stderr.String() != want || stdout.Len() != 0 {
				t.Errorf("shaper %s printed stdout %q, stderr %q; want stderr %q", strings.Join(tt.give, " "), stdout.String(), stderr.String(), want)
			}
		})
	}
	if out, err := exec.Command(bin, "version").Output(); err != nil || !strings.HasPrefix(string(out), "shaper ") {
		t.Errorf("shaper version = %q, %v; want the version", out, err)
	}
}
