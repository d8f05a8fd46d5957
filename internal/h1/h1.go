// Package h1 is the HTTP sink's own HTTP/1.1 client, to one host:port, over
// TCP or TLS: a pool of kept-alive connections, each with a reader
// goroutine parked on it. The goroutine that sends a request writes it to
// the connection itself and waits for the answer, which the connection's
// reader reads and hands to the caller's answer function; there is no
// hand-off to net/http's writer and reader goroutines. What that saves,
// over http:// and https://, is measured beside net/http's Transport by
// BenchmarkHTTPAttempt in package sinks (docs/tuning.md).
//
// Its requests are byte for byte those net/http's Transport writes over
// HTTP/1.1 (written by http.Request.Write, with the Accept-Encoding: gzip
// the Transport adds where it adds it), and its responses are the ones the
// Transport would return (the same parser, 1xx answers skipped, a gzip
// body it asked for decompressed, the same limit on the headers): the
// conformance tests hold it to that. Each request is written at most once:
// a connection lost after the request was written and before its answer
// is ErrLost, never a second request.
//
// Over TLS it shakes hands with the sink's tls.Config (its CAs, client
// certificate, oldest version and server name) and offers only http/1.1 by
// ALPN. Every connection is dialled by Config.Dial, the dialer net/http
// would use, and Config.Wrap wraps the socket (below TLS) as it comes:
// package tuning's raw reads and writes, when that knob is on.
package h1

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// ErrLost is the error of a request whose connection was lost after the
// request was written, and before its answer: it may have reached the
// server, and is not written again.
var ErrLost = errors.New("connection lost after the request was written, before an answer")

// errClosed is the error of a request to a client that was closed.
var errClosed = errors.New("client closed")

// maxHeaderBytes bounds the status lines and headers of an answer, 1xx
// answers included, as net/http's Transport does by default
// (MaxResponseHeaderBytes).
const maxHeaderBytes = 10 << 20

// acceptGzip is the header net/http's Transport adds to a request unless
// it has an Accept-Encoding or a Range, or is a HEAD.
const acceptGzip = "Accept-Encoding: gzip\r\n"

// keptBuffer is the largest request buffer a connection keeps for the next
// request; a larger one goes after its request.
const keptBuffer = 32 << 10

// Config is what a Client dials and how.
type Config struct {
	// Addr is the host:port every connection goes to.
	Addr string
	// TLS, when set, makes every connection TLS with it: its ServerName is
	// the name the server's certificate must hold (and the SNI). nil:
	// plain TCP.
	TLS *tls.Config
	// Dial dials the TCP connection: net.Dialer.DialContext's signature.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Wrap, when set, wraps each dialled connection (the socket, below TLS).
	Wrap func(net.Conn) net.Conn
	// MaxConns bounds the connections open or being dialled at once; at
	// least 1.
	MaxConns int
	// Timeout bounds an exchange whose ctx has no deadline.
	Timeout time.Duration
	// HandshakeTimeout bounds a TLS handshake, within the ctx's deadline.
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection unused this long.
	IdleTimeout time.Duration
	// MaxDrain is how much of a response body is read after the answer
	// function returns so that the connection carries the next request; a
	// longer body costs the connection.
	MaxDrain int64
}

// Client sends requests to one host:port over kept-alive HTTP/1.1
// connections. It is safe for concurrent use by multiple goroutines.
type Client struct {
	cfg Config
	// slots holds a token for each connection open or being dialled, so
	// there are never more than MaxConns.
	slots chan struct{}
	// idle holds the connections ready for a request, each with its
	// reader waiting on it; as large as slots, so a put never blocks.
	idle chan *conn

	mu      sync.Mutex // guards closed and conns
	closed  bool       // retired or closed: no connection goes back to idle
	conns   map[*conn]struct{}
	readers sync.WaitGroup
}

// New returns a client of cfg.
func New(cfg Config) *Client {
	n := max(cfg.MaxConns, 1)
	return &Client{cfg: cfg, slots: make(chan struct{}, n), idle: make(chan *conn, n), conns: map[*conn]struct{}{}}
}

// conn is one connection of a client and the exchange on it.
type conn struct {
	client *Client
	nc     net.Conn
	lr     *limitReader // under br: bounds what the headers of an answer may take
	br     *bufio.Reader
	buf    bytes.Buffer // the request being written
	wmu    sync.Mutex   // held by the writer of a request from its first byte to its last

	mu   sync.Mutex // guards cur and dead, and the fields of cur its writer sets
	cur  *exchange  // the request on it, from its claim until its answer
	dead bool       // closed, or about to be: never claimed again
}

