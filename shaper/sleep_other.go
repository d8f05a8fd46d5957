//go:build !linux

package shaper

import "time"

// preciseSleeper sleeps the last stretch before a departure; outside Linux
// it is an ordinary sleep.
type preciseSleeper struct{}

func newPreciseSleeper() *preciseSleeper { return &preciseSleeper{} }

func (*preciseSleeper) sleep(d time.Duration) { time.Sleep(d) }

func (*preciseSleeper) close() {}
