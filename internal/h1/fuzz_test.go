package h1

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// pipeDial returns a dialer whose every connection is one end of a
// net.Pipe; at the other, a server reads one request and writes answer,
// then closes.
func pipeDial(answer []byte) func(context.Context, string, string) (net.Conn, error) {
	return func(context.Context, string, string) (net.Conn, error) {
		client, server := net.Pipe()
		go func() {
			defer server.Close()
			_ = server.SetDeadline(time.Now().Add(5 * time.Second))
			req, err := http.ReadRequest(bufio.NewReader(server))
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			_, _ = server.Write(answer)
		}()
		return client, nil
	}
}

// FuzzAnswer feeds arbitrary bytes as the answer to a request, to the
// client and to net/http's Transport: the client must not panic or hang,
// and must make of them what the Transport makes: a failure for both, or
// the same status, headers and body.
//
//	go test -run '^$' -fuzz FuzzAnswer ./internal/h1
func FuzzAnswer(f *testing.F) {
	for _, a := range conformance {
		f.Add([]byte(a.raw))
	}
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcdef"))
	f.Add([]byte("HTTP/1.1 200 OK\r\n Folded: header\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200 OK\nContent-Length: 2\n\nok"))
	f.Add([]byte("HTTP/2.0 200 OK\r\n\r\n"))
	f.Fuzz(func(t *testing.T, answer []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req := func() *http.Request {
			r, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://sink.test/hook", nil)
			return r
		}

		tr := &http.Transport{DialContext: pipeDial(answer)}
		defer tr.CloseIdleConnections()
		var want outcome
		if resp, err := tr.RoundTrip(req()); err != nil {
			want.Err = true
		} else {
			want = seen(resp)
			_ = resp.Body.Close()
		}

		c := New(Config{Addr: "sink.test:80", Dial: pipeDial(answer), MaxConns: 1, Timeout: 10 * time.Second, IdleTimeout: time.Minute, MaxDrain: 64 << 10})
		defer c.Close(context.Background())
		var got outcome
		if err := c.Do(ctx, req(), func(resp *http.Response) error { got = seen(resp); return nil }); err != nil {
			got = outcome{Err: true}
		}
		if !outcomesMatch(got, want) {
			t.Errorf("answer %q:\nown client: %v\nnet/http's: %v", answer, got, want)
		}
	})
}
