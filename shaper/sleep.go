package shaper

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
)

// precise is how much of a wait is slept in the kernel rather than on a Go
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

// sleepUntil waits on clock until t, or until ctx ends or wakeUp fires
// (nil: never). It waits on a timer (watching ctx and wakeUp) until precise
// before t, then sleeps the rest with clock.SleepUntil; neither is watched
// during that last stretch.
func sleepUntil(ctx context.Context, clock Clock, t time.Time, wakeUp <-chan struct{}) wake {
	if d := t.Sub(clock.Now()); d > precise {
		timer := clock.NewTimer(d - precise)
		select {
		case <-timer.C():
		case <-wakeUp:
			timer.Stop()
			return woken
		case <-ctx.Done():
			timer.Stop()
			return cancelled
		}
	}
	clock.SleepUntil(t)
	if ctx.Err() != nil {
		return cancelled
	}
	return reached
}

// Clock is the time a pipeline runs on: it reads the time, makes timers,
// and sleeps the last stretch before a departure. Parts.Clock nil is the
// machine's clock (a MachineClock), which sleeps that stretch in the kernel;
// a test passes one on the fake time of testing/synctest, where the whole
// scheduler runs in milliseconds.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once, after d.
	NewTimer(d time.Duration) Timer
	// SleepUntil blocks until t. The pipeline calls it for at most the
	// last precise before a departure, and watches nothing meanwhile.
	SleepUntil(t time.Time)
}

// Timer is a Clock's one-shot timer.
type Timer interface {
	// C receives the time once the timer fires.
	C() <-chan time.Time
	// Stop stops a timer that has not fired, and reports whether it did.
	Stop() bool
}

// MachineClock is the machine's clock. It sleeps the last stretch before a
// departure in the kernel, holding the goroutine's P while fewer than
// GOMAXPROCS-1 other sleeps of this clock hold one (sleepHoldingP), and
// otherwise as a system call that frees the P (sleepInSyscall): one P at
// least is always free for the rest of the process, whatever the number of
// pipelines. The pipelines of one process share one MachineClock; the
// zero value is ready to use.
type MachineClock struct {
	sleeping atomic.Int32 // SleepUntil calls now; all but GOMAXPROCS-1 of them free their P
}

// Now returns time.Now().
func (*MachineClock) Now() time.Time { return time.Now() }

// NewTimer returns a time.Timer as a Timer.
func (*MachineClock) NewTimer(d time.Duration) Timer { return stdTimer{time.NewTimer(d)} }

// SleepUntil sleeps until t in the kernel (see MachineClock).
func (c *MachineClock) SleepUntil(t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	defer c.sleeping.Add(-1)
	if int(c.sleeping.Add(1)) < runtime.GOMAXPROCS(0) {
		sleepHoldingP(d)
		return
	}
	sleepInSyscall(d)
}

// stdTimer is a *time.Timer as a Timer.
type stdTimer struct{ t *time.Timer }

func (s stdTimer) C() <-chan time.Time { return s.t.C }
func (s stdTimer) Stop() bool          { return s.t.Stop() }
