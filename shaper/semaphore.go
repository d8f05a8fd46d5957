package shaper

import (
	"context"
	"sync"
)

// semaphore bounds the attempts in flight; unlike a buffered channel, its
// size can change while tokens are out (a reload of max_in_flight). Lowering
// it takes no token back: new acquisitions wait until enough are released.
type semaphore struct {
	mu    sync.Mutex
	size  int
	held  int
	freed chan struct{} // size one: a pending wake-up for the one acquirer
}

func newSemaphore(size int) *semaphore {
	return &semaphore{size: max(size, 1), freed: make(chan struct{}, 1)}
}

// acquire takes a token, waiting until one is free, and reports false if
// ctx ended first. It is meant for one goroutine (the scheduler).
func (s *semaphore) acquire(ctx context.Context) bool {
	for {
		s.mu.Lock()
		if s.held < s.size {
			s.held++
			s.mu.Unlock()
			return true
		}
		s.mu.Unlock()
		select {
		case <-s.freed:
		case <-ctx.Done():
			return false
		}
	}
}

func (s *semaphore) release() {
	s.mu.Lock()
	s.held--
	s.mu.Unlock()
	signal(s.freed)
}

func (s *semaphore) resize(size int) {
	s.mu.Lock()
	s.size = max(size, 1)
	s.mu.Unlock()
	signal(s.freed)
}
