package sinktest

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
)

// Raw is a server on 127.0.0.1, over TCP or TLS, that answers each
// request with the bytes a test gives, as they are: for holding a client
// to what net/http's Transport makes of answers a Go server would never
// write. It records what each connection sent (inside TLS: the HTTP
// bytes) and counts the connections it accepted.
type Raw struct {
	Addr string
	URL  string // http:// or https://, then Addr

	ln       net.Listener
	wg       sync.WaitGroup
	accepted atomic.Int32
	mu       sync.Mutex
	raw      []*bytes.Buffer
}

// RawAnswer is the answer to request i (from 0) of its connection: the
// bytes to write, and whether to close the connection after them.
type RawAnswer func(i int) (raw string, close bool)

// NoContent answers every request 204 and keeps the connection.
func NoContent(int) (string, bool) { return "HTTP/1.1 204 No Content\r\n\r\n", false }

// StartRaw starts a Raw server answering with answer, over TLS with
// tlsConfig when it is not nil; it stops when the test ends.
func StartRaw(t testing.TB, tlsConfig *tls.Config, answer RawAnswer) *Raw {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Raw{Addr: ln.Addr().String(), ln: ln}
	r.URL = "http://" + r.Addr
	if tlsConfig != nil {
		r.URL = "https://" + r.Addr
	}
	r.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.accepted.Add(1)
			r.wg.Go(func() { r.serve(c, tlsConfig, answer) })
		}
	})
	t.Cleanup(func() { ln.Close(); r.wg.Wait() })
	return r
}

// serve answers the requests of one connection until it ends or an
// answer closes it.
func (r *Raw) serve(c net.Conn, tlsConfig *tls.Config, answer RawAnswer) {
	if tlsConfig != nil {
		c = tls.Server(c, tlsConfig)
	}
	defer c.Close()
	buf := &bytes.Buffer{}
	r.mu.Lock()
	r.raw = append(r.raw, buf)
	r.mu.Unlock()
	br := bufio.NewReader(&rawConn{Conn: c, buf: buf, mu: &r.mu})
	for i := 0; ; i++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		raw, closeAfter := answer(i)
		if _, err := c.Write([]byte(raw)); err != nil || closeAfter {
			return
		}
	}
}

// Accepted returns how many connections the server accepted.
func (r *Raw) Accepted() int { return int(r.accepted.Load()) }

// RawConns returns what each connection sent, in the order they came.
func (r *Raw) RawConns() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return cloneAll(r.raw)
}
