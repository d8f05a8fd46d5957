package shaper

import (
	"testing"
	"time"
)

// The bucket's capacity follows limit × max_queue_time without
// overflowing, whatever rate config.Validate lets through.
func TestEffectiveCapacityNeverOverflows(t *testing.T) {
	tests := []struct {
		limit float64
		mqt   time.Duration
		want  int
	}{
		{50, 5 * time.Second, 250},
		{200, time.Minute, 1000},
		{0.2, 5 * time.Second, 1},
		{1e308, 5 * time.Second, 1000},
		{1.6e17, time.Hour, 1000},
		{1e6, 1<<63 - 1, 1000},
	}
	for _, tt := range tests {
		if got := effectiveCapacity(BucketConfig{Capacity: 1000, MaxQueueTime: tt.mqt}, tt.limit); got != tt.want {
			t.Errorf("effectiveCapacity(capacity 1000, limit %v, max_queue_time %v) = %d; want %d", tt.limit, tt.mqt, got, tt.want)
		}
	}
}
