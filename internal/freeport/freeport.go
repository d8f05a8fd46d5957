// Package freeport finds a free TCP port on 127.0.0.1 for a test server that
// must be started, stopped and started again on the same address.
package freeport

import (
	"net"
	"testing"
)

// Get returns a port on 127.0.0.1 that was free at the time of asking.
func Get(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("freeport: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Addr is Get as a host:port address.
func Addr(t testing.TB) string {
	t.Helper()
	return (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: Get(t)}).String()
}
