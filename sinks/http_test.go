package sinks

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
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

// httpConfig returns a defaulted config the way the core would pass it.
func httpConfig(url string) HTTPConfig {
	return HTTPConfig{
		URL:          url,
		Method:       http.MethodPost,
		MaxBodyBytes: 10 << 20,
		DeliveryConfig: shaper.DeliveryConfig{
			Timeout:     2 * time.Second,
			MaxInFlight: 8,
		},
	}
}

func newHTTP(t *testing.T, cfg HTTPConfig) *HTTP {
	t.Helper()
	h, err := NewHTTP(cfg)
	if err != nil {
		t.Fatalf("NewHTTP: %v", err)
	}
	closeAtEnd(t, h)
	return h
}

// newServer starts an httptest server on 127.0.0.1 that answers with
// handler, for a test that answers in a way sinktest's rules cannot, or that
// looks at what sinktest does not record (Host, Content-Length, the remote
// address).
func newServer(t *testing.T, handler http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv
}

// testCtx bounds a call that should finish quickly, generously.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestHTTPSendDeliversMethodHeadersIdempotencyKeyAndBody(t *testing.T) {
	type seen struct {
		method, path, query, host string
		header                    http.Header
		body                      []byte
		contentLength             int64
	}
	tests := []struct {
		name    string
		method  string
		headers map[string]string
		payload []byte
	}{
		{"post json", http.MethodPost, map[string]string{"Content-Type": "application/json", "Authorization": "Bearer t0ken"}, []byte(`{"amount":42}`)},
		{"put binary", http.MethodPut, map[string]string{"content-type": "application/octet-stream"}, []byte("a\x00b\r\nc\xff")},
		{"patch empty body", http.MethodPatch, nil, nil},
		{"host header", http.MethodPost, map[string]string{"Host": "psp.example.com"}, []byte("x")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := make(chan seen, 1)
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				body, err := io.ReadAll(r.Body)
				if err != nil {
					t.Errorf("server: read body: %v", err)
				}
				got <- seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Host, r.Header.Clone(), body, r.ContentLength}
			})
			cfg := httpConfig(srv.URL + "/notify?v=1")
			cfg.Method = tt.method
			cfg.Headers = tt.headers
			h := newHTTP(t, cfg)

			m := &shaper.Message{ID: "psp.callbacks/3/1234", Payload: tt.payload}
			code, err := sendCode(testCtx(t), h, m)
			if code != "ok" || err != nil {
				t.Fatalf("Send = %q, %v; want \"ok\", nil", code, err)
			}
			s := <-got
			if s.method != tt.method {
				t.Errorf("method = %q; want %q", s.method, tt.method)
			}
			if s.path != "/notify" || s.query != "v=1" {
				t.Errorf("path, query = %q, %q; want /notify, v=1", s.path, s.query)
			}
			if !bytes.Equal(s.body, tt.payload) {
				t.Errorf("body = %q; want %q", s.body, tt.payload)
			}
			if s.contentLength != int64(len(tt.payload)) {
				t.Errorf("Content-Length = %d; want %d", s.contentLength, len(tt.payload))
			}
			if got := s.header.Get("Idempotency-Key"); got != m.ID {
				t.Errorf("Idempotency-Key = %q; want %q", got, m.ID)
			}
			for k, v := range tt.headers {
				if http.CanonicalHeaderKey(k) == "Host" {
					if s.host != v {
						t.Errorf("Host = %q; want %q", s.host, v)
					}
					continue
				}
				if got := s.header.Get(k); got != v {
					t.Errorf("header %s = %q; want %q", k, got, v)
				}
			}
		})
	}
}

