package shaper

import (
	"context"
	"time"
)

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

// sleep waits d on clock, and reports whether d passed before ctx ended.
func sleep(ctx context.Context, clock Clock, d time.Duration) bool {
	timer := clock.NewTimer(d)
	select {
	case <-timer.C():
		return true
	case <-ctx.Done():
		timer.Stop()
		return false
	}
}

// Clock is the time a pipeline runs on: it reads the time, makes timers,
// and makes the alarm its scheduler waits on for each departure. Parts.Clock
// nil is the machine's clock on Go timers (a SystemClock); cmd/shaper passes
// package tuning's, and a test one on the fake time of testing/synctest,
// where the whole scheduler runs in milliseconds.
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
	// (false: rung). An alarm may sleep the last stretch before t
	// without watching for Ring; a Ring then cuts the next Wait short.
	Wait(t time.Time) bool
	// Ring cuts the Wait in progress short, or else the next one. Any
	// goroutine may call it, at any time, also after Close.
	Ring()
	// Close releases what the alarm holds. A Wait after Close still works.
	Close()
}

// SystemClock is the machine's clock on Go timers: an alarm waits on a
// time.Timer, which may wake up to a millisecond late. It is a pipeline's
// clock when Parts.Clock is nil; package tuning has one that waits to the
// nanosecond (docs/tuning.md). The zero value is ready to use.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer returns a time.Timer as a Timer.
func (SystemClock) NewTimer(d time.Duration) Timer { return stdTimer{time.NewTimer(d)} }

// NewAlarm returns an alarm that waits on a time.Timer of its own.
func (SystemClock) NewAlarm() Alarm {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &timerAlarm{timer: t, ring: make(chan struct{}, 1)}
}

// timerAlarm is a SystemClock's alarm: one timer, reset for each Wait, and
// a Ring pending in a channel of one.
type timerAlarm struct {
	timer *time.Timer // only the waiter uses it
	ring  chan struct{}
}

func (a *timerAlarm) Wait(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return true
	}
	a.timer.Reset(d) // since Go 1.23 no stale time is left in C
	select {
	case <-a.timer.C:
		return true
	case <-a.ring:
		a.timer.Stop()
		return false
	}
}

func (a *timerAlarm) Ring() { signal(a.ring) }

func (a *timerAlarm) Close() {}

// stdTimer is a *time.Timer as a Timer.
type stdTimer struct{ t *time.Timer }

func (s stdTimer) C() <-chan time.Time { return s.t.C }
func (s stdTimer) Stop() bool          { return s.t.Stop() }
