//go:build linux && race

package tuning

import (
	"errors"
	"syscall"
)

// rawRead and rawWrite go through package syscall, which tells the race
// detector of them as the network's own reads and writes do (see
// raw_linux.go).
func rawRead(fd uintptr, b []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), b)
	return max(n, 0), errno(err)
}

func rawWrite(fd uintptr, b []byte) (int, syscall.Errno) {
	n, err := syscall.Write(int(fd), b)
	return max(n, 0), errno(err)
}

func errno(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}