func TestHTTPSendOmitsIdempotencyKeyForEmptyID(t *testing.T) {
	sink := sinktest.Start(t, sinktest.OK)
	h := newHTTP(t, httpConfig(sink.URL))
	if code, err := sendCode(testCtx(t), h, &shaper.Message{Payload: []byte("x")}); code != "ok" || err != nil {
		t.Fatalf("Send = %q, %v; want \"ok\", nil", code, err)
	}
	if v := sink.Requests()[0].Header.Values("Idempotency-Key"); len(v) != 0 {
		t.Errorf("Idempotency-Key = %q; want none", v)
	}
}

func TestHTTPSendSucceedsOnEvery2xx(t *testing.T) {
	for _, status := range []int{200, 201, 202, 204, 206, 299} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			sink := sinktest.Start(t, func(*http.Request, int) sinktest.Action { return sinktest.Action{Status: status} })
			h := newHTTP(t, httpConfig(sink.URL))
			code, err := sendCode(testCtx(t), h, &shaper.Message{ID: "1", Payload: []byte("x")})
			if want := "ok"; code != want || err != nil {
				t.Errorf("Send = %q, %v; want %q, nil", code, err, want)
			}
		})
	}
}

func TestHTTPSendReturnsStatusErrorWithCodeAndBodyExcerpt(t *testing.T) {
	long := strings.Repeat("x", 2000)
	tests := []struct {
		status   int
		body     string
		wantBody string
	}{
		{301, "moved", "moved"}, // not followed: the sink must be configured with the final URL
		{400, `{"error":"bad signature"}`, `{"error":"bad signature"}`},
		{404, "", ""},
		{408, "request timeout\n", "request timeout"},
		{409, "line one\r\nline two\x00\x1b[31m", "line one line two [31m"},
		{429, "slow down", "slow down"},
		{500, long, long[:512]},
		{502, "bad gateway", "bad gateway"},
		{503, "unavailable", "unavailable"},
		{504, "gateway timeout", "gateway timeout"},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.status), func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Location", "/elsewhere")
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			h := newHTTP(t, httpConfig(srv.URL))
			code, err := sendCode(testCtx(t), h, &shaper.Message{ID: "1", Payload: []byte("x")})
			if want := strconv.Itoa(tt.status); code != want {
				t.Errorf("code = %q; want %q", code, want)
			}
			var se *shaper.StatusError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v (%T); want *shaper.StatusError", err, err)
			}
			if se.Code != tt.status {
				t.Errorf("Code = %d; want %d", se.Code, tt.status)
			}
			if se.Body != tt.wantBody {
				t.Errorf("Body = %q; want %q", se.Body, tt.wantBody)
			}
			if !se.RetryAfter.IsZero() {
				t.Errorf("RetryAfter = %v; want zero without a Retry-After header", se.RetryAfter)
			}
		})
	}
}

func TestHTTPSendParsesRetryAfterIntoStatusError(t *testing.T) {
	date := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	tests := []struct {
		name       string
		status     int
		retryAfter string
		// want returns the earliest and latest RetryAfter, given the times
		// just before and after Send.
		want func(before, after time.Time) (time.Time, time.Time)
	}{
		{"429 seconds", 429, "120", func(b, a time.Time) (time.Time, time.Time) {
			return b.Add(120 * time.Second), a.Add(120 * time.Second)
		}},
		{"503 http date", 503, date.Format(http.TimeFormat), func(b, a time.Time) (time.Time, time.Time) {
			return date, date
		}},
		{"503 garbage", 503, "soon", func(b, a time.Time) (time.Time, time.Time) {
			return time.Time{}, time.Time{}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := sinktest.Start(t, func(*http.Request, int) sinktest.Action {
				return sinktest.Action{Status: tt.status, RetryAfter: tt.retryAfter}
			})
			h := newHTTP(t, httpConfig(sink.URL))
			before := time.Now()
			_, err := sendCode(testCtx(t), h, &shaper.Message{ID: "1", Payload: []byte("x")})
			after := time.Now()
			var se *shaper.StatusError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v; want *shaper.StatusError", err)
			}
			lo, hi := tt.want(before, after)
			if se.RetryAfter.Before(lo) || se.RetryAfter.After(hi) {
				t.Errorf("RetryAfter = %v; want within [%v, %v]", se.RetryAfter, lo, hi)
			}
		})
	}
}

