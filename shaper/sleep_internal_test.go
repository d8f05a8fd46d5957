package shaper

import (
	"slices"
	"testing"
	"time"
)

// The precise sleeper never wakes early, and wakes close to the deadline:
// the p50 lateness is logged (about 60 µs here), and held to a generous
// bound, well below the millisecond a Go timer alone is late by.
func TestPreciseSleeperWakesAtTheDeadlineNotBefore(t *testing.T) {
	s := newPreciseSleeper()
	defer s.close()
	var late []time.Duration
	for i := range 200 {
		d := time.Duration(200+i*9) * time.Microsecond // 0.2 ms to 2 ms
		start := time.Now()
		s.sleep(d)
		took := time.Since(start)
		if took < d {
			t.Fatalf("sleep(%v) returned after %v: early", d, took)
		}
		late = append(late, took-d)
	}
	slices.Sort(late)
	p50 := late[len(late)/2]
	t.Logf("lateness p50 %v, p90 %v, max %v", p50, late[len(late)*9/10], late[len(late)-1])
	if p50 > 2*time.Millisecond {
		t.Errorf("lateness p50 %v; want well under a Go timer's (~1 ms), at most 2 ms even on a loaded machine", p50)
	}
}
