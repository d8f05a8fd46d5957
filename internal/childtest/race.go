//go:build race

package childtest

// raceEnabled is true when this binary runs with the race detector; Build
// then builds the child with it too.
const raceEnabled = true
