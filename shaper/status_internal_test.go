package shaper

import (
	"testing"
	"time"
)

func TestOldestWaitIsTheLongestWaitForADepartureInAnyLane(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	byID := func(m *Message) string { return m.ID }
	tests := []struct {
		name string
		give func(b *bucket) // fills the bucket, from t0 on
		at   time.Duration   // when oldestWait is asked, after t0
		want time.Duration
	}{
		{"empty", func(*bucket) {}, time.Second, 0},
		{"one lane's head", func(b *bucket) {
			b.admit(t0, msgs(2), nil)
			b.admit(t0.Add(time.Second), msgs(1), nil)
		}, 3 * time.Second, 3 * time.Second},
		{"the oldest head of several lanes", func(b *bucket) {
			b.admit(t0.Add(2*time.Second), []*Message{{ID: "a"}}, byID)
			b.admit(t0, []*Message{{ID: "b"}}, byID)
		}, 5 * time.Second, 5 * time.Second},
		{"in flight is not waiting", func(b *bucket) {
			b.admit(t0, msgs(1), nil)
			b.take(t0)
		}, time.Second, 0},
		{"a retry not yet due is not waiting", func(b *bucket) {
			b.admit(t0, msgs(1), nil)
			tk, _ := b.take(t0)
			b.retry(tk, t0.Add(10*time.Second))
		}, 5 * time.Second, 0},
		{"a due retry waits from its due time", func(b *bucket) {
			b.admit(t0, msgs(1), nil)
			tk, _ := b.take(t0)
			b.retry(tk, t0.Add(2*time.Second))
			b.admit(t0.Add(4*time.Second), msgs(1), nil)
		}, 5 * time.Second, 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBucket(10, laneOptions{})
			tt.give(b)
			if got := b.oldestWait(t0.Add(tt.at)); got != tt.want {
				t.Errorf("oldestWait(t0+%v) = %v; want %v", tt.at, got, tt.want)
			}
		})
	}
}
