package shaper

import (
	"runtime"
	"syscall"
	"time"
)

// prSetTimerSlack is prctl's PR_SET_TIMERSLACK.
const prSetTimerSlack = 29

// preciseSleep sleeps d in the kernel on this goroutine's own OS thread,
// with the thread's timer slack at 1ns instead of the default 50µs, so it
// wakes within tens of microseconds of the deadline. It blocks one thread
// for at most precise; the runtime runs other goroutines on other threads.
func preciseSleep(d time.Duration) {
	if d <= 0 {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The slack only makes this thread's sleeps more exact; if prctl fails
	// the sleep is merely as coarse as the kernel's default.
	_, _, _ = syscall.Syscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0)
	ts := syscall.NsecToTimespec(int64(d))
	// Interrupted by a signal, Nanosleep leaves the time remaining in ts.
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
