package sinks

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/shaper"
)

// viaTransport returns an HTTP sink of cfg whose requests go through
// net/http's Transport, as those of an https:// URL do, for comparing the
// sink's own client with it.
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
	s.transport, s.pool = s.newTransport(cfg, nil, (&net.Dialer{}).DialContext), nil
}

// startOrSend is one attempt through Start, or through Send when Start
// declines; it reports whether Start took it.
func startOrSend(t *testing.T, h *HTTP, m *shaper.Message, timeout time.Duration) (started bool, err error) {
	t.Helper()
	answer := make(chan error, 1)
	if h.Start(testCtx(t), m, timeout, func(err error) { answer <- err }) {
		select {
		case err := <-answer:
			return true, err
		case <-time.After(10 * time.Second):
			t.Fatal("Start's done not called within 10s")
		}
	}
	ctx, cancel := context.WithTimeout(testCtx(t), timeout)
	defer cancel()
	return false, h.Send(ctx, m)
}

// The sink's own client writes, byte for byte, the requests net/http's
// Transport writes: through Send and through Start, with configured,
// forwarded, key and signature headers, basic auth from the URL, a Host
// of its own, and an empty payload.
func TestHTTPOwnClientWritesByteForByteWhatNetHTTPWrites(t *testing.T) {
	msgs := []*shaper.Message{
		{ID: "psp/3/1234", Key: []byte("merchant-7"), Payload: []byte(`{"amount":42,"note":"café"}`),
			Header: map[string][]string{"Trace-Id": {"abc"}, "X-Multi": {"1", "2"}}},
		{ID: "psp/3/1235", Payload: []byte{}},
		{ID: "psp/3/1236", Payload: bytes.Repeat([]byte("x"), startMaxBody)},
	}
	fixed := time.Unix(1_800_000_000, 0)
	paths := []struct {
		name  string
		make  func(t *testing.T, cfg HTTPConfig) *HTTP
		start bool
	}{
		{"net/http", viaTransport, false},
		{"own Send", newHTTP, false},
		{"own Start", newHTTP, true},
	}
	var raw [][]byte
	for _, p := range paths {
		sink := sinktest.Start(t, sinktest.OK)
		cfg := httpConfig("http://user:pa55@" + sink.Addr + "/notify?merchant=7")
		cfg.Headers = map[string]string{"X-Api-Key": "k-123", "Host": "callbacks.example", "User-Agent": "psp-notifier/1"}
		cfg.ForwardHeaders = true
		cfg.KeyHeader = "Merchant-Id"
		cfg.Signing = &SigningConfig{Scheme: "shaper", Secret: testSecret}
		h := p.make(t, cfg)
		h.cur.Load().now = func() time.Time { return fixed }
		starts := 0
		for _, m := range append(msgs, msgs...) {
			var started bool
			var err error
			if p.start {
				started, err = startOrSend(t, h, m, 2*time.Second)
			} else {
				err = h.Send(testCtx(t), m)
			}
			if err != nil {
				t.Fatalf("%s: %s: %v", p.name, m.ID, err)
			}
			if started {
				starts++
			}
		}
		if p.start && starts != 2*len(msgs)-1 {
			t.Errorf("Start took %d of %d; want all but the first (no connection yet)", starts, 2*len(msgs))
		}
		conns := sink.RawConns()
		if len(conns) != 1 {
			t.Fatalf("%s: %d connections; want 1, kept alive", p.name, len(conns))
		}
		raw = append(raw, conns[0])
	}
	if !bytes.Contains(raw[0], []byte("Accept-Encoding: gzip\r\n\r\n")) {
		t.Fatalf("net/http's requests have no Accept-Encoding: gzip as their last header:\n%s", raw[0][:400])
	}
	for i := 1; i < len(raw); i++ {
		if !bytes.Equal(raw[i], raw[0]) {
			a, b := string(raw[0]), string(raw[i])
			n := 0
			for n < min(len(a), len(b)) && a[n] == b[n] {
				n++
			}
			t.Errorf("%s wrote other bytes than net/http, from byte %d:\nnet/http: %q\n%s: %q", paths[i].name, n, a[n:min(n+120, len(a))], paths[i].name, b[n:min(n+120, len(b))])
		}
	}
}

