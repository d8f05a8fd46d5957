package faults_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
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

// pipeline is the variable part of a one-pipeline config, each a YAML flow
// mapping body or block.
type pipeline struct {
	drain      time.Duration // shutdown.drain_timeout; 0: 5s
	source     string        // the value of source:, e.g. `{nats: {...}}`
	bucket     string        // the value of bucket:; "": {capacity: 1000, max_queue_time: 1m}
	rate       string        // the value of rate:
	sink       string        // the value of sink:
	deadLetter string        // the value of dead_letter:, or "" for none
}

func (p pipeline) yaml() string {
	if p.drain == 0 {
		p.drain = 5 * time.Second
	}
	if p.bucket == "" {
		p.bucket = "{capacity: 1000, max_queue_time: 1m}"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "admin: {listen: \"127.0.0.1:0\"}\nshutdown: {drain_timeout: %s}\npipelines:\n  - name: faults\n", p.drain)
	fmt.Fprintf(&b, "    source: %s\n    bucket: %s\n    rate: %s\n    sink: %s\n", p.source, p.bucket, p.rate, p.sink)
	if p.deadLetter != "" {
		fmt.Fprintf(&b, "    dead_letter: %s\n", p.deadLetter)
	}
	return b.String()
}

// jitter returns a random duration in [lo, hi).
func jitter(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rand.Int64N(int64(hi-lo)))
}