// exchange is one request and where its answer goes.
type exchange struct {
	ctx      context.Context
	deadline time.Time
	answer   func(*http.Response) error
	done     func(error)

	// Set by the writer, under conn.mu, before the request is written.
	req      *http.Request
	gzip     bool        // the request asked for gzip: a gzip body is decompressed
	stop     func() bool // stops the AfterFunc that ends the exchange with ctx
	writeErr error       // the write failed; the reader answers with it
	answered bool
	graced   bool // the reader looked once more past the deadline (read)
}

// Do writes req on a connection, an idle one or one it dials (waiting for
// room until ctx ends), and waits for its answer. The connection's reader
// calls answer with the response, whose body is readable until answer
// returns, and Do returns what answer returns. Without an answer it returns
// ctx's error when ctx ended, context.DeadlineExceeded when the exchange's
// deadline (ctx's, or Timeout from now) passed, ErrLost when the connection
// was lost after the request was written, or the dial's, the handshake's,
// the write's or the read's error.
func (c *Client) Do(ctx context.Context, req *http.Request, answer func(*http.Response) error) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(c.cfg.Timeout)
	}
	result := make(chan error, 1)
	x := &exchange{ctx: ctx, deadline: deadline, answer: answer, done: func(err error) { result <- err }}
	cn, err := c.get(ctx, x)
	if err != nil {
		return err
	}
	cn.write(x, req)
	return <-result
}

// claim makes cn carry x, and sets x's deadline on it; false when cn is
// dead.
func (cn *conn) claim(x *exchange) bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.dead {
		return false
	}
	cn.cur = x
	_ = cn.nc.SetDeadline(x.deadline)
	return true
}

// take returns an idle connection claimed for x, or nil when none is idle.
func (c *Client) take(x *exchange) *conn {
	for {
		select {
		case cn := <-c.idle:
			if cn.claim(x) {
				return cn
			}
		default:
			return nil
		}
	}
}

// get returns a connection claimed for x: an idle one, or a new one when
// the client has room, waiting for either until ctx ends.
func (c *Client) get(ctx context.Context, x *exchange) (*conn, error) {
	if cn := c.take(x); cn != nil {
		return cn, nil
	}
	for {
		select {
		case cn := <-c.idle:
			if cn.claim(x) {
				return cn, nil
			}
		case c.slots <- struct{}{}:
			return c.open(ctx, x)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// open dials a new connection for x, which holds the slot get took, shakes
// hands over TLS when configured, and starts its reader.
func (c *Client) open(ctx context.Context, x *exchange) (*conn, error) {
	nc, err := c.dial(ctx)
	if err != nil {
		<-c.slots
		return nil, err
	}
	lr := &limitReader{r: nc, n: math.MaxInt64}
	cn := &conn{client: c, nc: nc, lr: lr, br: bufio.NewReader(lr)}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = nc.Close()
		<-c.slots
		return nil, errClosed
	}
	c.conns[cn] = struct{}{}
	c.readers.Add(1)
	c.mu.Unlock()
	cn.claim(x)
	go cn.read()
	return cn, nil
}

// dial dials a connection, wraps it, and over TLS shakes hands within
// HandshakeTimeout and ctx.
func (c *Client) dial(ctx context.Context) (net.Conn, error) {
	nc, err := c.cfg.Dial(ctx, "tcp", c.cfg.Addr)
	if err != nil {
		return nil, err
	}
	if c.cfg.Wrap != nil {
		nc = c.cfg.Wrap(nc)
	}
	if c.cfg.TLS == nil {
		return nc, nil
	}
	tc := tls.Client(nc, c.cfg.TLS)
	hctx, cancel := ctx, context.CancelFunc(func() {})
	if c.cfg.HandshakeTimeout > 0 {
		hctx, cancel = context.WithTimeout(ctx, c.cfg.HandshakeTimeout)
	}
	err = tc.HandshakeContext(hctx)
	cancel()
	if err == nil {
		if p := tc.ConnectionState().NegotiatedProtocol; p != "" && p != "http/1.1" {
			err = fmt.Errorf("the server chose protocol %q over http/1.1", p)
		}
	}
	if err != nil {
		_ = nc.Close()
		return nil, err
	}
	return tc, nil
}

// put makes cn idle again; when the client no longer keeps connections it
// closes cn instead and reports false.
func (c *Client) put(cn *conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		cn.kill()
		return false
	}
	// A connection idle for IdleTimeout is closed by its reader, as
	// net/http's Transport closes it.
	_ = cn.nc.SetDeadline(time.Now().Add(c.cfg.IdleTimeout))
	select {
	case c.idle <- cn:
		return true
	default: // not reached: idle is as large as slots
		cn.kill()
		return false
	}
}

// Conns returns how many connections the client holds: open, or being
// dialled.
func (c *Client) Conns() int { return len(c.slots) }

// Retire keeps no more connections: the idle ones close now, the busy ones
// once answered. A request after Retire is refused.
func (c *Client) Retire() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	for {
		select {
		case cn := <-c.idle:
			cn.kill()
		default:
			return
		}
	}
}

