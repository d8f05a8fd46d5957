//go:build !race

package faults_test

// raceEnabled is true when the test binary runs with the race detector; the
// shaper child is then built with it too.
const raceEnabled = false
