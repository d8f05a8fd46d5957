package testwait

import (
	"context"
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

func TestUntilEachGivesEveryCheckAContextThatEndsAfterEach(t *testing.T) {
	calls := 0
	ok := UntilEach(time.Minute, time.Second, func(ctx context.Context) bool {
		calls++
		deadline, has := ctx.Deadline()
		if !has || time.Until(deadline) > time.Second {
			t.Errorf("check %d: ctx deadline %v, %v; want one within 1s", calls, deadline, has)
		}
		return calls == 3
	})
	if !ok || calls != 3 {
		t.Errorf("UntilEach(true on the 3rd check) = %v after %d checks; want true after 3", ok, calls)
	}
	if UntilEach(3*Interval, time.Second, func(ctx context.Context) bool { return false }) {
		t.Error("UntilEach(never true) = true; want false")
	}
}
