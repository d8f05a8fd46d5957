package rawconn

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// Conn is a net.Conn whose Read and Write are raw system calls on its
// socket. Everything else is the wrapped connection's.
type Conn struct {
	net.Conn
	rc   syscall.RawConn
	r, w op
}

// op is one direction's call in progress: a RawConn takes a function of
// the file descriptor, and an op's is made once, so a call allocates
// nothing. mu keeps concurrent calls in one direction apart, as net.Conn
// allows them.
type op struct {
	mu  sync.Mutex
	b   []byte
	n   int
	err error
	fn  func(fd uintptr) bool
}

// Wrap returns c with raw reads and writes, or c itself when it has no
// file descriptor of its own (a pipe, a TLS connection: wrap what is
// under it).
func Wrap(c net.Conn) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	rw := &Conn{Conn: c, rc: rc}
	rw.r.fn = rw.read
	rw.w.fn = rw.write
	return rw
}

// Read reads as net.Conn's Read does: at least one byte, io.EOF when the
// peer has closed, or why not.
func (c *Conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	o := &c.r
	o.mu.Lock()
	defer o.mu.Unlock()
	o.b, o.n, o.err = b, 0, nil
	err := c.rc.Read(o.fn)
	if err == nil {
		err = o.err
	}
	n := o.n
	o.b, o.err = nil, nil
	if err != nil && err != io.EOF {
		err = &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	}
	return n, err
}

// read is the RawConn's: false when the socket has nothing to read yet
// (the poller then waits for it).
func (c *Conn) read(fd uintptr) bool {
	o := &c.r
	for {
		n, e := rawRead(fd, o.b)
		switch e {
		case 0:
			o.n = n
			if n == 0 {
				o.err = io.EOF
			}
			return true
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			o.err = os.NewSyscallError("read", e)
			return true
		}
	}
}

// Write writes all of b, or says why not, as net.Conn's Write does.
func (c *Conn) Write(b []byte) (int, error) {
	o := &c.w
	o.mu.Lock()
	defer o.mu.Unlock()
	o.b, o.n, o.err = b, 0, nil
	err := c.rc.Write(o.fn)
	if err == nil {
		err = o.err
	}
	n := o.n
	o.b, o.err = nil, nil
	if err != nil {
		err = &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	}
	return n, err
}

// write is the RawConn's: false when the socket is full (the poller then
// waits until it takes more).
func (c *Conn) write(fd uintptr) bool {
	o := &c.w
	for o.n < len(o.b) {
		n, e := rawWrite(fd, o.b[o.n:])
		switch e {
		case 0:
			o.n += n
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			o.err = os.NewSyscallError("write", e)
			return true
		}
	}
	return true
}
