// Package testwait polls a condition for tests that wait on real processes,
// servers and brokers, where no clock can be faked: the wait is bounded, and
// a test that times out says what it waited for.
package testwait

import (
	"context"
	"testing"
	"time"
)

// Interval is how often For and Until check their condition.
const Interval = 20 * time.Millisecond

// For polls cond every Interval until it holds, and fails the test after
// timeout, naming what it waited for.
func For(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(timeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// Until polls cond every Interval until it holds or timeout passes, and
// reports whether it held.
func Until(timeout time.Duration, cond func() bool) bool {
	_, ok := Every(Interval, timeout, cond)
	return ok
}

// UntilEach is Until for a condition that asks a server or a broker: each
// check gets a context that ends after each, so that a call that hangs
// holds up the wait for no longer than that.
func UntilEach(timeout, each time.Duration, cond func(ctx context.Context) bool) bool {
	return Until(timeout, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), each)
		defer cancel()
		return cond(ctx)
	})
}

// Every is Until with its own polling interval, for a test that times how
// soon something happens.
func Every(interval, timeout time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for !cond() {
		if time.Since(start) >= timeout {
			return time.Since(start), cond()
		}
		time.Sleep(interval)
	}
	return time.Since(start), true
}

// Holds polls cond every Interval for d and reports whether it held each
// time: for a promise that must keep holding for a while (a daemon stays up
// and not ready through an outage), which a sleep would check only at its
// end.
func Holds(d time.Duration, cond func() bool) bool {
	_, broke := Every(Interval, d, func() bool { return !cond() })
	return !broke
}
