package main

import (
	"cmp"
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
// request, counts them and, when asked, records when each arrived. A
// throttling sink (startThrottlingSink) answers 429 to the requests its
// admission rule refuses instead, and records those apart.
type sink struct {
	URL    string
	srv    *http.Server
	wg     sync.WaitGroup
	count  atomic.Int64 // requests answered 204
	record bool
	// admit, when set, decides each request at its arrival: false is
	// answered 429 with Retry-After: retryAfter (1 when empty), and not
	// counted.
	admit      func(at time.Time) bool
	retryAfter string

	mu      sync.Mutex
	times   []time.Time // arrivals answered 204
	refused []time.Time // arrivals answered 429
}

// startSink starts a sink; with record it keeps every arrival time.
func startSink(record bool) (*sink, error) {
	return serveSink(&sink{record: record}, "127.0.0.1")
}

// startThrottlingSink starts a recording sink that answers 429 with
// Retry-After: 1 to every request admit refuses.
func startThrottlingSink(admit func(at time.Time) bool) (*sink, error) {
	return serveSink(&sink{record: true, admit: admit}, "127.0.0.1")
}

// serveSink serves s on ip (a loopback address: Linux routes all of
// 127.0.0.0/8 to lo) and a free port.
func serveSink(s *sink, ip string) (*sink, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return nil, err
	}
	s.URL = "http://" + ln.Addr().String() + "/callback"
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
	if s.admit != nil && !s.admit(at) {
		s.mu.Lock()
		s.refused = append(s.refused, at)
		s.mu.Unlock()
		w.Header().Set("Retry-After", cmp.Or(s.retryAfter, "1"))
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	if s.record {
		s.mu.Lock()
		s.times = append(s.times, at)
		s.mu.Unlock()
	}
	s.count.Add(1)
	w.WriteHeader(http.StatusNoContent)
}

// refusals returns the arrival times of the requests answered 429, in
// order.
func (s *sink) refusals() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]time.Time(nil), s.refused...)
	sortTimes(out)
	return out
}

// arrivals returns the recorded arrival times of the requests answered
// 204, in order.
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
