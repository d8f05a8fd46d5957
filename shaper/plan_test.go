package shaper

import (
	"testing"
	"time"
)

// plan, the scheduler's decision for the task it holds, as a table: when
// it waits for the rate's slot, when for a pause, and when the task
// expires instead.
func TestPlanWaitsForTheSlotOrThePauseAndExpiresOnlyAtTheDeadline(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return now.Add(time.Duration(n) * time.Millisecond) }
	tests := []struct {
		name            string
		deadline        int // ms from now
		expires, paused bool
		slot            int // ms from now
		wantAt          time.Time
		wantExpire      bool
	}{
		{"running: the slot before the deadline", 500, true, false, 10, ms(10), false},
		{"running: the slot at the deadline still goes", 500, true, false, 500, ms(500), false},
		{"running: the slot after the deadline expires the task", 500, true, false, 501, ms(501), true},
		{"running, on_expire deliver: a slot after the deadline goes", 500, false, false, 900, ms(900), false},
		{"paused: waits for the deadline", 500, true, true, 10, ms(500), false},
		{"paused at the deadline: expires", 0, true, true, 10, ms(0), true},
		{"paused past the deadline: expires", -5, true, true, 10, ms(-5), true},
		{"paused, on_expire deliver: looks again in a minute, never expires", -5, false, true, 10, now.Add(time.Minute), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			asked := false
			slot := func(at time.Time) time.Time {
				asked = true
				if !at.Equal(now) {
					t.Errorf("slot asked at %v; want now", at)
				}
				return ms(tt.slot)
			}
			at, expire := plan(now, ms(tt.deadline), tt.expires, tt.paused, slot)
			if !at.Equal(tt.wantAt) || expire != tt.wantExpire {
				t.Errorf("plan = %v, expire %v; want %v, %v", at.Sub(now), expire, tt.wantAt.Sub(now), tt.wantExpire)
			}
			if asked == tt.paused {
				t.Errorf("the rate's slot asked: %v; want %v (only while running)", asked, !tt.paused)
			}
		})
	}
}
