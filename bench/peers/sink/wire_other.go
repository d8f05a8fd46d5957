//go:build !linux

package main

import "net"

// stampAll does nothing: receive timestamps are read on Linux only.
func stampAll(net.Listener) error { return nil }

// stamped serves c unstamped: receive timestamps are read on Linux only.
func stamped(c net.Conn) net.Conn { return c }

// wireOf returns nil: no connection is stamped here.
func wireOf(net.Conn) *wireStamp { return nil }
