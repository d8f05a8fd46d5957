package sinks

import (
	"net"
	"os"
	"syscall"
)

// rawWriter writes a request to its connection's socket without telling
// the Go runtime of the system call, so the goroutine keeps its P
// throughout. The pipeline's scheduler writes through it, holding a P for
// its next departure: a write the runtime knows of lets sysmon hand that P
// to another thread after 20 µs when goroutines wait on it, and the
// scheduler then waits for a P of its own again, behind whatever runs
// (at 5000/s from JetStream, in alternating rounds on a machine that
// stalled every process, rate errors of −2.2%, −1.2% and −0.26% against
// −4.1%, −1.8% and −0.20% with net.Conn's Write). A socket that cannot
// take the whole request now parks the writer in the network poller, as
// net.Conn's Write does, until the write deadline.
type rawWriter struct {
	nc net.Conn
	rc syscall.RawConn
	b  []byte // what is left to write
	// err is the write's error; fn is write, made once, so a request
	// costs no closure.
	err error
	fn  func(fd uintptr) bool
}

// newRawWriter returns the raw writer of nc, or nil when nc has no file
// descriptor of its own (a test's pipe): its Write is used then.
func newRawWriter(nc net.Conn) *rawWriter {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	w := &rawWriter{nc: nc, rc: rc}
	w.fn = w.write
	return w
}

// Write writes all of b, or returns why not, as net.Conn's Write would.
func (w *rawWriter) Write(b []byte) error {
	w.b, w.err = b, nil
	err := w.rc.Write(w.fn)
	if err == nil {
		err = w.err
	}
	w.b, w.err = nil, nil
	if err != nil {
		return &net.OpError{Op: "write", Net: "tcp", Source: w.nc.LocalAddr(), Addr: w.nc.RemoteAddr(), Err: err}
	}
	return nil
}

// write is the RawConn's: false when the socket is full (the poller then
// waits until it takes more).
func (w *rawWriter) write(fd uintptr) bool {
	for len(w.b) > 0 {
		n, e := rawWrite(fd, w.b)
		switch e {
		case 0:
			w.b = w.b[n:]
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			w.err = os.NewSyscallError("write", e)
			return true
		}
	}
	return true
}
