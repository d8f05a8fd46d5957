//go:build !linux

package tuning

import (
	"errors"
	"time"
)

// clockTuned is what the clock knob does here, for Report: outside Linux
// an Alarm has no timerfd and sleeps as the runtime does.
const clockTuned = "Go timers (no timerfd outside Linux)"

// sleepHoldingP sleeps d; outside Linux it is an ordinary sleep.
func sleepHoldingP(d time.Duration) { time.Sleep(d) }

// timerfd exists on Linux only: elsewhere alarms wait on Go timers.
type timerfd struct{}

func openTimerfd() (*timerfd, error)     { return nil, errors.ErrUnsupported }
func (*timerfd) arm(time.Duration) error { return errors.ErrUnsupported }
func (*timerfd) ring() error             { return errors.ErrUnsupported }
func (*timerfd) wait() error             { return errors.ErrUnsupported }
func (*timerfd) close()                  {}
