// Package rawconn wraps a TCP connection so that its reads and writes are
// system calls the Go runtime is not told of.
//
// A read or write through net.Conn tells the runtime it enters a system
// call. When every goroutine was idle, that wakes sysmon, the runtime's
// monitor thread, which then polls every 20 µs until all is idle again.
// At a paced 100 messages a second, where the daemon falls idle between
// any two, sysmon's thread switched 2.3 times a message and had 21% of
// the daemon's perf samples; with the HTTP sink's and the NATS source's
// connections wrapped, 0.05 times and 1.2% (bench/perf.sh), and the
// daemon's CPU per message a median of 312 against 361 µs over seven
// alternating rounds. And while a goroutine is in a system call the
// runtime knows of, sysmon may hand its P to another thread after 20 µs,
// so the pipeline's scheduler, which writes each request itself, would
// wait for a P again behind whatever runs. On a non-blocking socket read(2) and write(2) return at once
// (EAGAIN when they would block), so neither is needed: a Conn of this
// package reads and writes with raw system calls and parks in the
// network poller, as net.Conn does, when the socket has nothing to give
// or no room, until the connection's deadline.
//
// The Go runtime's own network poller works this way. The HTTP sink's own
// client and the NATS sources' connections use it; elsewhere than on
// Linux, Wrap returns the connection unchanged.
package rawconn
