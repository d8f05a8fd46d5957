package shaper

import (
	"context"
	"time"
)

// precise is how much of a wait is slept by preciseSleep rather than a Go
// timer. Go's timers wait in epoll, in whole milliseconds, so they wake up
// to about a millisecond late; at hundreds of requests per second and more
// that lateness is the jitter the sink sees, and in leaky mode beyond half
// an interval it is rate lost. Measured at 1000/s: wake-up lateness p50
// ~0.5 ms with the timer alone, ~0.05 ms with the last stretch slept.
const precise = 2 * time.Millisecond

// sleepUntil waits until t, and reports false if ctx ended first. It waits
// on a timer (watching ctx) until precise before t, then sleeps the rest
// precisely; ctx is not watched during that last stretch.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	if d > precise {
		timer := time.NewTimer(d - precise)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return false
		}
	}
	preciseSleep(time.Until(t))
	return ctx.Err() == nil
}
