//go:build !linux

package shaper

import "time"

// preciseSleep sleeps d; outside Linux it is an ordinary sleep.
func preciseSleep(d time.Duration) {
	time.Sleep(d)
}
