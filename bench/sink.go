package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// sink is a real HTTP server on a loopback address (Linux routes all of
// 127.0.0.0/8 to lo) that answers 200 to every request and counts them,
// and the connections it accepts and the most it holds open at once. With
// record it keeps when each request arrived, and with keyed its body's
// key too: what comes before the first '-' ("A" of "A-17"). With admit, it answers 429 with
// Retry-After (1 when empty) to the requests admit refuses at their
// arrival instead, and records those apart.
type sink struct {
	URL        string
	srv        *http.Server
	wg         sync.WaitGroup
	record     bool
	keyed      bool
	admit      func(at time.Time) bool
	retryAfter string

	count, accepts, open, maxOpen atomic.Int64

	mu      sync.Mutex
	got     []arrival   // requests answered 200
	refused []time.Time // requests answered 429
}

// arrival is one request a recording sink answered 200.
type arrival struct {
	at  time.Time
	key string
}

// startSink starts a sink on 127.0.0.1; with record it keeps every
// arrival.
func startSink(record bool) (*sink, error) {
	return serveSink(&sink{record: record}, "127.0.0.1")
}

// serveSink serves s on ip and a free port.
func serveSink(s *sink, ip string) (*sink, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return nil, err
	}
	s.URL = "http://" + ln.Addr().String() + "/callback"
	// Idle longer than any run: a connection the client keeps is never
	// closed by the server.
	s.srv = &http.Server{Handler: s, ConnState: s.connState, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 10 * time.Minute}
	s.wg.Go(func() {
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			progress("sink %s: %v", ip, err)
		}
	})
	return s, nil
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The arrival is when the request line and headers have been read:
	// the moment the sink would start counting it against its contract.
	at := time.Now()
	var body []byte
	if s.keyed {
		body, _ = io.ReadAll(io.LimitReader(r.Body, 1<<10))
	}
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
		key, _, _ := strings.Cut(string(body), "-")
		s.mu.Lock()
		s.got = append(s.got, arrival{at: at, key: key})
		s.mu.Unlock()
	}
	s.count.Add(1)
	w.WriteHeader(http.StatusOK)
}

// connState keeps the connections the sink holds open and the most at
// once.
func (s *sink) connState(_ net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		s.accepts.Add(1)
		n := s.open.Add(1)
		for m := s.maxOpen.Load(); n > m && !s.maxOpen.CompareAndSwap(m, n); m = s.maxOpen.Load() {
		}
	case http.StateClosed, http.StateHijacked:
		s.open.Add(-1)
	}
}

// received returns the requests answered 200, in order of arrival
// (handlers run concurrently; appends may interleave).
func (s *sink) received() []arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.got)
	slices.SortStableFunc(out, func(a, b arrival) int { return a.at.Compare(b.at) })
	return out
}

// arrivals returns when the requests answered 200 arrived, in order.
func (s *sink) arrivals() []time.Time {
	var out []time.Time
	for _, a := range s.received() {
		out = append(out, a.at)
	}
	return out
}

// refusals returns when the requests answered 429 arrived, in order.
func (s *sink) refusals() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.refused)
	sortTimes(out)
	return out
}

// keyCount is how many requests of key the sink has answered 200.
func (s *sink) keyCount(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, a := range s.got {
		if a.key == key {
			n++
		}
	}
	return n
}

// reached reports whether the sink has answered n requests 200.
func (s *sink) reached(n int64) func() bool {
	return func() bool { return s.count.Load() >= n }
}

func (s *sink) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx) // bounded; a slow client is not our problem here
	s.wg.Wait()
}

// fleet is sinks on distinct loopback addresses, one per host a message
// may name.
type fleet []*sink

// maxFleet is how many hosts hostIP can name: 127.0.1.1 to 127.0.254.250.
const maxFleet = 254 * 250

// hostIP is the loopback address of host i: 127.0.1.1, ..., 127.0.1.250,
// 127.0.2.1, ... (no .0 or .255, nor 127.0.0.x, where other servers of the
// harness listen).
func hostIP(i int) string {
	return fmt.Sprintf("127.0.%d.%d", 1+i/250, 1+i%250)
}

func startFleet(n int) (fleet, error) {
	if n < 1 || n > maxFleet {
		return nil, fmt.Errorf("host fleet: want 1 to %d hosts, got %d", maxFleet, n)
	}
	var f fleet
	for i := range n {
		s, err := serveSink(&sink{}, hostIP(i))
		if err != nil {
			f.close()
			return nil, fmt.Errorf("host fleet: %w", err)
		}
		f = append(f, s)
	}
	return f, nil
}

// urls returns the URL of each host, in order.
func (f fleet) urls() []string {
	out := make([]string, len(f))
	for i, s := range f {
		out[i] = s.URL
	}
	return out
}

// fleetCounts is what a fleet's servers counted.
type fleetCounts struct {
	requests, connections, maxConnections, maxOpen int64
	reached                                        int
}

func (f fleet) counts() fleetCounts {
	var c fleetCounts
	for _, s := range f {
		r, a := s.count.Load(), s.accepts.Load()
		c.requests += r
		c.connections += a
		c.maxConnections = max(c.maxConnections, a)
		c.maxOpen = max(c.maxOpen, s.maxOpen.Load())
		if r > 0 {
			c.reached++
		}
	}
	return c
}

// requests is every request the fleet answered.
func (f fleet) requests() int64 { return f.counts().requests }

func (f fleet) close() {
	for _, s := range f {
		s.close()
	}
}
