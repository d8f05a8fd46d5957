//go:build !linux

package shaper

import (
	"errors"
	"time"
)

// sleepHoldingP sleeps d; outside Linux it is an ordinary sleep.
func sleepHoldingP(d time.Duration) { time.Sleep(d) }

// timerfd exists on Linux only: elsewhere alarms wait on Go timers.
type timerfd struct{}

func openTimerfd() (*timerfd, error)     { return nil, errors.ErrUnsupported }
func (*timerfd) arm(time.Duration) error { return errors.ErrUnsupported }
func (*timerfd) ring() error             { return errors.ErrUnsupported }
func (*timerfd) wait() error             { return errors.ErrUnsupported }
func (*timerfd) close()                  {}
