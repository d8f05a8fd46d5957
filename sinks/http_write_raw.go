//go:build linux && !race

package sinks

import (
	"syscall"
	"unsafe"
)

// rawWrite is write(2) without telling the Go runtime (see rawWriter).
// The race detector sees a write through package syscall as a
// synchronization, and none through RawSyscall: a -race build writes
// through package syscall instead (http_write_race.go).
func rawWrite(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}
