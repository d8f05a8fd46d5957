// Package window counts events in sliding time windows: the measure of
// shaping that the benchmark harness reports and the tests bound ("most
// requests in any 100 ms").
package window

import "time"

// Most returns the most times that fall in any half-open window [t, t+w)
// of length w. ts must be sorted.
func Most(ts []time.Time, w time.Duration) int {
	most, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= w {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}
