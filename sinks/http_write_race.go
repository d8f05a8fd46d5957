//go:build linux && race

package sinks

import (
	"errors"
	"syscall"
)

// rawWrite is write(2) through package syscall, which tells the race
// detector of it as the network's own writes do (see http_write_raw.go).
func rawWrite(fd uintptr, b []byte) (int, syscall.Errno) {
	n, err := syscall.Write(int(fd), b)
	var e syscall.Errno
	if errors.As(err, &e) {
		return max(n, 0), e
	}
	return max(n, 0), 0
}
