// Package logtest keeps what a logger or a child process writes, for a test
// to read while the writer goes on.
package logtest

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is an io.Writer that a test may read while others write it. The
// zero value is an empty buffer ready for use. Buffer is safe for
// simultaneous use by multiple goroutines.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Count returns how many times s occurs in what was written.
func (b *Buffer) Count(s string) int {
	return strings.Count(b.String(), s)
}

// Tail returns the last n bytes written, marked with … when cut.
func (b *Buffer) Tail(n int) string {
	s := b.String()
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
