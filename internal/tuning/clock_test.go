package tuning

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// However many alarms of one Alarms sleep the last stretch before a
// departure at once, one P stays free: with GOMAXPROCS 2 and four
// goroutines waiting precise over and over for 400 ms, a goroutine that
// needs a P thirty times, a millisecond apart, finishes long before they
// stop. Were every alarm to hold its P, it would run only when the runtime
// preempted a sleeper, about every 10 ms, and finish after them.
func TestAlarmsSleepsLeaveAPFree(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	var c Alarms
	var stopped atomic.Bool
	var wg sync.WaitGroup
	end := time.Now().Add(400 * time.Millisecond)
	for range 4 {
		wg.Go(func() {
			a := c.NewAlarm()
			defer a.Close()
			for {
				now := time.Now()
				if !now.Before(end) {
					stopped.Store(true)
					return
				}
				a.Wait(now.Add(precise))
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

// An Alarms' alarm, at GOMAXPROCS 1 and 2: Wait ends at its time and
// not before, on Linux on a timerfd; a Ring during a Wait ends it at once
// with false, a Ring before a Wait cuts that Wait short, and a Ring answered
// once does not end a later Wait early; a Ring after Close is harmless.
func TestMachineAlarmWaitsUntilItsTimeOrARing(t *testing.T) {
	for _, procs := range []int{1, 2} {
		t.Run(map[int]string{1: "one P", 2: "two Ps"}[procs], func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			var c Alarms
			a := c.NewAlarm()
			defer a.Close()

			for _, d := range []time.Duration{500 * time.Microsecond, 5 * time.Millisecond, 30 * time.Millisecond} {
				at := time.Now().Add(d)
				if !a.Wait(at) {
					t.Fatalf("Wait(%v from now) = false with no Ring; want true", d)
				}
				if late := time.Since(at); late < 0 || late > time.Second {
					t.Errorf("Wait(%v from now) ended %v after its time; want at it or after, within 1s", d, late)
				}
			}
			if runtime.GOOS == "linux" && a.fd.Load() == nil {
				t.Error("on Linux the alarm waited without a timerfd")
			}

			start := time.Now()
			time.AfterFunc(20*time.Millisecond, a.Ring)
			if a.Wait(start.Add(10 * time.Second)) {
				t.Fatal("Wait with a Ring after 20ms = true; want false")
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("a Ring after 20ms ended a 10s Wait after %v", took)
			}

			a.Ring()
			start = time.Now()
			if a.Wait(start.Add(10 * time.Second)) {
				t.Fatal("Wait after a Ring = true; want false at once")
			}
			at := time.Now().Add(30 * time.Millisecond)
			if !a.Wait(at) || time.Now().Before(at) {
				t.Error("the Wait after an answered Ring ended early; want it to last until its time")
			}

			a.Close()
			a.Ring()
			if a.Wait(time.Now().Add(30 * time.Millisecond)) {
				t.Error("Wait after a Ring after Close = true; want false: the Ring is pending")
			}
		})
	}
}
