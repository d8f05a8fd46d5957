package shaper

import (
	"runtime"
	"syscall"
	"time"
	"unsafe"
)

// prSetTimerSlack is prctl's PR_SET_TIMERSLACK.
const prSetTimerSlack = 29

// sleepHoldingP sleeps d in the kernel without telling the Go runtime, so
// the goroutine keeps its P (and its thread) throughout: no other
// goroutine runs on that P meanwhile, and nothing is handed over. A sleep
// the runtime knows of (sleepInSyscall) costs more than the sleep itself
// at hundreds of departures a second: sysmon takes the P back from the
// sleeping thread, wakes another thread to run it, keeps polling every 20
// µs while that goes on, and the sleeper must get a P again when it wakes
// (measured at 1000/s JetStream: 112 against 160 µs of CPU per message).
// The thread's timer slack is set to 1 ns first (the default, 50 µs, is
// how late the kernel may wake it). A stop-the-world waits for the sleep to
// end, so SleepUntil keeps it to the last stretch before a departure.
func sleepHoldingP(d time.Duration) {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0)
	ts := syscall.NsecToTimespec(int64(d))
	p := uintptr(unsafe.Pointer(&ts))
	// Interrupted by a signal (a preemption request), nanosleep leaves the
	// time remaining in ts.
	for {
		if _, _, e := syscall.RawSyscall(syscall.SYS_NANOSLEEP, p, p, 0); e != syscall.EINTR {
			return
		}
	}
}

// sleepInSyscall sleeps d in the kernel as a system call the runtime knows
// of, on this goroutine's own OS thread with the timer slack at 1 ns: the P
// is free for other goroutines meanwhile.
func sleepInSyscall(d time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The slack only makes this thread's sleeps more exact; if prctl fails
	// the sleep is merely as coarse as the kernel's default.
	_, _, _ = syscall.Syscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0)
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