// Every answer means the same through the sink's own client as through
// net/http: 2xx, an error status with its body, a Retry-After, a redirect
// (not followed), a gzip body, 1xx answers before the final one, a
// connection closed after the answer.
func TestHTTPOwnClientJudgesEveryAnswerAsNetHTTPDoes(t *testing.T) {
	gz := func(s string) []byte {
		var b bytes.Buffer
		z := gzip.NewWriter(&b)
		z.Write([]byte(s))
		z.Close()
		return b.Bytes()
	}
	answers := map[string]http.HandlerFunc{
		"204": func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) },
		"404 with a body": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte("no such merchant"))
		},
		"429 Retry-After": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
		},
		"302": func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/elsewhere", http.StatusFound) },
		"503 gzip": func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Accept-Encoding") != "gzip" {
				t.Errorf("Accept-Encoding = %q; want gzip", r.Header.Get("Accept-Encoding"))
			}
			w.Header().Set("Content-Encoding", "gzip")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write(gz("busy, come back later"))
		},
		"103 then 200": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusOK)
		},
		"500 Connection: close": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte("closing"))
		},
	}
	type verdict struct {
		code, body string
		retryAfter time.Duration // rounded to seconds
	}
	judge := func(err error) verdict {
		v := verdict{code: shaper.RequestCode(err)}
		var se *shaper.StatusError
		if errors.As(err, &se) {
			v.body = se.Body
			if !se.RetryAfter.IsZero() {
				v.retryAfter = time.Until(se.RetryAfter).Round(time.Second)
			}
		}
		return v
	}
	for name, answer := range answers {
		t.Run(name, func(t *testing.T) {
			srv := newServer(t, answer)
			m := &shaper.Message{ID: "1", Payload: []byte("x")}
			want := judge(viaTransport(t, httpConfig(srv.URL)).Send(testCtx(t), m))
			own := newHTTP(t, httpConfig(srv.URL))
			for i := range 3 { // Send, then Start where a connection was kept
				started, err := startOrSend(t, own, m, 2*time.Second)
				if got := judge(err); got != want {
					t.Errorf("attempt %d (Start took it: %v) = %+v; net/http's = %+v", i, started, got, want)
				}
			}
		})
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
	pool := h.cur.Load().pool
	// dropped reports whether the sink holds no connection: the server
	// closed the idle one, and its reader saw that and ended.
	dropped := func() bool {
		pool.mu.Lock()
		defer pool.mu.Unlock()
		return len(pool.conns) == 0
	}
	m := &shaper.Message{ID: "1", Payload: []byte("x")}
	for i := range 3 {
		if _, err := startOrSend(t, h, m, 2*time.Second); err != nil {
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
		if _, err := startOrSend(t, h, m, 2*time.Second); err != nil {
			t.Fatalf("request %d with a long body: %v", i, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if opened != 3 {
		t.Errorf("3 answers of %d bytes opened %d connections; want 3 (none kept)", 2*maxDrain, opened)
	}
}

// Start declines what it cannot write at once, and sends nothing then.
func TestHTTPStartDeclinesWhatItCannotWriteAtOnce(t *testing.T) {
	sink := sinktest.Start(t, sinktest.OK)
	h := newHTTP(t, httpConfig(sink.URL))
	never := func(error) { t.Error("done called for a declined Start") }
	m := &shaper.Message{ID: "1", Payload: []byte("x")}
	if h.Start(testCtx(t), m, time.Second, never) {
		t.Fatal("Start took a request with no connection open; want it declined (dialling is not for the scheduler)")
	}
	if err := h.Send(testCtx(t), m); err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]*shaper.Message{
		"a payload over 8 KiB": {ID: "2", Payload: make([]byte, startMaxBody+1)},
		"an id with a newline": {ID: "3\nX-Evil: 1", Payload: []byte("x")},
	} {
		if h.Start(testCtx(t), m, time.Second, never) {
			t.Errorf("Start took %s; want it declined", name)
		}
	}
	tls := newHTTP(t, httpConfig("https://"+sink.Addr+"/"))
	if tls.Start(testCtx(t), m, time.Second, never) {
		t.Error("Start took a request to an https:// URL; want it declined (net/http sends those)")
	}
	if n := sink.RequestCount(); n != 1 {
		t.Errorf("the sink saw %d requests; want 1 (the Send)", n)
	}
}

// A started request that gets no answer ends at its timeout, or at once
// when its ctx ends, with the errors net/http gives; Close waits for the
// connection's reader, ending what is still in flight when its ctx ends.
func TestHTTPStartedRequestsEndAtTheirTimeoutCtxOrClose(t *testing.T) {
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
		if err := h.Send(testCtx(t), &shaper.Message{ID: "warm", Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	start := func(ctx context.Context, timeout time.Duration) <-chan error {
		t.Helper()
		answer := make(chan error, 1)
		if !h.Start(ctx, &shaper.Message{ID: "hang", Payload: []byte("x")}, timeout, func(err error) { answer <- err }) {
			t.Fatal("Start declined with an idle connection")
		}
		return answer
	}
	wait := func(answer <-chan error, what string, want error) {
		t.Helper()
		select {
		case err := <-answer:
			if !errors.Is(err, want) {
				t.Errorf("%s: done(%v); want %v", what, err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer within 10s", what)
		}
	}

	warm()
	wait(start(testCtx(t), 100*time.Millisecond), "timeout of 100ms", context.DeadlineExceeded)
	warm()
	ctx, cancel := context.WithCancel(testCtx(t))
	answer := start(ctx, time.Minute)
	testwait.For(t, 10*time.Second, "the request to reach the sink", func() bool { return sink.Hanging() == 1 })
	cancel()
	wait(answer, "ctx cancelled", context.Canceled)
	warm()
	answer = start(testCtx(t), time.Minute)
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
			t.Errorf("the request in flight at Close: done(%v); want an error naming the sink", err)
		}
	default:
		t.Error("Close returned before the request in flight was answered")
	}
}

// A connection's reader hands an answer to its done after the connection
// is idle again, and done may take long (an ack, a dead letter). The
// answer to the next request on that connection, which came in time, is
// read after done returns, past the request's deadline: it is still an
// answer, not a timeout.
func TestHTTPAnAnswerReadLateBehindASlowDoneIsNoTimeout(t *testing.T) {
	sink := sinktest.Start(t, sinktest.OK)
	cfg := httpConfig(sink.URL)
	cfg.MaxInFlight = 1
	h := newHTTP(t, cfg)
	if err := h.Send(testCtx(t), &shaper.Message{ID: "warm", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	const timeout = 100 * time.Millisecond
	first, second := make(chan error, 1), make(chan error, 1)
	// The first done, a slow settle on the reader, returns once the second
	// request's deadline has passed (or the test ends).
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before newHTTP's Close, which waits for the reader
	if !h.Start(testCtx(t), &shaper.Message{ID: "1", Payload: []byte("x")}, time.Second, func(err error) {
		first <- err
		<-release
	}) {
		t.Fatal("Start declined with an idle connection")
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if !h.Start(testCtx(t), &shaper.Message{ID: "2", Payload: []byte("x")}, timeout, func(err error) { second <- err }) {
		t.Fatal("Start declined with the connection idle again")
	}
	// Start set the request's deadline, timeout from then: this fires
	// after it.
	time.AfterFunc(timeout, free)
	select {
	case err := <-second:
		if err != nil {
			t.Errorf("the second request, answered at once and read past its deadline: %v; want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer within 10s")
	}
}
