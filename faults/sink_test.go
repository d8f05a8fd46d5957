package faults_test

import (
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/sinktest"
)

// logPeak logs the requests in flight at the first moment more than limit
// were, to tell a real excess from a timing artefact.
func logPeak(t testing.TB, s *sinktest.Sink, timeout time.Duration, limit int) {
	reqs := s.Requests()
	now := time.Now()
	base := reqs[0].At
	for _, r := range reqs {
		n := 0
		var who []sinktest.Request
		for _, q := range reqs {
			end := q.ClientEnd(timeout, now)
			if !q.At.After(r.At) && end.After(r.At) {
				n++
				who = append(who, q)
			}
		}
		if n > limit {
			for _, q := range who {
				t.Logf("in flight: %s attempt %d at=%v end=%v gaveUp=%v status=%d", q.Key, q.Attempt, q.At.Sub(base), q.End.Sub(base), q.GaveUp, q.Status)
			}
			return
		}
	}
}
