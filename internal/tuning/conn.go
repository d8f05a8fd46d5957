package tuning

import "net"

// Wrap returns c with the conn knob applied: on Linux, when it is in k,
// a *RawConn, whose reads and writes are system calls the Go
// runtime is not told of; else c itself. The HTTP sink's own client and
// the NATS connections wrap what they dial.
//
// A read or write through net.Conn tells the runtime it enters a system
// call. When every goroutine was idle, that wakes sysmon, the runtime's
// monitor thread, which then polls every 20 µs until all is idle again;
// and while a goroutine is in such a call, sysmon may hand its P to
// another thread, so the goroutine would wait for a P again behind
// whatever runs. On a non-blocking socket read(2) and write(2) return at
// once (EAGAIN when they would block), so neither is needed: a RawConn
// reads and writes with raw system calls and parks in the network poller,
// as net.Conn does, when the socket has nothing to give or no room, until
// the connection's deadline. The Go runtime's own network poller works
// this way. What it saves at a paced rate is in docs/tuning.md.
func (k Knobs) Wrap(c net.Conn) net.Conn {
	if !k.Has(KnobConn) {
		return c
	}
	return wrapRaw(c)
}
