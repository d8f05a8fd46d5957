package shaper

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
)

// precise is how much of a wait a MachineClock may sleep holding its P when
// GOMAXPROCS is above 1 (see MachineClock).
const precise = 2 * time.Millisecond

// wake is how sleepUntil ended.
type wake int

const (
	reached   wake = iota // the time came
	woken                 // the alarm rang first
	cancelled             // ctx ended first
)

// sleepUntil waits on alarm until t, or until it rings (a rate change, a
// hold, or ctx ending, which the caller rings it for).
func sleepUntil(ctx context.Context, alarm Alarm, t time.Time) wake {
	came := alarm.Wait(t)
	switch {
	case ctx.Err() != nil:
		return cancelled
	case !came:
		return woken
	}
	return reached
}

// Clock is the time a pipeline runs on: it reads the time, makes timers,
// and makes the alarm its scheduler waits on for each departure. Parts.Clock
// nil is the machine's clock (a MachineClock); a test passes one on the fake
// time of testing/synctest, where the whole scheduler runs in milliseconds.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once, after d.
	NewTimer(d time.Duration) Timer
	// NewAlarm returns an alarm for the waits of one goroutine.
	NewAlarm() Alarm
}

// Timer is a Clock's one-shot timer.
type Timer interface {
	// C receives the time once the timer fires.
	C() <-chan time.Time
	// Stop stops a timer that has not fired, and reports whether it did.
	Stop() bool
}

// Alarm is one goroutine's wait for a time, which any goroutine can cut
// short: the scheduler waits on one for each departure, and a rate change,
// a hold of the gate or the end of its context rings it.
type Alarm interface {
	// Wait blocks until t, or until Ring, and reports whether t came
	// (false: rung). A MachineClock may sleep the last precise before t
	// without watching for Ring; a Ring then cuts the next Wait short.
	Wait(t time.Time) bool
	// Ring cuts the Wait in progress short, or else the next one. Any
	// goroutine may call it, at any time, also after Close.
	Ring()
	// Close releases what the alarm holds. A Wait after Close still works.
	Close()
}

// MachineClock is the machine's clock. Its alarms wait in the network
// poller, on Linux on a timerfd: the kernel wakes the poller at the very
// nanosecond (a Go timer wakes it in whole milliseconds, up to one late,
// which at hundreds of departures a second is jitter at the sink, and in
// leaky mode requests that the limiter lets go together to catch up), and
// the waiting goroutine holds no thread. Measured at 100/s JetStream →
// HTTP: 7–8 context switches per message at GOMAXPROCS 1 against 16–18
// with a Go timer and a sleep in the kernel at GOMAXPROCS 2.
//
// With GOMAXPROCS above 1 an alarm sleeps the last precise before t in the
// kernel holding its P (sleepHoldingP), while fewer than GOMAXPROCS-1 other
// alarms of this clock do: at short intervals the scheduler then never
// parks, and nothing wakes a second thread to run it (at 1000/s: 84–109
// against 128–161 µs of CPU per message waiting in the poller). One P at
// least stays free for the rest of the process, whatever the number of
// pipelines: the pipelines of one process share one MachineClock. The zero
// value is ready to use.
type MachineClock struct {
	holding atomic.Int32 // alarms sleeping holding their P now, and those asking to
}

// Now returns time.Now().
func (*MachineClock) Now() time.Time { return time.Now() }

// NewTimer returns a time.Timer as a Timer.
func (*MachineClock) NewTimer(d time.Duration) Timer { return stdTimer{time.NewTimer(d)} }

// NewAlarm returns an alarm that waits in the network poller (see
// MachineClock).
func (c *MachineClock) NewAlarm() Alarm { return &machineAlarm{clock: c, ring: make(chan struct{}, 1)} }

// holdUntil sleeps until t holding the P, and reports false, having slept
// nothing, when procs-1 (GOMAXPROCS-1) other alarms of c already hold
// theirs. It yields first: the attempt the scheduler just handed over then
// writes its request on this P now instead of waiting for another to steal
// it.
func (c *MachineClock) holdUntil(t time.Time, procs int) bool {
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

// machineAlarm is a MachineClock's alarm. It waits on a timerfd where the
// system has one (opened by the first Wait), else on a Go timer.
type machineAlarm struct {
	clock *MachineClock
	rung  atomic.Bool   // a Ring not yet answered
	ring  chan struct{} // the Go timer's wait watches it
	fd    atomic.Pointer[timerfd]
	noFd  bool // opening a timerfd failed: Go timers only (the waiter's own)
}

func (a *machineAlarm) Wait(t time.Time) bool {
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
func (a *machineAlarm) waitUntil(t time.Time) bool {
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
func (a *machineAlarm) waitTimer(d time.Duration) {
	timer := time.NewTimer(d)
	select {
	case <-timer.C:
	case <-a.ring:
		timer.Stop()
	}
}

// timerfd returns the alarm's timerfd, opening it the first time; nil
// where the system has none.
func (a *machineAlarm) timerfd() *timerfd {
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

func (a *machineAlarm) Ring() {
	a.rung.Store(true)
	signal(a.ring)
	if f := a.fd.Load(); f != nil {
		_ = f.ring() // closed meanwhile: nobody waits on it
	}
}

func (a *machineAlarm) Close() {
	if f := a.fd.Swap(nil); f != nil {
		f.close()
	}
}

// stdTimer is a *time.Timer as a Timer.
type stdTimer struct{ t *time.Timer }

func (s stdTimer) C() <-chan time.Time { return s.t.C }
func (s stdTimer) Stop() bool          { return s.t.Stop() }
