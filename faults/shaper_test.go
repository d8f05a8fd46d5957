package faults_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/childtest"
)

// startShaper starts `shaper run --config config` from the binary TestMain
// built, named name in failure messages; childtest stops it when the test
// ends and fails the test on a data race it reported.
func startShaper(t testing.TB, name, config string) *childtest.Process {
	t.Helper()
	return childtest.Start(t, childtest.Config{
		Name: "shaper " + name,
		Bin:  shaperBin,
		Args: []string{"run", "--config", config},
		Env:  []string{"GORACE=halt_on_error=0"},
	})
}

// jitter returns a random duration in [lo, hi).
func jitter(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rand.Int64N(int64(hi-lo)))
}