func TestHTTPSendRejectsOversizedPayloadWithoutRequest(t *testing.T) {
	sink := sinktest.Start(t, sinktest.OK)
	cfg := httpConfig(sink.URL)
	cfg.MaxBodyBytes = 16
	h := newHTTP(t, cfg)

	code, err := sendCode(testCtx(t), h, &shaper.Message{ID: "1", Payload: make([]byte, 17)})
	if code != "" || !errors.Is(err, shaper.ErrMalformed) {
		t.Fatalf("Send(17 bytes) = %q, %v; want \"\", ErrMalformed", code, err)
	}
	if !strings.Contains(err.Error(), "17") || !strings.Contains(err.Error(), "16") {
		t.Errorf("error %q does not give the sizes 17 and 16", err)
	}
	if n := sink.RequestCount(); n != 0 {
		t.Errorf("server saw %d requests; want 0", n)
	}
	// The limit itself is allowed.
	if code, err := sendCode(testCtx(t), h, &shaper.Message{ID: "1", Payload: make([]byte, 16)}); code != "ok" || err != nil {
		t.Errorf("Send(16 bytes) = %q, %v; want \"ok\", nil", code, err)
	}
}

func TestHTTPSendRejectsIDThatCouldInjectHeadersWithoutRequest(t *testing.T) {
	sink := sinktest.Start(t, sinktest.OK)
	h := newHTTP(t, httpConfig(sink.URL))
	tests := []struct {
		name string
		id   string
	}{
		{"crlf header injection", "id-1\r\nX-Injected: yes"},
		{"lf", "id-1\nX-Injected: yes"},
		{"cr", "id-1\r"},
		{"nul", "id\x00"},
		{"tab", "id\t"},
		{"escape", "id\x1b"},
		{"del", "id\x7f"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, err := sendCode(testCtx(t), h, &shaper.Message{ID: tt.id, Payload: []byte("x")})
			if code != "" || !errors.Is(err, shaper.ErrMalformed) {
				t.Errorf("Send(ID %q) = %q, %v; want \"\", ErrMalformed", tt.id, code, err)
			}
		})
	}
	if n := sink.RequestCount(); n != 0 {
		t.Errorf("server saw %d requests; want 0", n)
	}
}

func TestHTTPSendReturnsPromptlyWhenServerHangsPastDeadline(t *testing.T) {
	sink := sinktest.Start(t, func(*http.Request, int) sinktest.Action { return sinktest.Action{Hang: true} })
	cfg := httpConfig(sink.URL)
	cfg.Timeout = time.Minute // the ctx, not the transport, must end the attempt
	h := newHTTP(t, cfg)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	var code string
	var err error
	go func() {
		defer close(done)
		code, err = sendCode(ctx, h, &shaper.Message{ID: "1", Payload: []byte("x")})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Send still running 10s after a 100ms deadline")
	}
	if code != "error" || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Send = %q, %v; want \"error\", context.DeadlineExceeded", code, err)
	}
}

func TestHTTPSendReportsConnectionRefusedAsRetryableError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now

	cfg := httpConfig("http://user:s3cret-password@" + addr + "/hooks/s3cret-path?api_key=s3cret-query")
	cfg.Headers = map[string]string{"Authorization": "Bearer s3cret-header"}
	h := newHTTP(t, cfg)
	code, err := sendCode(testCtx(t), h, &shaper.Message{ID: "1", Payload: []byte("x")})
	if code != "error" || err == nil {
		t.Fatalf("Send = %q, %v; want \"error\" and an error", code, err)
	}
	var se *shaper.StatusError
	if errors.As(err, &se) || errors.Is(err, shaper.ErrMalformed) {
		t.Errorf("err = %v; want neither a StatusError nor ErrMalformed, so that it is retried", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("err = %q; it must not carry the URL's userinfo, path, query or header values", err)
	}
	if want := "POST http://" + addr; !strings.Contains(err.Error(), want) {
		t.Errorf("err = %q; want it to name %q", err, want)
	}
}

