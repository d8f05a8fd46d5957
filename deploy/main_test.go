package deploy_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/shaper-dev/shaper/internal/childtest"
)

// repoRoot is the repository root, seen from this package's directory (where
// go test runs).
const repoRoot = ".."

// deployDir is deploy/, this package's directory.
const deployDir = "."

// shaperBin is the shaper binary TestMain builds once for every test.
var shaperBin string

// TestMain builds cmd/shaper once (with -race when the tests run with it)
// for the tests that run `shaper validate`, `shaper healthcheck` and
// `shaper run`, and checks that no goroutine outlives the tests. The
// variables that shaper's flags fall back to are cleared first, so that a
// developer's own settings do not change what the tests see.
func TestMain(m *testing.M) {
	for _, env := range []string{"SHAPER_CONFIG", "SHAPER_LOG_LEVEL", "SHAPER_LOG_FORMAT"} {
		os.Unsetenv(env)
	}
	bin, remove, err := childtest.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploy:", err)
		os.Exit(1)
	}
	shaperBin = bin
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { remove() }))
}
