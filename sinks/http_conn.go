// This file is the HTTP sink's own HTTP/1.1 client, for a fixed http://
// URL without a proxy: a pool of kept-alive connections, each with a
// reader goroutine parked on it. The goroutine that sends a request writes
// it to the connection itself (the pipeline's scheduler, through Start, or
// a worker, through Send); the connection's reader reads the answer,
// judges it as the net/http path does (httpSink.judge) and hands it to the
// attempt's done. A request so leaves at its slot, with no hand-off to a
// worker and none to net/http's writer and reader goroutines: at 1000/s
// from JetStream the daemon spent 15% less CPU per message than with
// net/http in alternating rounds (143–156 against 162–187 µs), and at
// 5000/s the requests stopped bunching on their way out (502 in any 100 ms
// against 505–507; see docs/tuning.md and docs/benchmarks.md).
//
// The requests are byte for byte those net/http would send: built by
// newRequest, written by http.Request.Write, with the Accept-Encoding: gzip
// the Transport adds where it adds it (and a gzip-encoded error body read
// decompressed). Each request is written at most once; a connection lost
// before its answer is errResend, as with withSentOnce. https://, proxies
// and url_from stay on net/http's Transport.

package sinks

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/shaper-dev/shaper/internal/tuning"
	"github.com/shaper-dev/shaper/shaper"
)

// startMaxBody is the largest payload Start writes: a request this small
// fits the socket buffer of an idle connection, whose last request the
// server has answered, so writing it does not wait for the receiver. A
// larger one goes through Send, on the pipeline's worker.
const startMaxBody = 8 << 10

// acceptGzip is the header net/http's Transport adds to a request unless
// it has an Accept-Encoding or a Range, or is a HEAD.
const acceptGzip = "Accept-Encoding: gzip\r\n"

// connPool holds the kept-alive connections to one host:port.
type connPool struct {
	addr string
	dial dialFunc
	// slots holds a token for each connection open or being dialled, so
	// there are never more than its capacity (max_in_flight_per_host).
	slots chan struct{}
	// idle holds the connections ready for a request, each with its
	// reader waiting on it; as large as slots, so a put never blocks.
	idle chan *conn

	mu      sync.Mutex // guards closed and conns
	closed  bool       // retired or closed: no connection goes back to idle
	conns   map[*conn]struct{}
	readers sync.WaitGroup
}

func newConnPool(addr string, size int, dial dialFunc) *connPool {
	return &connPool{addr: addr, dial: dial, slots: make(chan struct{}, size), idle: make(chan *conn, size), conns: map[*conn]struct{}{}}
}

// conn is one connection of a pool and the exchange on it.
type conn struct {
	pool *connPool
	nc   net.Conn
	br   *bufio.Reader
	buf  bytes.Buffer // the request being written
	wmu  sync.Mutex   // held by the writer of a request from its first byte to its last

	mu   sync.Mutex // guards cur and dead, and the fields of cur its writer sets
	cur  *exchange  // the request on it, from its claim until its answer
	dead bool       // closed, or about to be: never claimed again
}

// exchange is one request and where its answer goes.
type exchange struct {
	h        *httpSink
	ctx      context.Context
	deadline time.Time
	done     func(error)

	// Set by the writer, under conn.mu, before the request is written.
	req      *http.Request
	sig      string
	gzip     bool        // the request asked for gzip: a gzip error body is read decompressed
	stop     func() bool // stops the AfterFunc that ends the exchange with ctx
	writeErr error       // the write failed; the reader answers with it
	answered bool
	graced   bool // the reader looked once more past the deadline (read)
}

// claim makes c carry x, and sets x's deadline on it; false when c is dead.
func (c *conn) claim(x *exchange) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return false
	}
	c.cur = x
	_ = c.nc.SetDeadline(x.deadline)
	return true
}

// take returns an idle connection claimed for x, or nil when none is idle.
func (p *connPool) take(x *exchange) *conn {
	for {
		select {
		case c := <-p.idle:
			if c.claim(x) {
				return c
			}
		default:
			return nil
		}
	}
}

