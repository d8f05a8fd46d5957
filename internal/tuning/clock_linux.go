package tuning

import (
	"os"
	"syscall"
	"time"
	"unsafe"
)

// clockTuned is what the clock knob does here, for Report.
const clockTuned = "timerfd, the last 2ms slept holding the P"

// prSetTimerSlack is prctl's PR_SET_TIMERSLACK.
const prSetTimerSlack = 29

// sleepHoldingP sleeps d in the kernel without telling the Go runtime, so
// the goroutine keeps its P (and its thread) throughout: no other
// goroutine runs on that P meanwhile, and nothing is handed over. A sleep
// the runtime knows of costs more than the sleep itself at hundreds of
// departures a second: sysmon takes the P back from the sleeping thread,
// wakes another thread to run it, keeps polling every 20 µs while that goes
// on, and the sleeper must get a P again when it wakes. The thread's timer
// slack is set to 1 ns first (the default, 50 µs, is how late the kernel
// may wake it). A stop-the-world waits for the sleep to end, so an alarm
// keeps it to the last stretch before a departure.
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

// Flags of timerfd_create, and its clock.
const (
	tfdNonblock    = syscall.O_NONBLOCK
	tfdCloexec     = syscall.O_CLOEXEC
	clockMonotonic = 1
)

// itimerspec is the kernel's struct itimerspec.
type itimerspec struct {
	interval syscall.Timespec
	value    syscall.Timespec
}

// timerfd is a one-shot timer of the kernel's read through the network
// poller: a goroutine reading it parks there, and the poller wakes when it
// expires, to the nanosecond.
type timerfd struct {
	f    *os.File
	conn syscall.RawConn
	// The waiter's own: what arm sets, and the closures that do it and
	// read the expiry (made once: no allocation per wait).
	spec   itimerspec
	buf    [8]byte
	armFn  func(fd uintptr)
	readFn func(fd uintptr) bool
	// ringFn arms it to expire at once; any goroutine runs it.
	ringFn func(fd uintptr)
}

func openTimerfd() (*timerfd, error) {
	fd, _, e := syscall.RawSyscall(syscall.SYS_TIMERFD_CREATE, clockMonotonic, tfdNonblock|tfdCloexec, 0)
	if e != 0 {
		return nil, os.NewSyscallError("timerfd_create", e)
	}
	// Non-blocking, so os.NewFile registers it with the poller.
	f := os.NewFile(fd, "timerfd")
	conn, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	t := &timerfd{f: f, conn: conn}
	t.armFn = func(fd uintptr) { settime(fd, &t.spec) }
	t.readFn = func(fd uintptr) bool {
		_, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&t.buf[0])), uintptr(len(t.buf)))
		return e != syscall.EAGAIN
	}
	now := itimerspec{value: syscall.Timespec{Nsec: 1}}
	t.ringFn = func(fd uintptr) { settime(fd, &now) }
	return t, nil
}

// settime arms fd with spec, relative to now (which also clears a pending
// expiry). It cannot fail for a valid timerfd and a valid time.
func settime(fd uintptr, spec *itimerspec) {
	_, _, _ = syscall.RawSyscall6(syscall.SYS_TIMERFD_SETTIME, fd, 0, uintptr(unsafe.Pointer(spec)), 0, 0, 0)
}

// arm makes t expire after d. Only its waiter calls it.
func (t *timerfd) arm(d time.Duration) error {
	t.spec.value = syscall.NsecToTimespec(int64(d))
	return t.conn.Control(t.armFn)
}

// ring makes t expire at once.
func (t *timerfd) ring() error { return t.conn.Control(t.ringFn) }

// wait blocks until t expires: it reads the expiry, and parks in the
// poller while there is none.
func (t *timerfd) wait() error { return t.conn.Read(t.readFn) }

func (t *timerfd) close() { _ = t.f.Close() }
