package faults_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// action is what the recording sink does with one request.
type action struct {
	status     int           // the status to answer; 0 means 200
	retryAfter string        // a Retry-After header to send with it
	hang       bool          // answer nothing until the client gives up
	reset      bool          // write half a status line, then reset the connection (RST)
	drip       time.Duration // write the response one byte per drip (hijacked)
	delay      time.Duration // wait this long before answering
}

// rule picks the action for a request; attempt counts the requests with the
// same Idempotency-Key, this one included (1 for the first).
type rule func(r *http.Request, attempt int) action

// answerOK answers every request 200 at once.
func answerOK(*http.Request, int) action { return action{} }

// sinkReq is one request as the sink received it.
type sinkReq struct {
	at, end time.Time // arrival; when the handler was done (answered, or the client gave up)
	key     string    // Idempotency-Key
	method  string
	header  http.Header
	body    []byte
	attempt int
	status  int  // the status answered, 0 when none was (hang, reset, drip)
	gaveUp  bool // the client closed the connection before the answer was complete
}

// recSink is a real HTTP server on 127.0.0.1 that answers by a rule and
// records every request: headers, body, arrival, how many were in flight at
// once, and the raw bytes of every connection.
type recSink struct {
	t    testing.TB
	addr string
	url  string
	rule atomic.Pointer[rule]
	lean bool // keep neither bodies, headers nor raw bytes (a large backlog)

	srv      *http.Server
	done     chan struct{} // closed by close: hung handlers give up
	handlers sync.WaitGroup
	served   chan struct{}

	mu        sync.Mutex
	reqs      []*sinkReq
	attempts  map[string]int
	delivered map[string]int // answered 2xx, per key
	inFlight  int
	raw       []*bytes.Buffer // what each connection sent, in full
}

// newSink starts a recording sink on a free loopback port.
func newSink(t testing.TB, r rule) *recSink {
	t.Helper()
	return newSinkAt(t, "127.0.0.1:0", r)
}

// newLeanSink starts a sink that answers 200 and records no bodies,
// headers or raw bytes: for hundreds of thousands of requests.
func newLeanSink(t testing.TB) *recSink {
	t.Helper()
	return newSinkOn(t, "127.0.0.1:0", answerOK, true)
}

// newSinkAt starts a recording sink on addr; a port freed a moment ago
// (connection refused, then back) is taken again.
func newSinkAt(t testing.TB, addr string, r rule) *recSink {
	t.Helper()
	return newSinkOn(t, addr, r, false)
}

func newSinkOn(t testing.TB, addr string, r rule, lean bool) *recSink {
	t.Helper()
	var ln net.Listener
	var err error
	for range 100 { // the port may linger for a moment
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("sink: listen %s: %v", addr, err)
	}
	s := &recSink{
		t: t, addr: ln.Addr().String(), lean: lean, done: make(chan struct{}), served: make(chan struct{}),
		attempts: map[string]int{}, delivered: map[string]int{},
	}
	s.url = "http://" + s.addr + "/notify"
	s.setRule(r)
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(&rawListener{Listener: ln, s: s}) // ends with ErrServerClosed
	}()
	t.Cleanup(s.close)
	return s
}

func (s *recSink) setRule(r rule) { s.rule.Store(&r) }

// close stops the server, releasing hung handlers, and waits for them.
func (s *recSink) close() {
	select {
	case <-s.done:
		return
	default:
	}
	close(s.done)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.served
	s.handlers.Wait()
}

func (s *recSink) serve(w http.ResponseWriter, r *http.Request) {
	s.handlers.Add(1)
	defer s.handlers.Done()
	body, _ := io.ReadAll(r.Body) // all of it: net/http then watches the connection for the client leaving
	req := &sinkReq{at: time.Now(), key: r.Header.Get("Idempotency-Key"), method: r.Method}
	if !s.lean {
		req.header, req.body = r.Header.Clone(), body
	}
	s.mu.Lock()
	s.attempts[req.key]++
	req.attempt = s.attempts[req.key]
	s.reqs = append(s.reqs, req)
	s.inFlight++
	s.mu.Unlock()

	a := (*s.rule.Load())(r, req.attempt)
	status, gaveUp := s.act(w, r, a)

	s.mu.Lock()
	s.inFlight--
	req.end, req.status, req.gaveUp = time.Now(), status, gaveUp
	if status >= 200 && status <= 299 && !gaveUp {
		s.delivered[req.key]++
	}
	s.mu.Unlock()
}

// act carries out a, and returns the status answered (0 for none) and
// whether the client gave up first.
func (s *recSink) act(w http.ResponseWriter, r *http.Request, a action) (int, bool) {
	if a.delay > 0 {
		select {
		case <-time.After(a.delay):
		case <-r.Context().Done():
			return 0, true
		case <-s.done:
			return 0, true
		}
	}
	switch {
	case a.hang:
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
		return 0, true
	case a.reset:
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return 0, true
		}
		_, _ = buf.WriteString("HTTP/1.1 200 O")
		_ = buf.Flush()
		if l, ok := conn.(interface{ SetLinger(int) error }); ok {
			_ = l.SetLinger(0) // close sends RST, not FIN
		}
		_ = conn.Close()
		return 0, false
	case a.drip > 0:
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return 0, true
		}
		defer conn.Close()
		resp := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nX-Drip: slowly-slowly-slowly\r\n\r\nok"
		for i := range len(resp) {
			select {
			case <-time.After(a.drip):
			case <-s.done:
				return 0, true
			}
			if _, err := conn.Write([]byte{resp[i]}); err != nil {
				return 0, true // the client gave up: its timeout fired
			}
		}
		return 200, false
	}
	status := a.status
	if status == 0 {
		status = http.StatusOK
	}
	if a.retryAfter != "" {
		w.Header().Set("Retry-After", a.retryAfter)
	}
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, "status %d\n", status)
	return status, r.Context().Err() != nil
}

