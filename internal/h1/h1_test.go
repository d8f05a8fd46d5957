package h1

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shaper-dev/shaper/internal/sinktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// outcome is what a client made of an answer: the response as the caller
// sees it, its body, and whether reading the body failed.
type outcome struct {
	Err          bool
	Status       int
	Header       http.Header
	Body         string
	BodyErr      bool
	Uncompressed bool
}

func (o outcome) String() string {
	return fmt.Sprintf("err %v, status %d, header %v, body %q (error %v), uncompressed %v", o.Err, o.Status, o.Header, o.Body, o.BodyErr, o.Uncompressed)
}

// seen reads what a client hands its caller of resp.
func seen(resp *http.Response) outcome {
	var body bytes.Buffer // the answers of the tests are small
	_, err := body.ReadFrom(resp.Body)
	return outcome{Status: resp.StatusCode, Header: resp.Header.Clone(), Body: body.String(), BodyErr: err != nil, Uncompressed: resp.Uncompressed}
}

// newRequest is the request both clients send in the conformance tests.
func newRequest(t testing.TB, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"amount":42}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

// viaTransport sends two requests one after the other through net/http's
// Transport, as the HTTP sink configures it for HTTP/1.1.
func viaTransport(t testing.TB, url string, tlsConfig *tls.Config) []outcome {
	t.Helper()
	tr := &http.Transport{
		DialContext: (&net.Dialer{}).DialContext, TLSClientConfig: tlsConfig,
		MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, ResponseHeaderTimeout: 5 * time.Second,
	}
	defer tr.CloseIdleConnections()
	var out []outcome
	for range 2 {
		resp, err := tr.RoundTrip(newRequest(t, url))
		if err != nil {
			out = append(out, outcome{Err: true})
			continue
		}
		o := seen(resp)
		_ = resp.Body.Close()
		out = append(out, o)
	}
	return out
}

// viaOwn sends the same two requests through a Client to addr.
func viaOwn(t testing.TB, url, addr string, tlsConfig *tls.Config) []outcome {
	t.Helper()
	c := New(Config{Addr: addr, TLS: tlsConfig, Dial: (&net.Dialer{}).DialContext, MaxConns: 1,
		Timeout: 5 * time.Second, HandshakeTimeout: 5 * time.Second, IdleTimeout: time.Minute, MaxDrain: 64 << 10})
	defer c.Close(context.Background())
	var out []outcome
	for range 2 {
		var o outcome
		err := c.Do(context.Background(), newRequest(t, url), func(resp *http.Response) error {
			o = seen(resp)
			return nil
		})
		if err != nil {
			o = outcome{Err: true}
		}
		out = append(out, o)
	}
	return out
}

func gzipped(s string) string {
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	z.Write([]byte(s))
	z.Close()
	return b.String()
}

