package testwait

import (
	"testing"
	"time"
)

func TestHoldsReportsWhetherCondHeldEveryTime(t *testing.T) {
	if !Holds(5*Interval, func() bool { return true }) {
		t.Errorf("Holds(always true) = false; want true")
	}
	calls := 0
	start := time.Now()
	if Holds(time.Minute, func() bool { calls++; return calls < 3 }) {
		t.Errorf("Holds(false on the 3rd call) = true; want false")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Holds took %v with cond false on the 3rd call; want it to return then, not after d", took)
	}
	if calls != 3 {
		t.Errorf("cond called %d times; want 3 (Holds stops at the first false)", calls)
	}
}
