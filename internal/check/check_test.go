package check

import (
	"testing"
	"time"
)

func TestPositiveRefusesZeroAndNegativeDurations(t *testing.T) {
	tests := []struct {
		give time.Duration
		want string
	}{
		{time.Nanosecond, ""},
		{0, "a.b: must be > 0, got 0s"},
		{-time.Second, "a.b: must be > 0, got -1s"},
	}
	for _, tt := range tests {
		var ps Problems
		ps.Positive("a.b", tt.give)
		got := ""
		if err := ps.Err(); err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("Positive(a.b, %v) = %q; want %q", tt.give, got, tt.want)
		}
	}
}