func TestHTTPKeepAliveOpensAtMostMaxInFlightConnections(t *testing.T) {
	var mu sync.Mutex
	opened := 0
	var slow atomic.Bool
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if slow.Load() {
			// Long enough for a burst to overlap, so it needs every
			// connection; no assertion depends on it.
			select {
			case <-time.After(5 * time.Millisecond):
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			opened++
			mu.Unlock()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	cfg := httpConfig(srv.URL)
	cfg.MaxInFlight = 8
	h := newHTTP(t, cfg)
	send := func(i int) error {
		code, err := sendCode(testCtx(t), h, &shaper.Message{ID: strconv.Itoa(i), Payload: []byte("x")})
		if code != "ok" || err != nil {
			return fmt.Errorf("Send(%d) = %q, %v; want \"ok\", nil", i, code, err)
		}
		return nil
	}

	for i := range 100 {
		if err := send(i); err != nil {
			t.Fatal(err)
		}
	}
	// Bursts of 10, more than MaxInFlight: the surplus waits for a
	// connection instead of opening one, and the connections of one burst
	// must stay open, idle, for the next.
	slow.Store(true)
	for burst := range 10 {
		var wg sync.WaitGroup
		errs := make(chan error, 10)
		for i := range 10 {
			wg.Go(func() { errs <- send(100 + 10*burst + i) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
	}

	mu.Lock()
	defer mu.Unlock()
	if opened > 8 {
		t.Errorf("200 requests opened %d connections; want at most 8 (MaxInFlight)", opened)
	}
	if opened == 0 {
		t.Errorf("opened 0 connections; ConnState not called?")
	}
}

func TestNewHTTPRejectsInvalidConfigWithoutShowingHeaderValues(t *testing.T) {
	tests := []struct {
		name    string
		url     string
		method  string
		headers map[string]string
	}{
		{"ftp url", "ftp://example.com/x", "POST", nil},
		{"no host", "http:///x", "POST", nil},
		{"method with space", "http://example.com", "PO ST", nil},
		{"header name with colon", "http://example.com", "POST", map[string]string{"X-A:b": "v"}},
		{"header value with newline", "http://example.com", "POST", map[string]string{"Authorization": "Bearer s3cret\r\nX-Evil: 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := httpConfig(tt.url)
			cfg.Method = tt.method
			cfg.Headers = tt.headers
			h, err := NewHTTP(cfg)
			if err == nil {
				h.Close(context.Background())
				t.Fatalf("NewHTTP(%s) = nil error; want one", tt.name)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("err = %q; it must not show header values", err)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	maxDelay := time.Duration(1<<63-1) / time.Second * time.Second
	tests := []struct {
		give   string
		want   time.Time
		wantOK bool
	}{
		{"0", now, true},
		{"120", now.Add(120 * time.Second), true},
		{" 30 ", now.Add(30 * time.Second), true},
		{"007", now.Add(7 * time.Second), true},
		{"9223372036", now.Add(9223372036 * time.Second), true},                                // the longest Duration in seconds
		{"9223372037", now.Add(maxDelay), true},                                                // one more: held, no overflow
		{"99999999999999999999999999", now.Add(maxDelay), true},                                // beyond int64: held
		{"Sun, 01 Mar 2026 12:05:00 GMT", time.Date(2026, 3, 1, 12, 5, 0, 0, time.UTC), true},  // RFC 1123
		{"Sunday, 01-Mar-26 12:05:00 GMT", time.Date(2026, 3, 1, 12, 5, 0, 0, time.UTC), true}, // RFC 850
		{"Sun Mar  1 12:05:00 2026", time.Date(2026, 3, 1, 12, 5, 0, 0, time.UTC), true},       // ANSI C asctime
		{"Thu, 01 Jan 2026 00:00:00 GMT", now, true},                                           // past date: now
		{"Sun, 01 Mar 2026 12:00:00 GMT", now, true},                                           // now itself
		{"", time.Time{}, false},
		{"soon", time.Time{}, false},
		{"-5", time.Time{}, false},
		{"+5", time.Time{}, false},
		{"1.5", time.Time{}, false},
		{"12s", time.Time{}, false},
		{"2026-03-01T12:05:00Z", time.Time{}, false}, // RFC 3339 is not an HTTP-date
	}
	for _, tt := range tests {
		got, ok := ParseRetryAfter(tt.give, now)
		if ok != tt.wantOK || !got.Equal(tt.want) {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.give, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestExcerptIsPrintableSingleLineAndNoLongerThanInput(t *testing.T) {
	tests := []struct {
		give string
		want string
	}{
		{"plain", "plain"},
		{"  padded\t\n", "padded"},
		{"a\r\nb\n\nc", "a b c"},
		{"nul\x00bell\x07del\x7f", "nul bell del"},
		{"bad \xff utf8", "bad ? utf8"},
		{"cut rune \xe2\x82", "cut rune"}, // an € cut off by the read limit
		{"euro €", "euro €"},
		{"zero\u200bwidth", "zero width"}, // not printable
	}
	for _, tt := range tests {
		got := excerpt([]byte(tt.give))
		if got != tt.want {
			t.Errorf("excerpt(%q) = %q; want %q", tt.give, got, tt.want)
		}
		if len(got) > len(tt.give) {
			t.Errorf("excerpt(%q) is %d bytes; want at most %d", tt.give, len(got), len(tt.give))
		}
	}
}

// seenRequest is what headerServer saw of a request.
type seenRequest struct {
	header        http.Header
	host          string
	contentLength int64
	chunked       bool
	remote        string
	body          []byte
}

// headerServer starts a server that hands over the headers, host, length and
// remote address of each request it receives: what sinktest does not record.
func headerServer(t *testing.T) (*httptest.Server, chan seenRequest) {
	t.Helper()
	got := make(chan seenRequest, 16)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- seenRequest{r.Header.Clone(), r.Host, r.ContentLength, len(r.TransferEncoding) > 0, r.RemoteAddr, body}
	})
	return srv, got
}

func sendHTTP(t *testing.T, h *HTTP, m *shaper.Message) {
	t.Helper()
	if code, err := sendCode(testCtx(t), h, m); code != "ok" || err != nil {
		t.Fatalf("Send = %q, %v; want \"ok\", nil", code, err)
	}
}

// Message headers go out under their own names only with forward_headers,
// and a configured header wins over a forwarded one of the same name.
func TestHTTPForwardHeadersSendsMessageHeadersUnderTheirNamesBelowConfiguredOnes(t *testing.T) {
	tests := []struct {
		name    string
		forward bool              // forward_headers
		headers map[string]string // configured headers
		give    *shaper.Message
		want    map[string][]string // as the server saw them; none: absent
	}{
		{
			name:    "forwarded under their names",
			forward: true,
			give: &shaper.Message{ID: "topic/0/1", Payload: []byte("{}"), Header: map[string][]string{
				"traceparent":  {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
				"Content-Type": {"application/json"},
				"X-Multi":      {"one", "two"},
				"x-multi":      {"three"}, // differs in case only: the same HTTP header
				"X-Padded":     {"  value \t"},
				"X-Utf8":       {"café"},
				"X-Empty":      {""},
			}},
			want: map[string][]string{
				"Traceparent":     {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
				"Content-Type":    {"application/json"},
				"X-Multi":         {"one", "two", "three"},
				"X-Padded":        {"value"},
				"X-Utf8":          {"café"},
				"X-Empty":         {""},
				"Idempotency-Key": {"topic/0/1"},
			},
		},
		{
			name: "none without forward_headers",
			give: &shaper.Message{ID: "1", Payload: []byte("x"), Header: map[string][]string{"X-Trace": {"abc"}}},
			want: map[string][]string{"X-Trace": nil},
		},
		{
			name:    "configured ones win",
			forward: true,
			headers: map[string]string{"Authorization": "Bearer configured", "content-type": "application/json"},
			give: &shaper.Message{ID: "1", Payload: []byte("{}"), Header: map[string][]string{
				"authorization": {"Bearer forged"},
				"Content-Type":  {"text/plain"},
				"X-Other":       {"kept"},
			}},
			want: map[string][]string{
				"Authorization": {"Bearer configured"},
				"Content-Type":  {"application/json"},
				"X-Other":       {"kept"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := sinktest.Start(t, sinktest.OK)
			cfg := httpConfig(sink.URL)
			cfg.ForwardHeaders, cfg.Headers = tt.forward, tt.headers
			sendHTTP(t, newHTTP(t, cfg), tt.give)
			got := sink.Requests()[0].Header
			for name, want := range tt.want {
				if v := got.Values(name); !slices.Equal(v, want) {
					t.Errorf("%s = %q; want %q", name, v, want)
				}
			}
		})
	}
}

func TestHTTPForwardHeadersSkipsInvalidNamesAndValuesAndNeverInjects(t *testing.T) {
	srv, got := headerServer(t)
	cfg := httpConfig(srv.URL)
	cfg.ForwardHeaders = true
	h := newHTTP(t, cfg)

	sendHTTP(t, h, &shaper.Message{ID: "1", Payload: []byte("x"), Header: map[string][]string{
		"X-Crlf":              {"a\r\nX-Injected: 1", "kept"},
		"X-Lf":                {"a\nX-Injected: 2"},
		"X-Cr":                {"a\rX-Injected: 3"},
		"X-Nul":               {"a\x00b"},
		"X-Del":               {"a\x7fb"},
		"X-Bad\r\nX-Injected": {"4"},
		"Bad Name":            {"5"},
		"Bad:Name":            {"6"},
		"":                    {"7"},
		":authority":          {"evil.example"},
		"X-Ünicode":           {"8"},
		"X-Ok":                {"fine"},
	}})
	s := <-got
	if v := s.header.Values("X-Injected"); len(v) != 0 {
		t.Errorf("X-Injected = %q; a header value or name injected a header", v)
	}
	if v := s.header.Values("X-Crlf"); !slices.Equal(v, []string{"kept"}) {
		t.Errorf("X-Crlf = %q; want only the valid value \"kept\"", v)
	}
	if v := s.header.Get("X-Ok"); v != "fine" {
		t.Errorf("X-Ok = %q; want \"fine\"", v)
	}
	for name := range s.header {
		switch name {
		case "X-Crlf", "X-Ok", "Idempotency-Key", "Content-Length", "Accept-Encoding", "User-Agent":
		default:
			t.Errorf("server saw header %q = %q; want it left out", name, s.header[name])
		}
	}
	if !strings.HasPrefix(s.host, "127.0.0.1:") {
		t.Errorf("Host = %q; want the server's address", s.host)
	}
}

func TestHTTPForwardHeadersNeverForwardsHopByHopOrFramingHeaders(t *testing.T) {
	srv, got := headerServer(t)
	cfg := httpConfig(srv.URL)
	cfg.ForwardHeaders = true
	h := newHTTP(t, cfg)

	forged := map[string][]string{
		"Host":                {"evil.example"},
		"content-length":      {"999"},
		"TRANSFER-ENCODING":   {"chunked"},
		"Connection":          {"close, X-Kept"},
		"Keep-Alive":          {"timeout=1"},
		"Proxy-Connection":    {"close"},
		"Proxy-Authorization": {"Basic Zm9yZ2Vk"},
		"Proxy-Authenticate":  {"Basic"},
		"TE":                  {"trailers"},
		"Trailer":             {"X-Late"},
		"Upgrade":             {"websocket"},
		"Expect":              {"100-continue"},
		"Http2-Settings":      {"AAMAAABkAARAAAAAAAIAAAAA"},
		"idempotency-key":     {"forged"},
		"X-Kept":              {"yes"},
	}
	payload := []byte("twelve bytes")
	for range 2 {
		sendHTTP(t, h, &shaper.Message{ID: "topic/1/9", Payload: payload, Header: forged})
	}
	first, second := <-got, <-got
	for _, s := range []seenRequest{first, second} {
		if !strings.HasPrefix(s.host, "127.0.0.1:") {
			t.Errorf("Host = %q; want the server's address", s.host)
		}
		if s.contentLength != int64(len(payload)) || s.chunked || string(s.body) != string(payload) {
			t.Errorf("Content-Length %d, chunked %v, body %q; want %d, false, %q", s.contentLength, s.chunked, s.body, len(payload), payload)
		}
		for _, name := range []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate",
			"Te", "Trailer", "Upgrade", "Expect", "Http2-Settings", "Transfer-Encoding"} {
			if v := s.header.Values(name); len(v) != 0 {
				t.Errorf("%s = %q; want it never forwarded", name, v)
			}
		}
		if v := s.header.Values("Idempotency-Key"); !slices.Equal(v, []string{"topic/1/9"}) {
			t.Errorf("Idempotency-Key = %q; want only the message id", v)
		}
		if v := s.header.Get("X-Kept"); v != "yes" {
			t.Errorf("X-Kept = %q; want \"yes\"", v)
		}
	}
	// A forwarded "Connection: close" would have closed the first connection.
	if first.remote != second.remote {
		t.Errorf("requests came from %s and %s; want one kept-alive connection", first.remote, second.remote)
	}
}

func TestHTTPKeyHeaderCarriesTheKeyOverAForwardedHeader(t *testing.T) {
	sink := sinktest.Start(t, sinktest.OK)
	cfg := httpConfig(sink.URL)
	cfg.ForwardHeaders = true
	cfg.KeyHeader = "x-kafka-key"
	h := newHTTP(t, cfg)

	sendHTTP(t, h, &shaper.Message{ID: "1", Key: []byte("order-42"), Payload: []byte("x"),
		Header: map[string][]string{"X-Kafka-Key": {"forged"}}})
	if v := sink.Requests()[0].Header.Values("X-Kafka-Key"); !slices.Equal(v, []string{"order-42"}) {
		t.Errorf("X-Kafka-Key = %q; want only the message key", v)
	}

	sendHTTP(t, h, &shaper.Message{ID: "2", Payload: []byte("x")})
	if v := sink.Requests()[1].Header.Values("X-Kafka-Key"); len(v) != 0 {
		t.Errorf("X-Kafka-Key of a message without a key = %q; want none", v)
	}
}

func TestHTTPInvalidKeyIsMalformedWithoutRequest(t *testing.T) {
	sink := sinktest.Start(t, sinktest.OK)
	cfg := httpConfig(sink.URL)
	cfg.KeyHeader = "X-Key"
	h := newHTTP(t, cfg)

	tests := []struct {
		name string
		key  []byte
	}{
		{"CR LF", []byte("a\r\nX-Injected: 1")},
		{"LF", []byte("a\nb")},
		{"NUL of a binary key", []byte{0, 0, 0, 0, 42}},
		{"DEL", []byte("a\x7f")},
		{"tab", []byte("a\tb")},
		{"leading space", []byte(" a")},
		{"trailing space", []byte("a ")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, err := sendCode(testCtx(t), h, &shaper.Message{ID: "1", Key: tt.key, Payload: []byte("x")})
			if code != "" || !errors.Is(err, shaper.ErrMalformed) {
				t.Errorf("Send(key %q) = %q, %v; want \"\", ErrMalformed", tt.key, code, err)
			}
		})
	}
	if n := sink.RequestCount(); n != 0 {
		t.Errorf("server saw %d requests; want 0", n)
	}
}

func TestNewHTTPRejectsKeyHeaderThatCannotCarryTheKey(t *testing.T) {
	tests := []struct {
		name      string
		keyHeader string
		headers   map[string]string
	}{
		{"invalid name", "X Key", nil},
		{"Idempotency-Key", "idempotency-key", nil},
		{"Host", "Host", nil},
		{"Content-Length", "Content-Length", nil},
		{"Connection", "connection", nil},
		{"also a configured header", "X-Key", map[string]string{"x-key": "static"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := httpConfig("http://127.0.0.1:1/")
			cfg.KeyHeader, cfg.Headers = tt.keyHeader, tt.headers
			h, err := NewHTTP(cfg)
			if err == nil {
				_ = h.Close(context.Background())
				t.Fatalf("NewHTTP(key_header %q) = nil error; want one", tt.keyHeader)
			}
			if !strings.Contains(err.Error(), "key_header") {
				t.Errorf("NewHTTP(key_header %q) = %v; want it to name key_header", tt.keyHeader, err)
			}
		})
	}
}

func TestHTTPReconfigureAppliesNewHeadersAndURLToTheNextSend(t *testing.T) {
	sink := sinktest.Start(t, sinktest.OK)
	base := "http://" + sink.Addr
	cfg := httpConfig(base + "/v1")
	cfg.Headers = map[string]string{"X-Psp": "old"}
	h, err := NewHTTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	ctx := context.Background()
	if _, err := sendCode(ctx, h, &shaper.Message{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	next := httpConfig(base + "/v2")
	next.Headers = map[string]string{"X-Psp": "new"}
	if err := h.Reconfigure(next); err != nil {
		t.Fatalf("Reconfigure = %v", err)
	}
	if _, err := sendCode(ctx, h, &shaper.Message{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	type seen struct{ path, psp string }
	for i, want := range []seen{{"/v1", "old"}, {"/v2", "new"}} {
		r := sink.Requests()[i]
		if s := (seen{r.URI, r.Header.Get("X-Psp")}); s != want {
			t.Errorf("request = %+v; want %+v", s, want)
		}
	}
	bad := httpConfig("ftp://nowhere")
	if err := h.Reconfigure(bad); err == nil {
		t.Error("Reconfigure(ftp URL) = nil; want an error, and the old settings kept")
	}
	if _, err := sendCode(ctx, h, &shaper.Message{ID: "c"}); err != nil {
		t.Errorf("Send after a refused Reconfigure = %v", err)
	}
	if uri := sink.Requests()[2].URI; uri != "/v2" {
		t.Errorf("after a refused Reconfigure the request went to %s; want /v2", uri)
	}
}

func TestHTTPSendTakesBasicAuthFromTheURLUnlessAnAuthorizationHeaderIsConfigured(t *testing.T) {
	tests := []struct {
		name    string
		headers map[string]string
		want    string
	}{
		{"from the url", nil, "Basic " + base64.StdEncoding.EncodeToString([]byte("u@ser:p:ss"))},
		{"configured header wins", map[string]string{"authorization": "Bearer t0ken-of-the-config"}, "Bearer t0ken-of-the-config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := make(chan string, 2)
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				got <- r.Header.Get("Authorization")
			})
			cfg := httpConfig(strings.Replace(srv.URL, "http://", "http://u%40ser:p%3Ass@", 1) + "/cb")
			cfg.Headers = tt.headers
			h := newHTTP(t, cfg)
			for i := range 2 { // the second request must carry it too
				if code, err := sendCode(testCtx(t), h, &shaper.Message{ID: fmt.Sprint(i), Payload: []byte("x")}); code != "ok" || err != nil {
					t.Fatalf("Send = %q, %v; want \"ok\", nil", code, err)
				}
				if a := <-got; a != tt.want {
					t.Errorf("request %d: Authorization = %q; want %q", i, a, tt.want)
				}
			}
		})
	}
}

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
