package main

import (
	"io"
	"net"
	"syscall"
	"unsafe"
)

// stampedConn is an accepted TCP connection whose reads carry the kernel's
// receive timestamp (SO_TIMESTAMPNS): the moment the request's bytes
// reached this host, before this process was scheduled to read them.
type stampedConn struct {
	*net.TCPConn
	raw  syscall.RawConn
	oob  [64]byte
	wire wireStamp
}

// stampAll turns receive timestamps on for what arrives at ln's port from
// now on; its connections inherit them from it. Set on each connection
// after accept, they would miss its first request, which may have arrived
// before.
func stampAll(ln net.Listener) error {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return nil
	}
	raw, err := tl.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	}); err != nil {
		return err
	}
	return serr
}

// stamped reads c with recvmsg, to have its receive timestamps.
func stamped(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &stampedConn{TCPConn: tc, raw: raw}
}

// Read reads as recvmsg does, and keeps the timestamp of the first read
// with data since the last take.
func (c *stampedConn) Read(b []byte) (int, error) {
	var n, oobn int
	var rerr error
	err := c.raw.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = syscall.Recvmsg(int(fd), b, c.oob[:], 0)
		return rerr != syscall.EAGAIN
	})
	switch {
	case err != nil:
		return 0, err
	case rerr != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: rerr}
	case n == 0 && len(b) > 0:
		return 0, io.EOF
	}
	c.wire.saw(timestampOf(c.oob[:oobn]))
	return n, nil
}

// timestampOf returns the SCM_TIMESTAMPNS in a recvmsg's control data, in
// Unix nanoseconds; 0 if there is none.
func timestampOf(oob []byte) int64 {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level == syscall.SOL_SOCKET && m.Header.Type == syscall.SO_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(syscall.Timespec{})) {
			ts := (*syscall.Timespec)(unsafe.Pointer(&m.Data[0]))
			return ts.Nano()
		}
	}
	return 0
}

// wireOf returns the wire stamp of c, nil for a connection served
// unstamped.
func wireOf(c net.Conn) *wireStamp {
	if s, ok := c.(*stampedConn); ok {
		return &s.wire
	}
	return nil
}
