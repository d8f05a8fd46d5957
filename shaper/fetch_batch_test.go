package shaper

import "testing"

// The fetcher waits for room for limit × 50 ms, for at least 50 messages
// (a pull per 5 at 100/s costs the broker more), for at most a quarter of
// the bucket, and for at least one.
func TestFetchBatchIsFiftyMillisecondsOfTheRateWithinItsBounds(t *testing.T) {
	tests := []struct {
		limit    float64
		capacity int
		want     int
	}{
		{1000, 1000, 50},
		{5000, 1000, 250},
		{20000, 1000, 250}, // a quarter of the bucket
		{100, 1000, 50},    // not 5
		{0.5, 1000, 50},
		{100, 40, 10}, // the floor gives way to a small bucket
		{100, 3, 1},
	}
	for _, tt := range tests {
		if got := fetchBatch(tt.limit, tt.capacity); got != tt.want {
			t.Errorf("fetchBatch(%v, %d) = %d; want %d", tt.limit, tt.capacity, got, tt.want)
		}
	}
}
