//go:build linux && !race

package tuning

import (
	"syscall"
	"unsafe"
)

// rawRead and rawWrite are read(2) and write(2) without telling the Go
// runtime. The race detector sees a read or write through package syscall
// as a synchronization, and none through RawSyscall: a -race build goes
// through package syscall instead (raw_race.go).
func rawRead(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

func rawWrite(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}
