//go:build !linux

package tuning

import "net"

// connTuned is what the conn knob does here, for Report: nothing outside
// Linux.
const connTuned = "net.Conn as dialled (raw reads and writes are Linux's only)"

// RawConn exists on Linux only.
type RawConn struct{ net.Conn }

// wrapRaw returns c: raw reads and writes are Linux's only.
func wrapRaw(c net.Conn) net.Conn { return c }
