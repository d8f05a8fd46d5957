package tuning

import (
	"runtime"
	"sync/atomic"
	"time"
)

// precise is how much of a wait an Alarm may sleep holding its P when
// GOMAXPROCS is above 1 (see Alarms).
const precise = 2 * time.Millisecond

// NewAlarms returns the alarms of the process's pipelines when the clock
// knob is in k (nil when it is not: Go timers then). Its owner (package
// fleet) makes one for all of its pipelines, so that together they keep a
// P free for the rest.
func (k Knobs) NewAlarms() *Alarms {
	if !k.Has(KnobClock) {
		return nil
	}
	return &Alarms{}
}

// Alarms makes the alarms the pipelines' schedulers wait on (the
// shaper.Alarm contract): they wait in the network poller,
// on Linux on a timerfd: the kernel wakes the poller at the very
// nanosecond (a Go timer wakes it in whole milliseconds, up to one late,
// which at hundreds of departures a second is jitter at the sink, and in
// leaky mode requests that the limiter lets go together to catch up), and
// the waiting goroutine holds no thread.
//
// With GOMAXPROCS above 1 an alarm sleeps the last precise before t in the
// kernel holding its P (sleepHoldingP), while fewer than GOMAXPROCS-1 other
// alarms of this clock do: at short intervals the scheduler then never
// parks, and nothing wakes a second thread to run it. One P at least stays
// free for the rest of the process, whatever the number of pipelines,
// provided they share one Alarms. The zero value is ready to use.
// docs/tuning.md says what each part saves and how it was measured.
type Alarms struct {
	holding atomic.Int32 // alarms sleeping holding their P now, and those asking to
}

// NewAlarm returns an alarm that waits in the network poller (see Alarms).
func (c *Alarms) NewAlarm() *Alarm {
	return &Alarm{clock: c, ring: make(chan struct{}, 1)}
}

// holdUntil sleeps until t holding the P, and reports false, having slept
// nothing, when procs-1 (GOMAXPROCS-1) other alarms of c already hold
// theirs. It yields first: the attempt the scheduler just handed over then
// writes its request on this P now instead of waiting for another to steal
// it.
func (c *Alarms) holdUntil(t time.Time, procs int) bool {
	defer c.holding.Add(-1)
	if int(c.holding.Add(1)) >= procs {
		return false
	}
	runtime.Gosched()
	if d := time.Until(t); d > 0 {
		sleepHoldingP(d)
	}
	return true
}

// Alarm is one of Alarms' alarms. It waits on a timerfd where the system
// has one (opened by the first Wait), else on a Go timer.
type Alarm struct {
	clock *Alarms
	rung  atomic.Bool   // a Ring not yet answered
	ring  chan struct{} // the Go timer's wait watches it
	fd    atomic.Pointer[timerfd]
	noFd  bool // opening a timerfd failed: Go timers only (the waiter's own)
}

// Wait waits until t, or a Ring; with GOMAXPROCS above 1 it may sleep the
// last precise before t without watching for Ring, and a Ring then cuts
// the next Wait short.
func (a *Alarm) Wait(t time.Time) bool {
	if procs := runtime.GOMAXPROCS(0); procs > 1 {
		if !a.waitUntil(t.Add(-precise)) {
			return false
		}
		if a.clock.holdUntil(t, procs) {
			return true
		}
	}
	return a.waitUntil(t)
}

// waitUntil waits until t or a Ring; a Ring still unanswered when t has
// come stays for the next Wait.
func (a *Alarm) waitUntil(t time.Time) bool {
	f := a.timerfd()
	for {
		d := time.Until(t)
		if d <= 0 {
			return true
		}
		if f != nil && f.arm(d) != nil {
			f = nil // closed meanwhile: wait on a timer
		}
		// After arming: a Ring from here on arms the timerfd to fire
		// at once, and a Ring before it is seen now.
		if a.rung.Swap(false) {
			return false
		}
		if f == nil || f.wait() != nil {
			a.waitTimer(d)
		}
	}
}

// waitTimer waits d on a Go timer, or until a Ring.
func (a *Alarm) waitTimer(d time.Duration) {
	timer := time.NewTimer(d)
	select {
	case <-timer.C:
	case <-a.ring:
		timer.Stop()
	}
}

// timerfd returns the alarm's timerfd, opening it the first time; nil
// where the system has none.
func (a *Alarm) timerfd() *timerfd {
	if f := a.fd.Load(); f != nil || a.noFd {
		return f
	}
	f, err := openTimerfd()
	if err != nil {
		a.noFd = true
		return nil
	}
	a.fd.Store(f)
	return f
}

func (a *Alarm) Ring() {
	a.rung.Store(true)
	select {
	case a.ring <- struct{}{}:
	default:
	}
	if f := a.fd.Load(); f != nil {
		_ = f.ring() // closed meanwhile: nobody waits on it
	}
}

func (a *Alarm) Close() {
	if f := a.fd.Swap(nil); f != nil {
		f.close()
	}
}
