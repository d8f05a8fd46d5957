// Package sinktest runs a recording HTTP sink on 127.0.0.1 for tests: it
// answers each request by a rule (a status, a Retry-After, a hang, a reset,
// a slow drip, a delay) and records every request, how many were in flight at
// once, and the raw bytes of every connection.
package sinktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/quota"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/internal/window"
)

// Action is what the recording sink does with one request.
type Action struct {
	Status     int           // the status to answer; 0 means 200
	RetryAfter string        // a Retry-After header to send with it
	Body       string        // the body to answer; "" is "status N\n"
	Hang       bool          // answer nothing until the client gives up
	Reset      bool          // write half a status line, then reset the connection (RST)
	Drip       time.Duration // write the response one byte per drip (hijacked)
	Delay      time.Duration // wait this long before answering
}

// Rule picks the Action for a request; attempt counts the requests with the
// same Idempotency-Key, this one included (1 for the first).
type Rule func(r *http.Request, attempt int) Action

// OK answers every request 200 at once.
func OK(*http.Request, int) Action { return Action{} }

// RefusingSome answers 503 to the first attempt of about a fifth of the
// messages, the same ones on every run (by the CRC-32 of their
// Idempotency-Key), and 200 to every other request: some messages are
// retried, in an order a test can reproduce.
func RefusingSome(r *http.Request, attempt int) Action {
	if attempt == 1 && crc32.ChecksumIEEE([]byte(r.Header.Get("Idempotency-Key")))%5 == 0 {
		return Action{Status: http.StatusServiceUnavailable}
	}
	return Action{}
}

// Admitting returns a rule that admits admits() requests in any one second
// and answers 429 with Retry-After: 1 above it, as a partner API with a
// quota does (package quota). admits is read at every request, so the
// quota may change.
func Admitting(admits func() int) Rule {
	var w quota.Window
	return func(*http.Request, int) Action {
		if !w.Admit(time.Now(), admits()) {
			return Action{Status: http.StatusTooManyRequests, RetryAfter: "1"}
		}
		return Action{}
	}
}

// Quota is a constant quota for Admitting.
func Quota(n int) func() int { return func() int { return n } }

// Request is one request as the sink received it.
type Request struct {
	At, End time.Time // arrival; when the handler was done (answered, or the client gave up)
	Key     string    // Idempotency-Key
	Method  string
	URI     string      // the request target as sent: absolute (http://host:port/path) through a proxy
	Header  http.Header // nil from a lean sink
	Body    []byte      // nil from a lean sink
	Attempt int
	Status  int  // the status answered, 0 when none was (hang, reset, drip)
	GaveUp  bool // the client closed the connection before the answer was complete
}

// Sink is a real HTTP server on 127.0.0.1 that answers by a rule and
// records every request: headers, body, arrival, how many were in flight at
// once, and the raw bytes of every connection.
type Sink struct {
	// Addr is the sink's host:port; URL is http://Addr/notify.
	Addr, URL string

	rule atomic.Pointer[Rule]
	lean bool // keep neither bodies, headers nor raw bytes (a large backlog)

	srv      *http.Server
	done     chan struct{} // closed by Close: hung handlers give up
	handlers sync.WaitGroup
	served   chan struct{}

	mu        sync.Mutex
	reqs      []*Request
	attempts  map[string]int
	delivered map[string]int // answered 2xx, per key
	inFlight  int
	raw       []*bytes.Buffer // what each connection sent, in full
}

// Start starts a recording sink on a free loopback port.
func Start(t testing.TB, r Rule) *Sink {
	t.Helper()
	return StartAt(t, "127.0.0.1:0", r)
}

// StartLean starts a sink that answers 200 and records no bodies,
// headers or raw bytes: for hundreds of thousands of requests.
func StartLean(t testing.TB) *Sink {
	t.Helper()
	return startOn(t, "127.0.0.1:0", OK, true)
}

// StartAt starts a recording sink on addr; a port freed a moment ago
// (connection refused, then back) is taken again.
func StartAt(t testing.TB, addr string, r Rule) *Sink {
	t.Helper()
	return startOn(t, addr, r, false)
}

func startOn(t testing.TB, addr string, r Rule, lean bool) *Sink {
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
	s := &Sink{
		Addr: ln.Addr().String(), lean: lean, done: make(chan struct{}), served: make(chan struct{}),
		attempts: map[string]int{}, delivered: map[string]int{},
	}
	s.URL = "http://" + s.Addr + "/notify"
	s.SetRule(r)
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(&rawListener{Listener: ln, s: s}) // ends with ErrServerClosed
	}()
	t.Cleanup(s.Close)
	return s
}