// conformance are answers, each as a server writes it and whether it
// closes the connection after it (an answer that ends only there), that
// the client must take as net/http's Transport does.
var conformance = map[string]struct {
	raw   string
	close bool
}{
	"204":                              {"HTTP/1.1 204 No Content\r\n\r\n", false},
	"200 Content-Length":               {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false},
	"200 chunked":                      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", false},
	"200 chunked trailer":              {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n2\r\nok\r\n0\r\nX-Sum: 1\r\n\r\n", false},
	"429 Retry-After":                  {"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Length: 4\r\n\r\nslow", false},
	"503 Retry-After date":             {"HTTP/1.1 503 Service Unavailable\r\nRetry-After: Wed, 21 Oct 2043 07:28:00 GMT\r\nContent-Length: 0\r\n\r\n", false},
	"302 Location":                     {"HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n", false},
	"500 Connection: close":            {"HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\nContent-Length: 7\r\n\r\nclosing", false},
	"200 HTTP/1.0":                     {"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", false},
	"200 HTTP/1.0 keep-alive":          {"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok", false},
	"200 until close":                  {"HTTP/1.1 200 OK\r\n\r\nthe body ends with the connection", true},
	"103 then 200":                     {"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false},
	"100 then 404":                     {"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nnop", false},
	"101 switch":                       {"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\nrest", true},
	"101 without Upgrade":              {"HTTP/1.1 101 Switching Protocols\r\n\r\n", false},
	"503 gzip":                         {"HTTP/1.1 503 Service Unavailable\r\nContent-Encoding: gzip\r\nContent-Length: " + fmt.Sprint(len(gzipped("busy"))) + "\r\n\r\n" + gzipped("busy"), false},
	"200 gzip empty":                   {"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 0\r\n\r\n", false},
	"500 broken gzip":                  {"HTTP/1.1 500 Internal Server Error\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\nnope", false},
	"body shorter than Content-Length": {"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", true},
	"broken chunk":                     {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n", false},
	"Content-Length and chunked":       {"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", false},
	"two Content-Lengths":              {"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", false},
	"malformed status line":            {"HTTP/1.1 OK\r\n\r\n", false},
	"status code of 4 digits":          {"HTTP/1.1 2000 OK\r\n\r\n", false},
	"status below 100":                 {"HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\n", false},
	"malformed header":                 {"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", false},
	"not HTTP":                         {"SSH-2.0-OpenSSH_9.6\r\n", false},
	"nothing":                          {"", true},
	"headers cut short":                {"HTTP/1.1 200 OK\r\nContent-Le", true},
}

// Every answer comes to the caller as net/http's Transport hands it over
// (status, headers, body, a body that fails to read, decompression of a
// gzip body it asked for) or fails as the Transport's does; and a
// connection the Transport would keep is kept (the second request goes on
// it), one it would drop is dropped.
func TestAnswersAreThoseOfNetHTTPsTransport(t *testing.T) {
	for name, a := range conformance {
		t.Run(name, func(t *testing.T) {
			count := func(client func(url, addr string) []outcome) ([]outcome, int) {
				srv := sinktest.StartRaw(t, nil, func(int) (string, bool) { return a.raw, a.close })
				out := client(srv.URL+"/hook", srv.Addr)
				return out, srv.Accepted()
			}
			want, wantConns := count(func(url, _ string) []outcome { return viaTransport(t, url, nil) })
			got, gotConns := count(func(url, addr string) []outcome { return viaOwn(t, url, addr, nil) })
			for i := range want {
				if !outcomesMatch(got[i], want[i]) {
					t.Errorf("request %d: own client: %v\nnet/http's:    %v", i, got[i], want[i])
				}
			}
			if gotConns != wantConns {
				t.Errorf("the two requests took %d connections; net/http's took %d", gotConns, wantConns)
			}
		})
	}
}

// outcomesMatch compares two outcomes; a failure is a failure whatever its
// text.
func outcomesMatch(a, b outcome) bool {
	if a.Err || b.Err {
		return a.Err == b.Err
	}
	return a.Status == b.Status && a.Body == b.Body && a.BodyErr == b.BodyErr && a.Uncompressed == b.Uncompressed &&
		fmt.Sprint(a.Header) == fmt.Sprint(b.Header)
}

// Over TLS the client says in its ClientHello what net/http's Transport
// says with the same tls.Config (server name, versions, cipher suites,
// curves, signature schemes), and offers http/1.1 alone by ALPN; the
// answers are the same; and Wrap wraps the socket below TLS.
func TestTLSHandshakeAndAnswersAreThoseOfNetHTTPsTransport(t *testing.T) {
	var mu sync.Mutex
	var hellos []*tls.ClientHelloInfo
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3")
		w.Header()["Date"] = nil // the same answer twice: no Date, which may change second between them
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("busy"))
	}))
	srv.TLS = &tls.Config{NextProtos: []string{"http/1.1"}, GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		mu.Lock()
		hellos = append(hellos, h)
		mu.Unlock()
		return nil, nil
	}}
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	addr := srv.Listener.Addr().String()
	url := "https://example.com/hook" // httptest's certificate names example.com; both dial addr

	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(newRequest(t, url))
	if err != nil {
		t.Fatal(err)
	}
	want := seen(resp)
	resp.Body.Close()

	var wrapped atomic.Int32
	c := New(Config{Addr: addr, TLS: &tls.Config{RootCAs: roots, ServerName: "example.com", NextProtos: []string{"http/1.1"}},
		Dial: (&net.Dialer{}).DialContext, MaxConns: 1, Timeout: 5 * time.Second, HandshakeTimeout: 5 * time.Second,
		IdleTimeout: time.Minute, MaxDrain: 64 << 10,
		Wrap: func(nc net.Conn) net.Conn {
			if _, ok := nc.(*net.TCPConn); !ok {
				t.Errorf("Wrap got a %T; want the socket, a *net.TCPConn", nc)
			}
			wrapped.Add(1)
			return nc
		}})
	defer c.Close(context.Background())
	var got outcome
	if err := c.Do(context.Background(), newRequest(t, url), func(resp *http.Response) error { got = seen(resp); return nil }); err != nil {
		t.Fatal(err)
	}
	if !outcomesMatch(got, want) {
		t.Errorf("own client over TLS: %v\nnet/http's:             %v", got, want)
	}
	if wrapped.Load() != 1 {
		t.Errorf("Wrap called %d times for one connection; want 1", wrapped.Load())
	}

	mu.Lock()
	defer mu.Unlock()
	if len(hellos) != 2 {
		t.Fatalf("%d handshakes; want 2", len(hellos))
	}
	hello := func(h *tls.ClientHelloInfo) string {
		return fmt.Sprint(h.ServerName, h.SupportedVersions, h.CipherSuites, h.SupportedCurves, h.SignatureSchemes, h.SupportedPoints)
	}
	if a, b := hello(hellos[1]), hello(hellos[0]); a != b {
		t.Errorf("own client's ClientHello: %s\nnet/http's:               %s", a, b)
	}
	if !slices.Equal(hellos[1].SupportedProtos, []string{"http/1.1"}) {
		t.Errorf("own client offered %q by ALPN; want [http/1.1]", hellos[1].SupportedProtos)
	}
}