// snapshot returns a copy of the requests received so far.
func (s *recSink) snapshot() []sinkReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]sinkReq, len(s.reqs))
	for i, r := range s.reqs {
		out[i] = *r
	}
	return out
}

// deliveredKeys returns the keys answered 2xx at least once, and how many
// 2xx answers there were in all.
func (s *recSink) deliveredKeys() (map[string]int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.delivered))
	total := 0
	for k, n := range s.delivered {
		out[k] = n
		total += n
	}
	return out, total
}

func (s *recSink) deliveredCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.delivered)
}

func (s *recSink) requestCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// peakInFlight returns the most requests in flight at once, as the client
// had them. A request the client gave up on ended, for the client, at its
// per-attempt timeout counted from when the attempt began, which is before
// the request arrived here: dialing a fresh connection (the client closes
// the one it gave up on) and writing the request take a few milliseconds
// on a loaded machine. The sink learns of the closed connection later
// still. So such a request counts here until arrival + timeout −
// dialAllowance; a request overlapping the others for longer than that
// would still show. Counting the sink's own view instead would blame
// shaper for the sink's slowness to notice a closed connection.
func (s *recSink) peakInFlight(timeout time.Duration) int {
	const dialAllowance = 25 * time.Millisecond
	type event struct {
		at    time.Time
		delta int
	}
	var evs []event
	now := time.Now()
	for _, r := range s.snapshot() {
		end := r.end
		if end.IsZero() {
			end = now // still in flight
		}
		if r.gaveUp && end.Sub(r.at) > timeout-dialAllowance {
			end = r.at.Add(timeout - dialAllowance)
		}
		evs = append(evs, event{r.at, 1}, event{end, -1})
	}
	slices.SortFunc(evs, func(a, b event) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // ends before starts at the same instant
	})
	cur, most := 0, 0
	for _, e := range evs {
		cur += e.delta
		most = max(most, cur)
	}
	return most
}

// rawConns returns what each connection sent, byte for byte.
func (s *recSink) rawConns() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]byte, len(s.raw))
	for i, b := range s.raw {
		out[i] = bytes.Clone(b.Bytes())
	}
	return out
}

// rawListener records the bytes every accepted connection sends.
type rawListener struct {
	net.Listener
	s *recSink
}

func (l *rawListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if l.s.lean {
		return c, nil
	}
	buf := &bytes.Buffer{}
	l.s.mu.Lock()
	l.s.raw = append(l.s.raw, buf)
	l.s.mu.Unlock()
	return &rawConn{Conn: c, buf: buf, mu: &l.s.mu}, nil
}

type rawConn struct {
	net.Conn
	buf *bytes.Buffer
	mu  *sync.Mutex
}

func (c *rawConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.buf.Write(p[:n])
		c.mu.Unlock()
	}
	return n, err
}

// SetLinger reaches the TCP connection under the wrapper that net/http
// hijacks, so a reset can be a real RST.
func (c *rawConn) SetLinger(sec int) error {
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		return tc.SetLinger(sec)
	}
	return errors.New("not a TCP connection")
}

// maxInWindow returns the most arrivals in any window of length w.
func maxInWindow(times []time.Time, w time.Duration) int {
	ts := slices.Clone(times)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	most, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= w {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

func arrivals(reqs []sinkReq) []time.Time {
	out := make([]time.Time, len(reqs))
	for i, r := range reqs {
		out[i] = r.at
	}
	return out
}

// hanging returns how many requests the sink holds unanswered right now.
func (s *recSink) hanging() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight
}

// between returns the requests that arrived in [from, to).
func (s *recSink) between(from, to time.Time) []sinkReq {
	var out []sinkReq
	for _, r := range s.snapshot() {
		if !r.at.Before(from) && r.at.Before(to) {
			out = append(out, r)
		}
	}
	return out
}

// logPeak logs the requests in flight at the first moment more than limit
// were, to tell a real excess from a timing artefact.
func logPeak(t testing.TB, s *recSink, timeout time.Duration, limit int) {
	const dialAllowance = 25 * time.Millisecond
	reqs := s.snapshot()
	base := reqs[0].at
	for _, r := range reqs {
		n := 0
		var who []sinkReq
		for _, q := range reqs {
			end := q.end
			if q.gaveUp && end.Sub(q.at) > timeout-dialAllowance {
				end = q.at.Add(timeout - dialAllowance)
			}
			if !q.at.After(r.at) && end.After(r.at) {
				n++
				who = append(who, q)
			}
		}
		if n > limit {
			for _, q := range who {
				t.Logf("in flight: %s attempt %d at=%v end=%v gaveUp=%v status=%d", q.key, q.attempt, q.at.Sub(base), q.end.Sub(base), q.gaveUp, q.status)
			}
			return
		}
	}
}
