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

// wake is how sleepUntil ended.
type wake int

const (
	reached   wake = iota // the time came
	woken                 // the wake channel fired first
	cancelled             // ctx ended first
)

// sleepUntil waits until t, or until ctx ends or wakeUp fires (nil: never).
// It waits on a timer (watching ctx and wakeUp) until precise before t,
// then sleeps the rest precisely; neither is watched during that last
// stretch.
func sleepUntil(ctx context.Context, t time.Time, wakeUp <-chan struct{}) wake {
	if d := time.Until(t); d > precise {
		timer := time.NewTimer(d - precise)
		select {
		case <-timer.C:
		case <-wakeUp:
			timer.Stop()
			return woken
		case <-ctx.Done():
			timer.Stop()
			return cancelled
		}
	}
	preciseSleep(time.Until(t))
	if ctx.Err() != nil {
		return cancelled
	}
	return reached
}
