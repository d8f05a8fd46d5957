package shaper

import (
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// preciseSleeper sleeps the last stretch before a departure on a timerfd:
// a kernel high-resolution timer with no slack, read through an *os.File,
// so that the goroutine parks in the runtime's network poller and wakes
// within tens of microseconds of the deadline. No OS thread is blocked in
// a sleep meanwhile, so the runtime's monitor (sysmon) has no thread stuck
// in a system call to take its processor from, and stays idle: a thread
// locked in nanosleep before every departure kept it waking every 20 µs.
//
// One pipeline's scheduler uses it, one sleep at a time.
type preciseSleeper struct {
	fd   int
	file *os.File // nil: timerfd is not available; sleep in nanosleep
}

func newPreciseSleeper() *preciseSleeper {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return &preciseSleeper{fd: -1}
	}
	// A non-blocking descriptor: the runtime polls it instead of blocking
	// a thread on the read.
	return &preciseSleeper{fd: fd, file: os.NewFile(uintptr(fd), "shaper-timerfd")}
}

// sleep blocks the calling goroutine for d.
func (s *preciseSleeper) sleep(d time.Duration) {
	if d <= 0 {
		return
	}
	if s.file == nil {
		nanosleep(d)
		return
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(s.fd, 0, &spec, nil); err != nil {
		nanosleep(d)
		return
	}
	var expirations [8]byte
	_, _ = s.file.Read(expirations[:]) // fails only once closed: the pipeline is done
}

// close releases the timer.
func (s *preciseSleeper) close() {
	if s.file != nil {
		_ = s.file.Close()
	}
}

// nanosleep sleeps d in the kernel on this goroutine's own OS thread, with
// the thread's timer slack at 1ns instead of the default 50µs: the way
// when no timerfd can be made.
func nanosleep(d time.Duration) {
	if d <= 0 {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The slack only makes this thread's sleeps more exact; if prctl fails
	// the sleep is merely as coarse as the kernel's default.
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	ts := unix.NsecToTimespec(int64(d))
	// Interrupted by a signal, Nanosleep leaves the time remaining in ts.
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}
