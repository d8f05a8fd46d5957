// Package quota is a sink's quota as partner APIs state it: at most n
// requests in any sliding second. The push-back tests (through
// internal/sinktest's Admitting) and the bench harness's push-back sink
// admit requests by it; it imports nothing of the project and no test
// support, so the bench binary may link it.
package quota

import (
	"sync"
	"time"
)

// Window counts the requests admitted within the last second. The zero
// Window is empty; it is safe for concurrent use.
type Window struct {
	mu       sync.Mutex
	admitted []time.Time
}

// Admit reports whether a request arriving at now is admitted under a
// quota of n per second, and counts it if so.
func (w *Window) Admit(now time.Time, n int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.admitted) > 0 && now.Sub(w.admitted[0]) >= time.Second {
		w.admitted = w.admitted[1:]
	}
	if len(w.admitted) >= n {
		return false
	}
	w.admitted = append(w.admitted, now)
	return true
}
