package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// sink is a real HTTP server on 127.0.0.1 that answers 204 to every
// request, counts them and, when asked, records when each arrived.
type sink struct {
	URL    string
	srv    *http.Server
	wg     sync.WaitGroup
	count  atomic.Int64
	record bool

	mu    sync.Mutex
	times []time.Time
}

// startSink starts a sink; with record it keeps every arrival time.
func startSink(record bool) (*sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{URL: "http://" + ln.Addr().String() + "/callback", record: record}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	s.wg.Go(func() {
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			progress("sink: %v", err)
		}
	})
	return s, nil
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The arrival is when the request line and headers have been read:
	// the moment the sink would start counting it against its contract.
	at := time.Now()
	_, _ = io.Copy(io.Discard, r.Body)
	if s.record {
		s.mu.Lock()
		s.times = append(s.times, at)
		s.mu.Unlock()
	}
	s.count.Add(1)
	w.WriteHeader(http.StatusNoContent)
}

// arrivals returns the recorded arrival times, in order.
func (s *sink) arrivals() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]time.Time(nil), s.times...)
	sortTimes(out) // handlers run concurrently; appends may interleave
	return out
}

func (s *sink) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx) // bounded; a slow client is not our problem here
	s.wg.Wait()
}

// waitCount waits until the sink has counted n requests, and reports
// whether it did within timeout.
func (s *sink) waitCount(ctx context.Context, n int64, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for s.count.Load() < n {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