// Close retires the client and waits for its readers until ctx ends, then
// closes the connections still busy and waits for their readers.
func (c *Client) Close(ctx context.Context) {
	c.Retire()
	done := make(chan struct{})
	go func() {
		c.readers.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	c.mu.Lock()
	for cn := range c.conns {
		_ = cn.nc.Close()
	}
	c.mu.Unlock()
	<-done
}

// kill closes an idle connection; its reader finds it closed and ends.
func (cn *conn) kill() {
	cn.mu.Lock()
	cn.dead = true
	cn.mu.Unlock()
	_ = cn.nc.Close()
}

// asksGzip reports whether net/http's Transport would add Accept-Encoding:
// gzip to req.
func asksGzip(req *http.Request) bool {
	return req.Header.Get("Accept-Encoding") == "" && req.Header.Get("Range") == "" && req.Method != http.MethodHead
}

// write writes req for x, claimed on cn, and arranges for x's ctx to end
// the exchange. A failed write closes cn: its reader then answers x.
func (cn *conn) write(x *exchange, req *http.Request) {
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	gzip := asksGzip(req)
	cn.mu.Lock()
	x.req, x.gzip = req, gzip
	if !x.answered && x.ctx.Done() != nil {
		// A deadline long past ends the read or write in progress at once.
		x.stop = context.AfterFunc(x.ctx, func() { _ = cn.nc.SetDeadline(time.Unix(1, 0)) })
	}
	cn.mu.Unlock()
	cn.buf.Reset()
	err := req.Write(&cn.buf) // to memory: only the body's reader can fail
	b := cn.buf.Bytes()
	if gzip && err == nil {
		// Last of the headers, as the Transport writes its own.
		end, n := bytes.Index(b, []byte("\r\n\r\n"))+2, len(b)
		b = append(b, acceptGzip...)
		copy(b[end+len(acceptGzip):], b[end:n])
		copy(b[end:], acceptGzip)
	}
	if cn.buf.Cap() > keptBuffer {
		cn.buf = bytes.Buffer{}
	}
	if err == nil {
		// The reader may be reading the answer already: what it reads is
		// touched under cn.mu only.
		_, err = cn.nc.Write(b)
	}
	if err != nil {
		cn.mu.Lock()
		if cn.cur == x { // not answered yet (a server may answer early)
			x.writeErr = err
			_ = cn.nc.Close()
		}
		cn.mu.Unlock()
	}
}

// read is cn's reader: it waits for the answer of each request on cn and
// hands it to the request's answer and done, until cn dies. It owns cn's
// end: the slot, the client's record of it.
func (cn *conn) read() {
	c := cn.client
	defer func() {
		_ = cn.nc.Close()
		c.mu.Lock()
		delete(c.conns, cn)
		c.mu.Unlock()
		<-c.slots
		c.readers.Done()
	}()
	for {
		cn.lr.n = maxHeaderBytes // the next answer's headers, 1xx ones included
		_, err := cn.br.Peek(1)
		cn.mu.Lock()
		x := cn.cur
		if err != nil && x != nil && x.writeErr == nil && isTimeout(err) && x.ctx.Err() == nil {
			if time.Now().Before(x.deadline) {
				// The idle deadline passed as cn was claimed; the
				// claim set the request's own.
				cn.mu.Unlock()
				continue
			}
			if !x.graced {
				// The reader hands the previous answer over after
				// cn is idle again, and may itself run late on a busy
				// machine: the answer to x may be here already,
				// unread. A look of a millisecond tells.
				x.graced = true
				_ = cn.nc.SetReadDeadline(time.Now().Add(time.Millisecond))
				cn.mu.Unlock()
				continue
			}
		}
		if err != nil || x == nil {
			// Closed, timed out or reset; or an answer to no request
			// (a 408 a server sends on an idle connection).
			cn.dead, cn.cur = true, nil
			var failure error
			if x != nil {
				x.end() // the connection is dead anyway
				failure = x.failure(err)
			}
			cn.mu.Unlock()
			if x != nil {
				x.done(failure)
			}
			return
		}
		cn.mu.Unlock()

		result, keep := cn.exchange(x)
		// A server may answer before it has read the whole request: the
		// writer may still be writing. Wait for it to let go.
		cn.wmu.Lock()
		cn.mu.Lock()
		keep = x.end() && keep && x.writeErr == nil
		if !keep {
			cn.dead = true
		}
		cn.cur = nil
		cn.mu.Unlock()
		cn.wmu.Unlock()
		keep = keep && c.put(cn)
		x.done(result)
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

// exchange reads the answer to x and hands it to x.answer; keep is whether
// cn can carry another request (the body was read to its end, and the
// server keeps the connection open).
func (cn *conn) exchange(x *exchange) (result error, keep bool) {
	resp, err := readAnswer(cn.br, cn.lr, x.req, x.gzip)
	if err != nil {
		return x.failure(err), false
	}
	result = x.answer(resp.Response)
	n, err := io.CopyN(io.Discard, resp.raw, cn.client.cfg.MaxDrain+1)
	if err != io.EOF || n > cn.client.cfg.MaxDrain || resp.raw.failed {
		return result, false // a body longer than MaxDrain, or broken: the connection goes
	}
	_ = resp.raw.Close()
	// As the Transport: a close either side asked for, or a status below
	// 200 (a 101), ends it.
	return result, !resp.Close && !x.req.Close && resp.StatusCode >= 200
}

// failure is x's result for a connection that failed before the answer
// was read: ctx's error when it ended, context.DeadlineExceeded when the
// deadline passed (as net/http says it), else the write's error, ErrLost
// for a connection the server closed, or the read's error.
func (x *exchange) failure(err error) error {
	switch {
	case x.ctx.Err() != nil:
		return x.ctx.Err()
	case isTimeout(err):
		return context.DeadlineExceeded
	case x.writeErr != nil:
		return x.writeErr
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return ErrLost
	}
	return err
}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// answer is a response as the answer function sees it, and the body as it
// came off the connection, which the reader drains.
type answer struct {
	*http.Response
	raw *sawError
}

// sawError is a body that remembers whether a read of it failed, which
// net/http's body forgets: after a body cut short (io.ErrUnexpectedEOF) it
// answers io.EOF, as at the end of a whole body, and the connection must
// not carry another request.
type sawError struct {
	io.ReadCloser
	failed bool
}

func (b *sawError) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.failed = true
	}
	return n, err
}

// readAnswer reads the answer to req from br as net/http's Transport reads
// it: 1xx answers are skipped (101 Switching Protocols is final), the
// headers of all of them together are bounded by the limit lr was given
// (maxHeaderBytes), and when the request asked for gzip (asked) a body in
// gzip is decompressed as it is read, without Content-Encoding and
// Content-Length.
func readAnswer(br *bufio.Reader, lr *limitReader, req *http.Request, asked bool) (answer, error) {
	for {
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			if lr.n <= 0 {
				err = fmt.Errorf("server response headers exceeded %d bytes; aborted", maxHeaderBytes)
			}
			return answer{}, err
		}
		if resp.StatusCode >= 100 && resp.StatusCode <= 199 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		lr.n = math.MaxInt64 // the body is not bounded here (see MaxDrain)
		raw := &sawError{ReadCloser: resp.Body}
		resp.Body = raw
		a := answer{Response: resp, raw: raw}
		switch {
		case switchesProtocol(resp):
			// The Transport hands the connection over as the body; it is
			// not kept.
			resp.Body = io.NopCloser(br)
		case asked && req.Method != http.MethodHead && resp.ContentLength != 0 &&
			strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip"):
			resp.Body = &gzipBody{body: resp.Body}
			resp.Header.Del("Content-Encoding")
			resp.Header.Del("Content-Length")
			resp.ContentLength = -1
			resp.Uncompressed = true
		}
		return a, nil
	}
}

// switchesProtocol reports whether resp is a 101 that the Transport takes
// as a switch of protocol: with an Upgrade header and Upgrade among the
// tokens of Connection.
func switchesProtocol(resp *http.Response) bool {
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") == "" {
		return false
	}
	for _, v := range resp.Header["Connection"] {
		for token := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(token), "upgrade") {
				return true
			}
		}
	}
	return false
}

// gzipBody decompresses a body as it is read, from its first Read on, as
// net/http's Transport does for a gzip body it asked for.
type gzipBody struct {
	body io.ReadCloser
	zr   *gzip.Reader
	err  error
}

func (g *gzipBody) Read(p []byte) (int, error) {
	if g.zr == nil && g.err == nil {
		g.zr, g.err = gzip.NewReader(g.body)
	}
	if g.err != nil {
		return 0, g.err
	}
	return g.zr.Read(p)
}

func (g *gzipBody) Close() error { return g.body.Close() }

// limitReader reads from r until n bytes are read, then fails as net/http's
// Transport does when an answer's headers exceed their bound.
type limitReader struct {
	r io.Reader
	n int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errHeaderTooLong
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

var errHeaderTooLong = errors.New("header too long")