// get returns a connection claimed for x: an idle one, or a new one when
// the pool has room, waiting for either until ctx ends.
func (p *connPool) get(ctx context.Context, x *exchange) (*conn, error) {
	if c := p.take(x); c != nil {
		return c, nil
	}
	for {
		select {
		case c := <-p.idle:
			if c.claim(x) {
				return c, nil
			}
		case p.slots <- struct{}{}:
			return p.open(ctx, x)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// open dials a new connection for x, which holds the slot get took, and
// starts its reader.
func (p *connPool) open(ctx context.Context, x *exchange) (*conn, error) {
	nc, err := p.dial(ctx, "tcp", p.addr)
	if err != nil {
		<-p.slots
		return nil, err
	}
	// With the conn knob on, the scheduler writes on it holding its P,
	// and an answer after an idle spell is read without waking sysmon
	// (tuning.Wrap).
	nc = tuning.Wrap(nc)
	c := &conn{pool: p, nc: nc, br: bufio.NewReader(nc)}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = nc.Close()
		<-p.slots
		return nil, errors.New("sink closed")
	}
	p.conns[c] = struct{}{}
	p.readers.Add(1)
	p.mu.Unlock()
	c.claim(x)
	go c.read()
	return c, nil
}

// put makes c idle again; when the pool no longer keeps connections it
// closes c instead and reports false.
func (p *connPool) put(c *conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.kill()
		return false
	}
	// A connection idle for idleConnTimeout is closed by its reader, as
	// net/http's Transport closes it.
	_ = c.nc.SetDeadline(time.Now().Add(idleConnTimeout))
	select {
	case p.idle <- c:
		return true
	default: // not reached: idle is as large as slots
		c.kill()
		return false
	}
}

// retire keeps no more connections: the idle ones close now, the busy ones
// once answered.
func (p *connPool) retire() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	for {
		select {
		case c := <-p.idle:
			c.kill()
		default:
			return
		}
	}
}

