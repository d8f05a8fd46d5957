//go:build !linux

package shaper

import "time"

// sleepHoldingP sleeps d; outside Linux it is an ordinary sleep.
func sleepHoldingP(d time.Duration) { time.Sleep(d) }

// sleepInSyscall sleeps d; outside Linux it is an ordinary sleep.
func sleepInSyscall(d time.Duration) { time.Sleep(d) }