func (s *Sink) SetRule(r Rule) { s.rule.Store(&r) }

// Close stops the server, releasing hung handlers, and waits for them.
func (s *Sink) Close() {
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

func (s *Sink) serve(w http.ResponseWriter, r *http.Request) {
	s.handlers.Add(1)
	defer s.handlers.Done()
	body, _ := io.ReadAll(r.Body) // all of it: net/http then watches the connection for the client leaving
	req := &Request{At: time.Now(), Key: r.Header.Get("Idempotency-Key"), Method: r.Method, URI: r.RequestURI}
	if !s.lean {
		req.Header, req.Body = r.Header.Clone(), body
	}
	s.mu.Lock()
	s.attempts[req.Key]++
	req.Attempt = s.attempts[req.Key]
	s.reqs = append(s.reqs, req)
	s.inFlight++
	s.mu.Unlock()

	a := (*s.rule.Load())(r, req.Attempt)
	status, gaveUp := s.act(w, r, a)

	s.mu.Lock()
	s.inFlight--
	req.End, req.Status, req.GaveUp = time.Now(), status, gaveUp
	if status >= 200 && status <= 299 && !gaveUp {
		s.delivered[req.Key]++
	}
	s.mu.Unlock()
}

// act carries out a, and returns the status answered (0 for none) and
// whether the client gave up first.
func (s *Sink) act(w http.ResponseWriter, r *http.Request, a Action) (int, bool) {
	if a.Delay > 0 {
		select {
		case <-time.After(a.Delay):
		case <-r.Context().Done():
			return 0, true
		case <-s.done:
			return 0, true
		}
	}
	switch {
	case a.Hang:
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
		return 0, true
	case a.Reset:
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return 0, true
		}
		_, _ = buf.WriteString("HTTP/1.1 200 O")
		_ = buf.Flush()
		if l, ok := conn.(interface{ SetLinger(int) error }); ok {
			_ = l.SetLinger(0) // Close sends RST, not FIN
		}
		_ = conn.Close()
		return 0, false
	case a.Drip > 0:
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return 0, true
		}
		defer conn.Close()
		resp := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nX-Drip: slowly-slowly-slowly\r\n\r\nok"
		for i := range len(resp) {
			select {
			case <-time.After(a.Drip):
			case <-s.done:
				return 0, true
			}
			if _, err := conn.Write([]byte{resp[i]}); err != nil {
				return 0, true // the client gave up: its timeout fired
			}
		}
		return 200, false
	}
	status := a.Status
	if status == 0 {
		status = http.StatusOK
	}
	if a.RetryAfter != "" {
		w.Header().Set("Retry-After", a.RetryAfter)
	}
	w.WriteHeader(status)
	if a.Body != "" {
		_, _ = io.WriteString(w, a.Body)
	} else {
		_, _ = fmt.Fprintf(w, "status %d\n", status)
	}
	return status, r.Context().Err() != nil
}

// Requests returns a copy of the requests received so far.
func (s *Sink) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.reqs))
	for i, r := range s.reqs {
		out[i] = *r
	}
	return out
}

// Delivered returns the keys answered 2xx at least once, and how many
// 2xx answers there were in all.
func (s *Sink) Delivered() (map[string]int, int) {
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

func (s *Sink) DeliveredCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.delivered)
}

func (s *Sink) RequestCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// GaveUpAllowance is how much earlier than the sink saw it a request the
// client gave up on may have begun at the client. A client counts its
// per-attempt timeout from when the attempt began, which is before the
// request arrived here: dialing a fresh connection (the client closes the
// one it gave up on) and writing the request took up to 30 ms under -race
// on a loaded 2-core machine. The sink learns of the closed connection
// later still.
const GaveUpAllowance = 100 * time.Millisecond

// ClientEnd returns when the client ended r, as far as the sink can tell:
// when it answered, or, for a request the client gave up on, no later than
// arrival + timeout − GaveUpAllowance (but after half the timeout). A
// request overlapping the others for longer than that would still show;
// counting the sink's own view instead would blame the client for the
// sink's slowness to notice a closed connection. A request still in flight
// ends now.
func (r Request) ClientEnd(timeout time.Duration, now time.Time) time.Time {
	end := r.End
	if end.IsZero() {
		end = now
	}
	if r.GaveUp {
		latest := r.At.Add(max(timeout-GaveUpAllowance, timeout/2))
		if end.After(latest) {
			end = latest
		}
	}
	return end
}

