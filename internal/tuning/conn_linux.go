package tuning

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// connTuned is what the conn knob does here, for Report.
const connTuned = "raw read(2) and write(2)"

// RawConn is a net.Conn whose Read and Write are raw system calls on its
// socket (see Wrap). Everything else is the wrapped connection's.
type RawConn struct {
	net.Conn
	r, w op
}

// op is one direction's call in progress: call is the RawConn's Read or
// Write and fn the function of the file descriptor it takes, both made
// once, so a call allocates nothing. mu keeps concurrent calls in one
// direction apart, as net.Conn allows them.
type op struct {
	mu   sync.Mutex
	call func(func(fd uintptr) bool) error
	fn   func(fd uintptr) bool
	b    []byte
	n    int
	err  error
}

// run makes o's call with b and returns how much of b fn got through and
// why it stopped short, if it did.
func (o *op) run(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.b, o.n, o.err = b, 0, nil
	err := o.call(o.fn)
	if err == nil {
		err = o.err
	}
	n := o.n
	o.b, o.err = nil, nil
	return n, err
}

// wrapRaw returns c with raw reads and writes, or c itself when it has no
// file descriptor of its own (a pipe, a TLS connection: wrap what is
// under it).
func wrapRaw(c net.Conn) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	rw := &RawConn{Conn: c}
	rw.r.call, rw.r.fn = rc.Read, rw.read
	rw.w.call, rw.w.fn = rc.Write, rw.write
	return rw
}

// Read reads as net.Conn's Read does: at least one byte, io.EOF when the
// peer has closed, or why not.
func (c *RawConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, err := c.r.run(b)
	if err != nil && err != io.EOF {
		err = &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	}
	return n, err
}

// read is the RawConn's: false when the socket has nothing to read yet
// (the poller then waits for it).
func (c *RawConn) read(fd uintptr) bool {
	o := &c.r
	for {
		n, e := rawRead(fd, o.b)
		if e == 0 {
			o.n = n
			if n == 0 {
				o.err = io.EOF
			}
			return true
		}
		if again, done := o.settle("read", e); !again {
			return done
		}
	}
}

// Write writes all of b, or says why not, as net.Conn's Write does.
func (c *RawConn) Write(b []byte) (int, error) {
	n, err := c.w.run(b)
	if err != nil {
		err = &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	}
	return n, err
}

// write is the RawConn's: false when the socket is full (the poller then
// waits until it takes more).
func (c *RawConn) write(fd uintptr) bool {
	o := &c.w
	for o.n < len(o.b) {
		n, e := rawWrite(fd, o.b[o.n:])
		if e == 0 {
			o.n += n
			continue
		}
		if again, done := o.settle("write", e); !again {
			return done
		}
	}
	return true
}

// settle is o's answer to the error e of its system call name: call again
// (EINTR); or stop, done with the error in o.err, or not done (EAGAIN: the
// poller waits for the socket).
func (o *op) settle(name string, e syscall.Errno) (again, done bool) {
	switch e {
	case syscall.EINTR:
		return true, false
	case syscall.EAGAIN:
		return false, false
	}
	o.err = os.NewSyscallError(name, e)
	return false, true
}
