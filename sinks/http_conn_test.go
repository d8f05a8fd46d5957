package sinks

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/kafkaconn/kafkaconntest"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/internal/tlsconf"
	"github.com/shaper-dev/shaper/shaper"
)

// viaTransport returns an HTTP sink of cfg whose requests go through
// net/http's Transport, as those through a proxy or with url_from do, for
// comparing the sink's own client with it.
func viaTransport(t *testing.T, cfg HTTPConfig) *HTTP {
	t.Helper()
	h := newHTTP(t, cfg)
	throughTransport(h, cfg)
	return h
}

// throughTransport makes h, built of cfg, send through net/http's
// Transport instead of its own client.
func throughTransport(h *HTTP, cfg HTTPConfig) {
	s := h.cur.Load()
	cfg.SetDefaults()
	tlsConfig, err := tlsconf.Client(cfg.TLS)
	if err != nil {
		panic(err) // NewHTTP read the same files
	}
	s.own.Close(context.Background())
	s.transport, s.own = s.newTransport(cfg, tlsConfig, (&net.Dialer{}).DialContext), nil
}

// startRaw starts a sinktest.Raw server answering with answer, over TLS
// with the PKI's server certificate (offering HTTP/1.1 only, so that
// net/http's Transport speaks it too) when pki is not nil, and returns it
// with the tls settings that make a sink trust it.
func startRaw(t *testing.T, pki *kafkaconntest.PKI, answer sinktest.RawAnswer) (*sinktest.Raw, *tlsconf.Config) {
	t.Helper()
	if pki == nil {
		return sinktest.StartRaw(t, nil, answer), nil
	}
	serverTLS := pki.ServerConfig(false)
	serverTLS.NextProtos = []string{"http/1.1"}
	return sinktest.StartRaw(t, serverTLS, answer), &tlsconf.Config{CAFile: pki.CAFile}
}

// The sink's own client writes, byte for byte, the requests net/http's
// Transport writes, over http:// and over https:// (the bytes inside TLS):
// with configured, forwarded, key and signature headers, basic auth from
// the URL, a Host of its own, an empty payload and a large one.
func TestHTTPOwnClientWritesByteForByteWhatNetHTTPWrites(t *testing.T) {
	msgs := []*shaper.Message{
		{ID: "psp/3/1234", Key: []byte("merchant-7"), Payload: []byte(`{"amount":42,"note":"café"}`),
			Header: map[string][]string{"Trace-Id": {"abc"}, "X-Multi": {"1", "2"}}},
		{ID: "psp/3/1235", Payload: []byte{}},
		{ID: "psp/3/1236", Payload: bytes.Repeat([]byte("x"), 100<<10)},
	}
	fixed := time.Unix(1_800_000_000, 0)
	pki := kafkaconntest.NewPKI(t, "127.0.0.1")
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			paths := []struct {
				name string
				make func(t *testing.T, cfg HTTPConfig) *HTTP
			}{{"net/http", viaTransport}, {"own client", newHTTP}}
			var raw [][]byte
			for _, p := range paths {
				var serverPKI *kafkaconntest.PKI
				if scheme == "https" {
					serverPKI = pki
				}
				srv, trust := startRaw(t, serverPKI, sinktest.NoContent)
				cfg := httpConfig(strings.Replace(srv.URL, "://", "://user:pa55@", 1) + "/notify?merchant=7")
				cfg.TLS = trust
				cfg.Headers = map[string]string{"X-Api-Key": "k-123", "Host": "callbacks.example", "User-Agent": "psp-notifier/1"}
				cfg.ForwardHeaders = true
				cfg.KeyHeader = "Merchant-Id"
				cfg.Signing = &SigningConfig{Scheme: "shaper", Secret: testSecret}
				h := p.make(t, cfg)
				h.cur.Load().now = func() time.Time { return fixed }
				for _, m := range append(msgs, msgs...) {
					if err := h.Send(testCtx(t), m); err != nil {
						t.Fatalf("%s: %s: %v", p.name, m.ID, err)
					}
				}
				conns := srv.RawConns()
				if len(conns) != 1 {
					t.Fatalf("%s: %d connections; want 1, kept alive", p.name, len(conns))
				}
				raw = append(raw, conns[0])
			}
			if !bytes.Contains(raw[0], []byte("Accept-Encoding: gzip\r\n\r\n")) {
				t.Fatalf("net/http's requests have no Accept-Encoding: gzip as their last header:\n%s", raw[0][:400])
			}
			if !bytes.Equal(raw[1], raw[0]) {
				a, b := string(raw[0]), string(raw[1])
				n := 0
				for n < min(len(a), len(b)) && a[n] == b[n] {
					n++
				}
				t.Errorf("the own client wrote other bytes than net/http, from byte %d:\nnet/http: %q\nown:      %q", n, a[n:min(n+120, len(a))], b[n:min(n+120, len(b))])
			}
		})
	}
}