// PeakInFlight returns the most requests in flight at once, as the client
// had them (see ClientEnd).
func (s *Sink) PeakInFlight(timeout time.Duration) int {
	type event struct {
		at    time.Time
		delta int
	}
	var evs []event
	now := time.Now()
	for _, r := range s.Requests() {
		end := r.ClientEnd(timeout, now)
		evs = append(evs, event{r.At, 1}, event{end, -1})
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

// RawConns returns what each connection sent, byte for byte.
func (s *Sink) RawConns() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cloneAll(s.raw)
}

// cloneAll returns a copy of the bytes of each buffer.
func cloneAll(bufs []*bytes.Buffer) [][]byte {
	out := make([][]byte, len(bufs))
	for i, b := range bufs {
		out[i] = bytes.Clone(b.Bytes())
	}
	return out
}

// rawListener records the bytes every accepted connection sends.
type rawListener struct {
	net.Listener
	s *Sink
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

// MaxInWindow returns the most arrivals in any window of length w.
func MaxInWindow(times []time.Time, w time.Duration) int {
	ts := slices.Clone(times)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	return window.Most(ts, w)
}

func Arrivals(reqs []Request) []time.Time {
	out := make([]time.Time, len(reqs))
	for i, r := range reqs {
		out[i] = r.At
	}
	return out
}

// Hanging returns how many requests the sink holds unanswered right now.
func (s *Sink) Hanging() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight
}

// Between returns the requests that arrived in [from, to).
func (s *Sink) Between(from, to time.Time) []Request {
	var out []Request
	for _, r := range s.Requests() {
		if !r.At.Before(from) && r.At.Before(to) {
			out = append(out, r)
		}
	}
	return out
}

// Counts returns how many Idempotency-Keys the sink has seen and how many
// requests, whatever it answered.
func (s *Sink) Counts() (keys, requests int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.attempts), len(s.reqs)
}

// Duplicates lists the keys that came more than once, as "key×n".
func (s *Sink) Duplicates() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, n := range s.attempts {
		if n > 1 {
			out = append(out, fmt.Sprintf("%s×%d", k, n))
		}
	}
	return out
}

// CheckNotHeldBack checks the promise that a flooding key holds back no
// other key. It waits up to 30s until the few messages of key (bodies
// "key-i") are answered 2xx, checks that the first of them came within 4s of
// the first request and the last within 3s of the first, then waits up to
// 60s until all total messages are delivered, and checks that none came
// twice. Before the checks it calls log (when not nil) with how long after
// the first request key's first came, and how long key's requests took from
// first to last, for the caller to log them with what it sees then.
func (s *Sink) CheckNotHeldBack(t testing.TB, key string, few, total int, log func(after, spread time.Duration)) {
	t.Helper()
	prefix := []byte(key + "-")
	testwait.For(t, 30*time.Second, "every "+key+" delivered", func() bool {
		n := 0
		for _, r := range s.Requests() {
			if bytes.HasPrefix(r.Body, prefix) && r.Status == 200 {
				n++
			}
		}
		return n == few
	})
	var first, firstKey, lastKey time.Time
	for _, r := range s.Requests() {
		if first.IsZero() || r.At.Before(first) {
			first = r.At
		}
		if bytes.HasPrefix(r.Body, prefix) {
			if firstKey.IsZero() || r.At.Before(firstKey) {
				firstKey = r.At
			}
			if r.At.After(lastKey) {
				lastKey = r.At
			}
		}
	}
	after, spread := firstKey.Sub(first), lastKey.Sub(firstKey)
	if log != nil {
		log(after, spread)
	}
	if after > 4*time.Second {
		t.Errorf("first %s %v after the first delivery; want within 4s", key, after)
	}
	if spread > 3*time.Second {
		t.Errorf("every %s within %v of the first %s; want within 3s", key, spread, key)
	}
	testwait.For(t, 60*time.Second, "every message delivered", func() bool { return s.DeliveredCount() == total })
	if dup := s.Duplicates(); len(dup) > 0 {
		t.Errorf("sent more than once: %v", dup)
	}
}

// LastHeader returns a header of the latest request ("" before the first,
// and from a lean sink).
func (s *Sink) LastHeader(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		return ""
	}
	return s.reqs[len(s.reqs)-1].Header.Get(name)
}
