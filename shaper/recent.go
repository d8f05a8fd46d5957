package shaper

import (
	"sync"
	"time"
)

// recentWindow is how far back recent counts, in whole seconds.
const recentWindow = 10

// recent counts the requests sent and the messages expired over the last
// recentWindow seconds, in one-second buckets, so that a pipeline can tell
// it is expiring everything and sending nothing (a rate too low for
// max_queue_time, a sink that holds every in-flight slot). recent is safe
// for concurrent use.
type recent struct {
	mu      sync.Mutex
	second  [recentWindow]int64 // the Unix second each bucket counts
	sent    [recentWindow]int64
	expired [recentWindow]int64
}

// bucketLocked returns the index of now's bucket, emptied if it last
// counted an older second. It requires that r.mu is held.
func (r *recent) bucketLocked(now time.Time) int {
	s := now.Unix()
	i := int(s % recentWindow)
	if r.second[i] != s {
		r.second[i], r.sent[i], r.expired[i] = s, 0, 0
	}
	return i
}

func (r *recent) addSent(now time.Time) {
	r.mu.Lock()
	r.sent[r.bucketLocked(now)]++
	r.mu.Unlock()
}

func (r *recent) addExpired(now time.Time) {
	r.mu.Lock()
	r.expired[r.bucketLocked(now)]++
	r.mu.Unlock()
}

// counts returns the requests sent and the messages expired in the
// recentWindow seconds up to now.
func (r *recent) counts(now time.Time) (sent, expired int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := now.Unix()
	for i := range recentWindow {
		if s-r.second[i] < recentWindow {
			sent += r.sent[i]
			expired += r.expired[i]
		}
	}
	return sent, expired
}