// verdict is what the pipeline makes of a Send's answer: the request's
// label, and the parts of a status error the retry policy and the dead
// letter read.
type verdict struct {
	code, body string
	retryAfter time.Duration // rounded to seconds
	notSent    bool
	timeout    bool
}

func judged(err error) verdict {
	v := verdict{code: shaper.RequestCode(err), notSent: errors.Is(err, shaper.ErrNotSent), timeout: errors.Is(err, context.DeadlineExceeded)}
	var se *shaper.StatusError
	if errors.As(err, &se) {
		v.body = se.Body
		if !se.RetryAfter.IsZero() {
			v.retryAfter = time.Until(se.RetryAfter).Round(time.Second)
		}
	}
	return v
}

// Every answer means the same through the sink's own client as through
// net/http, over http:// and https://, for three requests in a row: a
// status of each class with its body and Retry-After, bodies sized by
// Content-Length, chunked or ended by the close of the connection, a gzip
// body, 1xx answers before the final one, a connection closed after the
// answer, and answers that are not HTTP.
func TestHTTPOwnClientJudgesEveryAnswerAsNetHTTPDoes(t *testing.T) {
	var busy bytes.Buffer // "busy, come back later" in gzip
	zw := gzip.NewWriter(&busy)
	zw.Write([]byte("busy, come back later"))
	zw.Close()
	// answers are what the server writes; those in closes end with the
	// connection.
	answers := map[string]string{
		"204":                   "HTTP/1.1 204 No Content\r\n\r\n",
		"200 with a body":       "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"404 chunked":           "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nno \r\ne\r\nsuch merchant.\r\n0\r\n\r\n",
		"429 Retry-After":       "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Length: 4\r\n\r\nslow",
		"503 Retry-After date":  "HTTP/1.1 503 Service Unavailable\r\nRetry-After: " + time.Now().Add(time.Minute).UTC().Format(http.TimeFormat) + "\r\nContent-Length: 0\r\n\r\n",
		"302":                   "HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n",
		"503 gzip":              "HTTP/1.1 503 Service Unavailable\r\nContent-Encoding: gzip\r\nContent-Length: " + fmt.Sprint(busy.Len()) + "\r\n\r\n" + busy.String(),
		"103 then 200":          "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
		"500 Connection: close": "HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\nContent-Length: 7\r\n\r\nclosing",
		"400 until close":       "HTTP/1.1 400 Bad Request\r\n\r\nthe body ends with the connection",
		"body cut short":        "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 100\r\n\r\nshort",
		"malformed status":      "HTTP/1.1 OK\r\n\r\n",
		"malformed header":      "HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
		"not HTTP":              "SSH-2.0-OpenSSH_9.6\r\n",
		"closed at once":        "",
	}
	closes := map[string]bool{
		"500 Connection: close": true,
		"400 until close":       true,
		"body cut short":        true,
		"malformed status":      true,
		"malformed header":      true,
		"not HTTP":              true,
		"closed at once":        true,
	}
	pki := kafkaconntest.NewPKI(t, "127.0.0.1")
	for _, scheme := range []string{"http", "https"} {
		for name, raw := range answers {
			t.Run(scheme+"/"+name, func(t *testing.T) {
				answer := func(int) (string, bool) { return raw, closes[name] }
				var p *kafkaconntest.PKI
				if scheme == "https" {
					p = pki
				}
				verdicts := func(make func(*testing.T, HTTPConfig) *HTTP) []verdict {
					srv, trust := startRaw(t, p, answer)
					cfg := httpConfig(srv.URL + "/hook")
					cfg.TLS = trust
					h := make(t, cfg)
					var out []verdict
					for range 3 {
						out = append(out, judged(h.Send(testCtx(t), &shaper.Message{ID: "1", Payload: []byte("x")})))
					}
					return out
				}
				want, got := verdicts(viaTransport), verdicts(newHTTP)
				for i := range want {
					if got[i] == want[i] {
						continue
					}
					// Where net/http itself judges one answer two ways
					// (over TLS, a body cut short reads as the close
					// alert or as the connection's end, whichever comes
					// first), the own client must give one of its
					// judgements.
					if !slices.Contains(want, got[i]) || !slices.ContainsFunc(want, func(v verdict) bool { return v != want[0] }) {
						t.Errorf("attempt %d: own client %+v; net/http %+v (all: %+v)", i, got[i], want[i], want)
					}
				}
			})
		}
	}
}

