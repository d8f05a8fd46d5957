package faults_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// shaperBin is the shaper binary TestMain builds once for every test.
var shaperBin string

// soakFor turns TestSoak on: go test -run TestSoak ./faults/ -args -soak=10m.
var soakFor = flag.Duration("soak", 0, "run TestSoak, mixed faults for this long (opt-in, not in CI)")

// TestMain builds cmd/shaper once (with -race when the tests run with it),
// so every test starts real `shaper run` processes, and checks that no
// goroutine of the test process outlives the tests.
func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "shaper-faults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(1)
	}
	shaperBin = filepath.Join(dir, "shaper")
	if bin := os.Getenv("SHAPER_FAULTS_BIN"); bin != "" {
		// A binary built elsewhere (a release, a bisect); by default the
		// suite tests the tree it is in.
		shaperBin = bin
	} else if err := build(shaperBin); err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { os.RemoveAll(dir) }))
}

func build(out string) error {
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/shaper-dev/shaper/cmd/shaper")
	start := time.Now()
	cmd := exec.Command(goTool, args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %v: %v\n%s", args, err, b)
	}
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "faults: built %s (race=%v) in %v\n", out, raceEnabled, time.Since(start).Round(time.Millisecond))
	}
	return nil
}