// A server that chooses h2 by ALPN is refused: the client speaks only
// HTTP/1.1.
func TestTLSRefusesAServerThatChoosesAnotherProtocol(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.TLS = &tls.Config{NextProtos: []string{"h2"}}
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	c := New(Config{Addr: srv.Listener.Addr().String(), TLS: &tls.Config{RootCAs: roots, ServerName: "example.com", NextProtos: []string{"h2", "http/1.1"}},
		Dial: (&net.Dialer{}).DialContext, MaxConns: 1, Timeout: 5 * time.Second, IdleTimeout: time.Minute})
	defer c.Close(context.Background())
	err := c.Do(context.Background(), newRequest(t, "https://example.com/"), func(*http.Response) error { return nil })
	if err == nil || !strings.Contains(err.Error(), `"h2"`) {
		t.Errorf("Do to a server choosing h2 = %v; want an error naming h2", err)
	}
}

// A connection lost after the request was written, before an answer, is
// ErrLost, and the request was written once.
func TestALostConnectionIsErrLostAndTheRequestGoesOnce(t *testing.T) {
	var requests atomic.Int32
	srv := sinktest.StartRaw(t, nil, func(int) (string, bool) { requests.Add(1); return "", true })
	addr := srv.Addr
	c := New(Config{Addr: addr, Dial: (&net.Dialer{}).DialContext, MaxConns: 1, Timeout: 5 * time.Second, IdleTimeout: time.Minute})
	defer c.Close(context.Background())
	err := c.Do(context.Background(), newRequest(t, "http://"+addr+"/"), func(*http.Response) error {
		t.Error("answer called without an answer")
		return nil
	})
	if !errors.Is(err, ErrLost) {
		t.Errorf("Do = %v; want ErrLost", err)
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("the server read %d requests; want 1", n)
	}
}

// Answer headers beyond maxHeaderBytes fail the request, as the
// Transport's do, without reading on.
func TestAnswerHeadersOverTheLimitFail(t *testing.T) {
	big := "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", maxHeaderBytes) + "\r\n\r\n"
	srv := sinktest.StartRaw(t, nil, func(int) (string, bool) { return big, true })
	addr := srv.Addr
	got := viaOwn(t, "http://"+addr+"/", addr, nil)
	want := viaTransport(t, "http://"+addr+"/", nil)
	if !got[0].Err || !want[0].Err {
		t.Errorf("an answer with %d bytes of headers: own client %v, net/http %v; want both to fail", len(big), got[0], want[0])
	}
}

// A connection whose answer's body was cut short (the server closed it
// before Content-Length) never goes back to the idle pool, whether or not
// the reader has seen the close yet: net/http's body answers io.EOF to a
// read after io.ErrUnexpectedEOF, which looked like a body read to its end,
// and the next request could take the dead connection (the conformance
// test above failed so, 2 times in 200).
func TestABodyCutShortKeepsItsConnectionOutOfThePool(t *testing.T) {
	raw := "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"
	srv := sinktest.StartRaw(t, nil, func(int) (string, bool) { return raw, true })
	c := New(Config{Addr: srv.Addr, Dial: (&net.Dialer{}).DialContext, MaxConns: 1,
		Timeout: 5 * time.Second, HandshakeTimeout: 5 * time.Second, IdleTimeout: time.Minute, MaxDrain: 64 << 10})
	defer c.Close(context.Background())
	var o outcome
	err := c.Do(context.Background(), newRequest(t, srv.URL+"/hook"), func(resp *http.Response) error {
		o = seen(resp)
		return nil
	})
	if err != nil || !o.BodyErr || o.Body != "short" {
		t.Fatalf("Do = %v, %v; want the 200 with its body cut short after \"short\"", err, o)
	}
	if n := len(c.idle); n != 0 {
		t.Errorf("%d connections idle after a body cut short; want 0 (the connection is broken)", n)
	}
}
