package window

import (
	"testing"
	"time"
)

func at(ms ...float64) []time.Time {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	out := make([]time.Time, len(ms))
	for i, m := range ms {
		out[i] = t0.Add(time.Duration(m * float64(time.Millisecond)))
	}
	return out
}

func TestMaxInWindowCountsTheBusiestHalfOpenWindow(t *testing.T) {
	tests := []struct {
		name string
		give []time.Time
		w    time.Duration
		want int
	}{
		{"empty", nil, 100 * time.Millisecond, 0},
		{"evenly spaced", at(0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110), 100 * time.Millisecond, 10},
		{"the end is open", at(0, 100), 100 * time.Millisecond, 1},
		{"a cluster later on", at(0, 500, 501, 502, 503, 900), 100 * time.Millisecond, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Most(tt.give, tt.w); got != tt.want {
				t.Errorf("Most(%s) = %d; want %d", tt.name, got, tt.want)
			}
		})
	}
}
