//go:build !linux

package sinks

import "net"

// rawWriter is Linux's only (http_write_linux.go); elsewhere a request is
// written by net.Conn's Write.
type rawWriter struct{}

func newRawWriter(net.Conn) *rawWriter { return nil }

func (*rawWriter) Write([]byte) error { return nil }
