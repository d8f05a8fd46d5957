package main

// Tests of what builds and installs shaper: the version a real binary
// reports (stamped, or from what Go recorded), make lint outside a git
// checkout, make test-deps, and the README's Install and Prerequisites
// against go.mod and the Makefile. make dist's recipe is checked with the
// other release artefacts, in package deploy.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/repotest"
)

// makeCommand is make run in the repository root with args.
func makeCommand(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	return exec.Command("make", append([]string{"-C", root, "--no-print-directory"}, args...)...)
}

// The ldflags of the Dockerfile and the Makefile stamp main.version; -X
// silently does nothing unless it names a string variable.
var _ *string = &version

// goBuild builds the release binary (-tags nodemo, as the other build
// tests do, so the build cache serves all of them) with extra go build
// flags, and returns its path.
func goBuild(t *testing.T, flags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "shaper")
	args := append(append([]string{"build", "-tags", "nodemo", "-o", bin}, flags...), ".")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin
}

// versionOf runs bin --version.
func versionOf(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", bin, err)
	}
	return string(out)
}

// A stamped binary names its stamp; an unstamped one built in a git
// checkout names the module pseudo-version Go gives it, with the revision,
// and that revision as its commit; outside a checkout it says dev.
func TestARealBinaryReportsItsStampOrWhatGoRecorded(t *testing.T) {
	const commit = "feedfacefeedfacefeedfacefeedfacefeedface"
	stamped := versionOf(t, goBuild(t, "-ldflags", "-X main.version=v9.8.7-test -X main.commit="+commit))
	platform := runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	if want := "shaper v9.8.7-test (commit " + commit + ", " + platform + ")\n"; stamped != want {
		t.Errorf("stamped binary: --version = %q; want %q", stamped, want)
	}

	head, err := exec.Command("git", "-C", repoRoot, "rev-parse", "HEAD").Output()
	if err != nil { // not a git checkout (a tarball): Go records no revision
		if got, want := versionOf(t, goBuild(t, "-buildvcs=false")), "shaper dev (commit unknown, "+platform+")\n"; got != want {
			t.Errorf("unstamped binary outside a checkout: --version = %q; want %q", got, want)
		}
		return
	}
	rev := strings.TrimSpace(string(head))
	got := versionOf(t, goBuild(t, "-buildvcs=true"))
	m := regexp.MustCompile(`^shaper (v0\.0\.0-\d{14}-([0-9a-f]{12})(\+dirty)?) \(commit ([0-9a-f]{40}), `).FindStringSubmatch(got)
	if m == nil || m[2] != rev[:12] || m[4] != rev {
		t.Errorf("unstamped binary built at %s: --version = %q; want the pseudo-version v0.0.0-TIME-%s[+dirty] and commit %s", rev, got, rev[:12], rev)
	}
}

// make lint walks the tree with gofmt -l . : outside a git checkout it still
// finds an unformatted file (git ls-files found none, and gofmt then read
// stdin). GO=true leaves go vet out: this is about gofmt.
func TestMakeLintFindsUnformattedFilesOutsideAGitCheckout(t *testing.T) {
	makefile, err := filepath.Abs(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("good.go", "package tarball\n\nfunc good() {}\n")
	write("bad.go", "package tarball\nfunc   bad( ) { }\n")
	lint := func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a generous bound on a hang
		defer cancel()
		cmd := exec.CommandContext(ctx, "make", "-s", "-f", makefile, "lint", "GO=true")
		cmd.Dir = dir
		cmd.WaitDelay = time.Second // after a hang: gofmt, left reading stdin, still holds the output open
		cmd.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(dir))
		r, w, err := os.Pipe() // stdin that never ends: lint must not read it
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		defer w.Close()
		cmd.Stdin = r
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := lint()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(out, "gofmt would change:\nbad.go\n") || strings.Contains(out, "good.go") {
		t.Errorf("make lint in a directory that is not a git checkout, with bad.go unformatted = %v:\n%s\nwant a failure naming bad.go alone", err, out)
	}
	if err := os.Remove(filepath.Join(dir, "bad.go")); err != nil {
		t.Fatal(err)
	}
	if out, err := lint(); err != nil {
		t.Errorf("make lint with every file formatted = %v:\n%s", err, out)
	}
}

// make test installs what the tests run besides Go modules, where it is
// missing: its recipe (make -n: installing is not for a test) checks each
// command and installs the Debian package with apt-get. CI runs make test.
func TestMakeTestInstallsTheToolsTheTestsRun(t *testing.T) {
	out, err := makeCommand(t, "-n", "test").Output()
	if err != nil {
		t.Fatalf("make -n test: %v\n%s", err, out)
	}
	recipe := string(out)
	deps, tests := strings.Index(recipe, "apt-get install"), strings.Index(recipe, " test -race")
	if deps < 0 || tests < 0 || deps > tests {
		t.Errorf("make test does not install its tools before go test -race:\n%s", recipe)
	}
	for _, tool := range []string{"gcc:gcc", "redis-server:redis-server", "chromium:chromium", "zsh:zsh"} {
		if !strings.Contains(recipe, tool) {
			t.Errorf("make test-deps does not check for and install %s (command:package):\n%s", tool, recipe)
		}
	}
	ci := string(repotest.Read(t, filepath.Join(repoRoot, ".ci", "run")))
	if !regexp.MustCompile(`(?m)^make test$`).MatchString(ci) {
		t.Errorf(".ci/run does not run make test:\n%s", ci)
	}
}

// The README's first screen gives exactly the two set-up commands; its
// Install section installs this module's command, and Prerequisites name
// go.mod's Go version.
func TestReadmeInstallAndPrerequisitesMatchTheModule(t *testing.T) {
	readme := string(repotest.Read(t, filepath.Join(repoRoot, "README.md")))
	gomod := string(repotest.Read(t, filepath.Join(repoRoot, "go.mod")))
	module := regexp.MustCompile(`(?m)^module (\S+)$`).FindStringSubmatch(gomod)
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(gomod)
	if module == nil || goVersion == nil {
		t.Fatalf("go.mod has no module or go line:\n%s", gomod)
	}

	first := regexp.MustCompile("(?s)```\n(.*?)```").FindStringSubmatch(readme)
	var commands []string
	for _, line := range strings.Split(strings.TrimSpace(first[1]), "\n") {
		commands = append(commands, strings.Join(strings.Fields(strings.SplitN(line, "#", 2)[0]), " "))
	}
	if !slices.Equal(commands, []string{"make run", "make test"}) {
		t.Errorf("the README's first code block runs %q; want make run and make test alone", commands)
	}

	for _, want := range []string{
		"go install " + module[1] + "/cmd/shaper@latest",
		"go install -tags nodemo " + module[1] + "/cmd/shaper@latest",
		"source <(shaper completion bash)",
		"shaper completion zsh > ",
		"`make dist`",
		"`go " + goVersion[1] + "`",
	} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md lacks %q", want)
		}
	}
	platforms := regexp.MustCompile(`(?m)^DIST_PLATFORMS \?= (.*)$`).FindStringSubmatch(string(repotest.Read(t, filepath.Join(repoRoot, "Makefile"))))
	if platforms == nil {
		t.Fatal("the Makefile sets no DIST_PLATFORMS")
	}
	for _, platform := range strings.Fields(platforms[1]) {
		if !strings.Contains(readme, "`shaper-"+platform+"`") {
			t.Errorf("README.md does not name make dist's shaper-%s", platform)
		}
	}
}
