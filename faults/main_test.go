package faults_test

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shaper-dev/shaper/internal/childtest"
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
	remove := func() {}
	if shaperBin = os.Getenv("SHAPER_FAULTS_BIN"); shaperBin == "" {
		// By default the suite tests the tree it is in; the variable names
		// a binary built elsewhere (a release, a bisect).
		start := time.Now()
		var err error
		if shaperBin, remove, err = childtest.Build(); err != nil {
			fmt.Fprintln(os.Stderr, "faults:", err)
			os.Exit(1)
		}
		if testing.Verbose() {
			fmt.Fprintf(os.Stderr, "faults: built %s (race=%v) in %v\n", shaperBin, raceEnabled, time.Since(start).Round(time.Millisecond))
		}
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { remove() }))
}