// close retires the pool and waits for its readers until ctx ends, then
// closes the connections still busy and waits for their readers.
func (p *connPool) close(ctx context.Context) {
	p.retire()
	done := make(chan struct{})
	go func() {
		p.readers.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	p.mu.Lock()
	for c := range p.conns {
		_ = c.nc.Close()
	}
	p.mu.Unlock()
	<-done
}

// kill closes an idle connection; its reader finds it closed and ends.
func (c *conn) kill() {
	c.mu.Lock()
	c.dead = true
	c.mu.Unlock()
	_ = c.nc.Close()
}

// write writes the request of x, claimed on c, and arranges for ctx to end
// the exchange. A failed write closes c: its reader then answers x.
func (c *conn) write(x *exchange, req *http.Request, sig string, gzip bool) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	x.req, x.sig, x.gzip = req, sig, gzip
	if !x.answered && x.ctx.Done() != nil {
		// A deadline long past ends the read or write in progress at once.
		x.stop = context.AfterFunc(x.ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	}
	c.mu.Unlock()
	c.buf.Reset()
	_ = req.Write(&c.buf) // to memory, from a bytes.Reader: it cannot fail
	b := c.buf.Bytes()
	if gzip {
		// Last of the headers, as the Transport writes its own.
		end, n := bytes.Index(b, []byte("\r\n\r\n"))+2, len(b)
		b = append(b, acceptGzip...)
		copy(b[end+len(acceptGzip):], b[end:n])
		copy(b[end:], acceptGzip)
	}
	if c.buf.Cap() > 4*startMaxBody {
		c.buf = bytes.Buffer{} // a large request's buffer is not kept
	}
	// The reader may be reading the answer already: what it reads is
	// touched under c.mu only.
	if _, err := c.nc.Write(b); err != nil {
		c.mu.Lock()
		if c.cur == x { // not answered yet (a server may answer early)
			x.writeErr = err
			_ = c.nc.Close()
		}
		c.mu.Unlock()
	}
}

// read is c's reader: it waits for the answer of each request on c and
// hands it to the request's done, until c dies. It owns c's end: the
// slot, the pool's record of it.
func (c *conn) read() {
	p := c.pool
	defer func() {
		_ = c.nc.Close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		<-p.slots
		p.readers.Done()
	}()
	for {
		_, err := c.br.Peek(1)
		c.mu.Lock()
		x := c.cur
		if err != nil && x != nil && x.writeErr == nil && isTimeout(err) && x.ctx.Err() == nil {
			if time.Now().Before(x.deadline) {
				// The idle deadline passed as c was claimed; the
				// claim set the request's own.
				c.mu.Unlock()
				continue
			}
			if !x.graced {
				// The reader hands the previous answer to its done
				// after c is idle again, and done may take long (an
				// ack, a dead letter): the answer to x may be here
				// already, unread. A look of a millisecond tells.
				x.graced = true
				_ = c.nc.SetReadDeadline(time.Now().Add(time.Millisecond))
				c.mu.Unlock()
				continue
			}
		}
		if err != nil || x == nil {
			// Closed, timed out or reset; or an answer to no request
			// (a 408 a server sends on an idle connection).
			c.dead, c.cur = true, nil
			var answer error
			if x != nil {
				x.end() // the connection is dead anyway
				answer = x.failure(err)
			}
			c.mu.Unlock()
			if x != nil {
				x.done(answer)
			}
			return
		}
		c.mu.Unlock()

		answer, keep := c.answer(x)
		// A server may answer before it has read the whole request: the
		// writer may still be writing. Wait for it to let go.
		c.wmu.Lock()
		c.mu.Lock()
		keep = x.end() && keep && x.writeErr == nil
		if !keep {
			c.dead = true
		}
		c.cur = nil
		c.mu.Unlock()
		c.wmu.Unlock()
		keep = keep && p.put(c)
		x.done(answer)
		if !keep {
			return
		}
	}
}

// end marks x answered and stops the AfterFunc of its ctx; false when that
// has run or is running, which spoils its connection's deadline. The
// caller holds the connection's lock.
func (x *exchange) end() bool {
	x.answered = true
	return x.stop == nil || x.stop()
}

// answer reads the answer to x and judges it; keep is whether c can carry
// another request (the body was read to its end, and the server keeps
// the connection open).
func (c *conn) answer(x *exchange) (answer error, keep bool) {
	var resp *http.Response
	var err error
	// 1xx answers come before the final one; net/http reads up to 5.
	for range 6 {
		resp, err = http.ReadResponse(c.br, x.req)
		if err != nil {
			return x.failure(err), false
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	if resp.StatusCode < 200 {
		return x.failure(errors.New("6 informational (1xx) answers in a row")), false
	}
	body := io.Reader(resp.Body)
	if x.gzip && resp.Header.Get("Content-Encoding") == "gzip" && resp.StatusCode > 299 {
		if z, err := gzip.NewReader(resp.Body); err == nil {
			body = z
		}
	}
	answer = x.h.judge(resp.StatusCode, resp.Header, body, x.sig)
	n, err := io.CopyN(io.Discard, resp.Body, maxDrain+1)
	if err != io.EOF || n > maxDrain {
		return answer, false // a body longer than maxDrain, or broken: the connection goes
	}
	_ = resp.Body.Close()
	return answer, !resp.Close && resp.StatusCode != http.StatusSwitchingProtocols
}

// failure is x's answer for a connection that failed before the answer
// was read (the caller holds the connection's lock, or is its writer's
// reader past the write): ctx's error when it ended, context.DeadlineExceeded when the
// attempt's deadline passed (as net/http says it), else the write's or
// the read's error.
func (x *exchange) failure(err error) error {
	switch {
	case x.ctx.Err() != nil:
		err = x.ctx.Err()
	case isTimeout(err):
		err = context.DeadlineExceeded
	case x.writeErr != nil:
		err = x.writeErr
	case errors.Is(err, io.EOF):
		err = errResend
	}
	return fmt.Errorf("http: %s %s: %w", x.h.method, x.h.target, err)
}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// ownRequest builds the request of m, with its signature, and reports
// whether net/http's Transport would ask for gzip with it (write adds the
// header where the Transport does).
func (h *httpSink) ownRequest(m *shaper.Message, sendKey bool) (*http.Request, string, bool, error) {
	req, sig, err := h.newRequest(context.Background(), h.url, m, sendKey)
	if err != nil {
		return nil, "", false, err
	}
	gzip := req.Header.Get("Accept-Encoding") == "" && req.Header.Get("Range") == "" && req.Method != http.MethodHead
	return req, sig, gzip, nil
}

// start writes the request of m on an idle connection and returns true;
// its answer goes to done from the connection's reader. It returns false,
// having sent nothing, when there is no idle connection, when m is larger
// than startMaxBody, or when m cannot become a request (Send says why).
func (h *httpSink) start(ctx context.Context, m *shaper.Message, timeout time.Duration, done func(error)) bool {
	if h.pool == nil || len(m.Payload) > startMaxBody {
		return false
	}
	sendKey, err := h.check(m)
	if err != nil {
		return false
	}
	x := &exchange{h: h, ctx: ctx, deadline: time.Now().Add(timeout), done: done}
	c := h.pool.take(x)
	if c == nil {
		return false
	}
	req, sig, gzip, err := h.ownRequest(m, sendKey)
	if err != nil {
		c.mu.Lock()
		c.cur = nil
		c.mu.Unlock()
		h.pool.put(c)
		return false
	}
	c.write(x, req, sig, gzip)
	return true
}

// sendOwn is send on the pool: it takes an idle connection or dials one,
// writes the request and waits for its answer.
func (h *httpSink) sendOwn(ctx context.Context, m *shaper.Message, sendKey bool) error {
	req, sig, gzip, err := h.ownRequest(m, sendKey)
	if err != nil {
		return shaper.NotSent(err)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(h.timeout)
	}
	answer := make(chan error, 1)
	x := &exchange{h: h, ctx: ctx, deadline: deadline, done: func(err error) { answer <- err }}
	c, err := h.pool.get(ctx, x)
	if err != nil {
		return fmt.Errorf("http: %s %s: %w", h.method, h.target, err)
	}
	c.write(x, req, sig, gzip)
	return <-answer
}
