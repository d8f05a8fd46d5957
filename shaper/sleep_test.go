package shaper

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// However many sleeps of one MachineClock run at once, one P stays free:
// with GOMAXPROCS 2 and four goroutines sleeping the last stretch before a
// departure over and over for 400 ms, a goroutine that needs a P thirty
// times, a millisecond apart, finishes long before they stop. Were every
// sleep to hold its P, it would run only when the runtime preempted a
// sleeper, about every 10 ms, and finish after them.
func TestMachineClockSleepsLeaveAPFree(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	var c MachineClock
	var stopped atomic.Bool
	var wg sync.WaitGroup
	end := time.Now().Add(400 * time.Millisecond)
	for range 4 {
		wg.Go(func() {
			for {
				now := c.Now()
				if !now.Before(end) {
					stopped.Store(true)
					return
				}
				c.SleepUntil(now.Add(precise))
			}
		})
	}
	for range 30 {
		time.Sleep(time.Millisecond)
	}
	if stopped.Load() {
		t.Error("the sleepers stopped before a goroutine needing a P 30 times had finished; want one P free for it")
	}
	wg.Wait()
}