// A connection the server closes while idle is dropped, and the next
// request goes on a new one; a body longer than maxDrain costs the
// connection, not an unbounded read.
func TestHTTPOwnClientDropsConnectionsItCannotKeep(t *testing.T) {
	var mu sync.Mutex
	opened := 0
	long := false
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		l := long
		mu.Unlock()
		if l {
			w.Write(bytes.Repeat([]byte("y"), 2*maxDrain))
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			opened++
			mu.Unlock()
		}
	}
	srv.Config.IdleTimeout = 50 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	h := newHTTP(t, httpConfig(srv.URL))
	// dropped reports whether the sink holds no connection: the server
	// closed the idle one, and its reader saw that and ended.
	dropped := func() bool { return h.cur.Load().own.Conns() == 0 }
	m := &shaper.Message{ID: "1", Payload: []byte("x")}
	for i := range 3 {
		if err := h.Send(testCtx(t), m); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		testwait.For(t, 10*time.Second, "the server to close the idle connection and the sink to drop it", dropped)
	}
	mu.Lock()
	if opened != 3 {
		t.Errorf("3 requests, each after the server closed the idle connection of the one before, opened %d connections; want 3", opened)
	}
	long, opened = true, 0
	mu.Unlock()
	for i := range 3 {
		if err := h.Send(testCtx(t), m); err != nil {
			t.Fatalf("request %d with a long body: %v", i, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if opened != 3 {
		t.Errorf("3 answers of %d bytes opened %d connections; want 3 (none kept)", 2*maxDrain, opened)
	}
}

// A request that gets no answer ends at its ctx's deadline, or at once
// when its ctx ends, with the errors net/http gives; Close waits for the
// connection's reader, ending what is still in flight when its ctx ends.
func TestHTTPOwnClientRequestsEndAtTheirDeadlineCtxOrClose(t *testing.T) {
	sink := sinktest.Start(t, func(r *http.Request, _ int) sinktest.Action {
		return sinktest.Action{Hang: r.Header.Get("Idempotency-Key") != "warm"}
	})
	cfg := httpConfig(sink.URL)
	cfg.MaxInFlight = 1
	h, err := NewHTTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	warm := func() {
		t.Helper()
		testwait.For(t, 10*time.Second, "the last hanging request to end", func() bool { return sink.Hanging() == 0 })
		if err := h.Send(testCtx(t), &shaper.Message{ID: "warm", Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	send := func(ctx context.Context) <-chan error {
		answer := make(chan error, 1)
		go func() { answer <- h.Send(ctx, &shaper.Message{ID: "hang", Payload: []byte("x")}) }()
		return answer
	}
	wait := func(answer <-chan error, what string, want error) {
		t.Helper()
		select {
		case err := <-answer:
			if !errors.Is(err, want) {
				t.Errorf("%s: Send = %v; want %v", what, err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer within 10s", what)
		}
	}

	warm()
	ctx, cancel := context.WithTimeout(testCtx(t), 100*time.Millisecond)
	defer cancel()
	wait(send(ctx), "a deadline 100ms away", context.DeadlineExceeded)
	warm()
	ctx, cancel = context.WithCancel(testCtx(t))
	answer := send(ctx)
	testwait.For(t, 10*time.Second, "the request to reach the sink", func() bool { return sink.Hanging() == 1 })
	cancel()
	wait(answer, "ctx cancelled", context.Canceled)
	warm()
	answer = send(testCtx(t))
	testwait.For(t, 10*time.Second, "the request to reach the sink", func() bool { return sink.Hanging() == 1 })
	closeCtx, cancelClose := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelClose()
	closed := make(chan error, 1)
	go func() { closed <- h.Close(closeCtx) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10s of its ctx's end")
	}
	select {
	case err := <-answer:
		if err == nil || !strings.Contains(err.Error(), "POST http://"+sink.Addr) {
			t.Errorf("the request in flight at Close: Send = %v; want an error naming the sink", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the request in flight at Close was not answered")
	}
}

// The own client's connections go through WrapConn (the daemon's conn
// knob), each once, over http:// and https:// (where the socket below TLS
// is what it wraps), and every request still gets its answer.
func TestHTTPOwnClientWrapsWhatItDialsWithWrapConn(t *testing.T) {
	for _, tls := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", tls), func(t *testing.T) {
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
			srv := httptest.NewUnstartedServer(handler)
			if tls {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			t.Cleanup(srv.Close)
			var wrapped atomic.Int32
			cfg := httpConfig(srv.URL)
			cfg.WrapConn = func(c net.Conn) net.Conn {
				if _, ok := c.(*net.TCPConn); !ok {
					t.Errorf("WrapConn got a %T; want the socket (*net.TCPConn)", c)
				}
				wrapped.Add(1)
				return c
			}
			if tls {
				cfg.TLS = trustServer(t, srv)
			}
			h := newHTTP(t, cfg)
			for i := range 3 {
				if err := h.Send(testCtx(t), &shaper.Message{ID: strconv.Itoa(i), Payload: []byte("x")}); err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			if got := wrapped.Load(); got != 1 {
				t.Errorf("3 requests in a row wrapped %d connections; want 1 (one connection, kept)", got)
			}
		})
	}
}
