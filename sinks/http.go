package sinks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http/httpproxy"

	"github.com/shaper-dev/shaper/internal/tlsconf"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/webhook"
)

const (
	// maxErrorBody is how much of a non-2xx response body StatusError.Body
	// keeps: enough to say why, small enough for a Shaper-Error header.
	maxErrorBody = 512
	// maxDrain is how much of a response body is read and thrown away so
	// the connection can carry the next request. A longer body costs a new
	// connection rather than an unbounded read.
	maxDrain = 64 << 10
	// dialTimeout and tlsHandshakeTimeout bound connection setup when the
	// caller's ctx has no deadline; the per-attempt ctx is usually shorter.
	dialTimeout         = 10 * time.Second
	tlsHandshakeTimeout = 10 * time.Second
	// idleConnTimeout closes a keep-alive connection unused this long.
	idleConnTimeout = 90 * time.Second
	// minRedacted is the shortest credential blanked out of a quoted
	// response body; shorter strings would blank out ordinary words.
	minRedacted = 8
	// minURLSecret is the shortest URL path segment taken for a token.
	minURLSecret = 16
	// redacted replaces a credential in a quoted response body.
	redacted = "[redacted]"
)

// HTTP sends each message as one HTTP request to a fixed URL.
//
// It keeps up to MaxInFlight connections alive to the sink and never opens
// more, so a steady rate reuses them instead of paying a TCP and TLS
// handshake per request. Redirects are not followed: a 3xx comes back as a
// StatusError, because following one would turn a POST into a body-less GET
// and could carry the configured headers to another host.
//
// With ForwardHeaders, the message's headers go along as HTTP headers of
// the same name; see the package documentation for what is left out. With
// KeyHeader, the message key goes in that header. With Signing, every
// attempt carries a signature of its message id, timestamp and body, made
// by package [webhook], which also verifies it. With TLS, an https:// URL
// uses those CAs, client certificate and oldest version. Requests go
// through a proxy only when Proxy names one or says "environment"; HTTP_PROXY
// and its kin are otherwise ignored.
//
// One Send writes at most one request to the sink, so every request that
// reaches it took a rate slot: net/http's own resending of a request it
// wrote on a connection that then died is refused (see the comment in
// httpSink.send).
//
// Credentials never reach an error: the URL's user information, path and
// query are left out, and a response body quoted in a StatusError has the
// values of sensitive configured headers ([shaper.SensitiveHeader]), the
// signing secret and the URL's credentials blanked out, in case the receiver
// echoes the request back.
//
// A Reconfigure (live reload) swaps all of this at once; requests in flight
// finish with what they started with.
//
// HTTP is safe for concurrent use by multiple goroutines.
type HTTP struct {
	cur     atomic.Pointer[httpSink]
	mu      sync.Mutex        // guards retired, and orders Reconfigure with Close
	retired []*http.Transport // transports of replaced settings, closed by Close
	dial    dialFunc          // dials every connection; nil: a net.Dialer (tests set it)
}

// dialFunc is the signature of net.Dialer.DialContext.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// httpSink is one set of settings of an HTTP sink, with its client.
type httpSink struct {
	url       string
	method    string
	host      string      // the Host header, when configured
	header    http.Header // configured headers, cloned into every request
	target    string      // scheme://host for errors: no userinfo, path or query
	maxBody   int64
	forward   bool   // send m.Header as HTTP headers
	keyHeader string // canonical name of the header carrying m.Key, or ""

	signer      *webhook.Signer  // signs every attempt, or nil (not signed)
	signHeaders []string         // canonical names of the headers the signer sets
	now         func() time.Time // the signature's clock: time.Now, but in tests

	proxy     *url.URL // every request goes through it; nil: none
	proxyInfo string   // what Proxy reports: the setting and what it resolved to

	secrets       [][]byte // blanked out of a quoted response body, longest first
	longestSecret int

	transport *http.Transport
	client    *http.Client
}

var _ shaper.Sink = (*HTTP)(nil)

// NewHTTP returns an HTTP sink for a validated, defaulted config.
//
// The per-attempt timeout comes from the ctx given to Send; cfg.Timeout also
// bounds the wait for response headers, in case a caller passes a ctx
// without a deadline.
func NewHTTP(cfg shaper.HTTPSinkConfig) (*HTTP, error) {
	return newHTTPDialing(cfg, nil)
}

// newHTTPDialing is NewHTTP with every connection, now and after a Reconfigure,
// dialled by dial (nil: a net.Dialer).
func newHTTPDialing(cfg shaper.HTTPSinkConfig, dial dialFunc) (*HTTP, error) {
	s, err := newHTTPSink(cfg, dial)
	if err != nil {
		return nil, err
	}
	h := &HTTP{dial: dial}
	h.cur.Store(s)
	return h, nil
}

// Reconfigure switches the sink to cfg (a live reload: new URL, headers,
// signing, TLS, limits): the next Send uses it. Requests in flight finish
// with the settings they started with. On error nothing changes. The
// proxy is chosen as by NewHTTP: "environment" reads the environment again.
func (h *HTTP) Reconfigure(cfg shaper.HTTPSinkConfig) error {
	s, err := newHTTPSink(cfg, h.dial)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	old := h.cur.Swap(s)
	old.transport.CloseIdleConnections()
	h.retired = append(h.retired, old.transport)
	return nil
}

// Send makes one attempt with the settings in force; see httpSink.send.
func (h *HTTP) Send(ctx context.Context, m *shaper.Message) (string, error) {
	return h.cur.Load().send(ctx, m)
}

// Proxy describes the proxy of the settings in force, for the startup
// log: "none"; the proxy's URL without user information; or
// "environment: " and what the environment gave for the sink's URL (a
// proxy's URL, or "none for this url"). It never shows a credential.
func (h *HTTP) Proxy() string {
	return h.cur.Load().proxyInfo
}

// Close closes the idle keep-alive connections, also those of settings a
// Reconfigure replaced. Requests still in flight finish on their own
// connections.
func (h *HTTP) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range h.retired {
		t.CloseIdleConnections()
	}
	h.cur.Load().transport.CloseIdleConnections()
	return nil
}

// newHTTPSink builds the settings and client of a validated config; dial
// (nil: a net.Dialer) makes its connections.
func newHTTPSink(cfg shaper.HTTPSinkConfig, dial dialFunc) (*httpSink, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("http: parse url: %w", withoutURL(err))
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("http: url must be http:// or https:// with a host, got scheme %q host %q", u.Scheme, u.Host)
	}
	if cfg.TLS != nil && u.Scheme != "https" {
		return nil, errors.New("http: tls needs an https:// url")
	}
	tlsConfig, err := tlsconf.Client(cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("http: %w", err)
	}
	method := cfg.Method
	if method == "" {
		method = http.MethodPost
	}
	if !validToken(method) {
		return nil, fmt.Errorf("http: invalid method %q", method)
	}
	h := &httpSink{
		url:    cfg.URL,
		method: method,
		header: make(http.Header, len(cfg.Headers)+1),
		// Webhook URLs often carry a token in the path or query, and errors
		// end up in logs and dead-letter headers.
		target:  u.Scheme + "://" + u.Host,
		maxBody: cfg.MaxBodyBytes,
		now:     time.Now,
	}
	h.addSecrets(u.User.Username())
	if pw, ok := u.User.Password(); ok {
		h.addSecrets(pw)
	}
	for _, seg := range strings.Split(u.EscapedPath(), "/") {
		if len(seg) >= minURLSecret { // webhook URLs carry tokens as long path segments
			h.addSecrets(seg)
			if un, err := url.PathUnescape(seg); err == nil {
				h.addSecrets(un)
			}
		}
	}
	for _, vs := range u.Query() {
		h.addSecrets(vs...)
	}
	for name, value := range cfg.Headers {
		// The value is left out of errors: it may be a credential.
		if !validToken(name) {
			return nil, fmt.Errorf("http: invalid header name %q", name)
		}
		if !validHeaderValue(value, true) {
			return nil, fmt.Errorf("http: header %q: value has control characters", name)
		}
		if shaper.SensitiveHeader(name) {
			// "Bearer <token>": the receiver may echo the token alone.
			h.addSecrets(value)
			h.addSecrets(strings.Fields(value)...)
		}
		if http.CanonicalHeaderKey(name) == "Host" {
			// net/http ignores Host in Header; it must go in Request.Host.
			h.host = value
			continue
		}
		h.header.Set(name, value)
	}
	h.forward = cfg.ForwardHeaders
	if cfg.KeyHeader != "" {
		name := http.CanonicalHeaderKey(cfg.KeyHeader)
		switch {
		case !validToken(cfg.KeyHeader):
			return nil, fmt.Errorf("http: invalid key_header name %q", cfg.KeyHeader)
		case name == "Idempotency-Key" || unforwardable[name]:
			return nil, fmt.Errorf("http: key_header %q is a header shaper or net/http owns", cfg.KeyHeader)
		case h.header[name] != nil:
			return nil, fmt.Errorf("http: key_header %q is also set in headers", cfg.KeyHeader)
		}
		h.keyHeader = name
	}
	if sc := cfg.Signing; sc != nil {
		// webhook's errors never show the secret.
		signer, err := webhook.New(webhook.Config{Scheme: webhook.Scheme(sc.Scheme), Secret: sc.Secret, Header: sc.Header})
		if err != nil {
			return nil, fmt.Errorf("http: signing: %w", err)
		}
		for _, name := range signer.Headers() {
			if unforwardable[name] || name == h.keyHeader || h.header[name] != nil {
				return nil, fmt.Errorf("http: signing header %q is also a header net/http sets, the key_header or in headers", name)
			}
		}
		h.signer, h.signHeaders = signer, signer.Headers()
		h.addSecrets(sc.Secret)
		if b64, ok := strings.CutPrefix(sc.Secret, webhook.SecretPrefix); ok {
			h.addSecrets(b64) // a receiver may echo the key without its prefix
		}
	}
	if h.proxy, h.proxyInfo, err = proxyFor(cfg.Proxy, u); err != nil {
		return nil, err
	}
	if h.proxy != nil && h.proxy.User != nil {
		if pw, ok := h.proxy.User.Password(); ok {
			h.addSecrets(pw)
		}
	}
	slices.SortFunc(h.secrets, func(a, b []byte) int { return len(b) - len(a) })

	conns := max(cfg.MaxInFlight, 1)
	if dial == nil {
		dial = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext
	}
	h.transport = &http.Transport{
		// The Transport asks for the proxy before each attempt of a
		// request, its own resends included: see sentOnce.
		Proxy:             h.proxyOrRefuseResend,
		DialContext:       dial,
		ForceAttemptHTTP2: true,
		// The default keeps 2 idle connections per host, so MaxInFlight
		// workers would open and close a connection per request.
		MaxIdleConns:          conns,
		MaxIdleConnsPerHost:   conns,
		MaxConnsPerHost:       conns,
		IdleConnTimeout:       idleConnTimeout,
		TLSClientConfig:       tlsConfig,
		TLSHandshakeTimeout:   tlsHandshakeTimeout,
		ResponseHeaderTimeout: cfg.Timeout,
		ExpectContinueTimeout: time.Second,
	}
	h.client = &http.Client{
		Transport: h.transport,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
		// No Timeout: the ctx of each Send bounds its attempt.
	}
	return h, nil
}

// send makes one request carrying m.Payload unchanged, the configured
// headers and Idempotency-Key: m.ID (left out when m.ID is empty), and, when
// configured, the key header, the message's own headers and a signature
// made now (each attempt is signed anew, so a retry after a long backoff is
// not stale). It returns the
// status code as the label; a non-2xx status comes back as a
// *shaper.StatusError; a payload over MaxBodyBytes, or an id or key that is
// not a valid header value, as shaper.ErrMalformed without any request; and
// a network error or timeout as "error" and the wrapped cause.
func (h *httpSink) send(ctx context.Context, m *shaper.Message) (string, error) {
	if h.maxBody > 0 && int64(len(m.Payload)) > h.maxBody {
		return "", fmt.Errorf("http: payload of %d bytes is over max_body_bytes %d: %w", len(m.Payload), h.maxBody, shaper.ErrMalformed)
	}
	// The id comes from the broker: a CR or LF in it must never become a
	// header of its own. net/http would refuse it too, but as an error that
	// looks retryable.
	if !validHeaderValue(m.ID, false) {
		return "", fmt.Errorf("http: message id %q is not a valid Idempotency-Key: %w", m.ID, shaper.ErrMalformed)
	}
	// Keys are often binary (a serializer's magic byte, a hash). The key is
	// left out of the error: it may be long, and it is in the dead letter.
	sendKey := h.keyHeader != "" && len(m.Key) > 0
	if sendKey && !validKey(m.Key) {
		return "", fmt.Errorf("http: message key of %d bytes is not a valid %s value (control characters, or white space at an end): %w", len(m.Key), h.keyHeader, shaper.ErrMalformed)
	}

	// One Send writes at most one request, whatever net/http would do.
	// The Transport resends a request on a new connection when it deems it
	// replayable (GET, HEAD, OPTIONS, TRACE, or an Idempotency-Key, which
	// we always send, with a body it can re-obtain or none) and the
	// kept-alive connection it went out on died before an answer
	// (transport.go, shouldRetryRequest). The sink may well have received
	// the first: the resend would reach it as a duplicate that took no
	// rate slot. Leaving GetBody nil would stop that only for requests
	// with a body: an empty payload is sent as http.NoBody, and a bodiless
	// request with an Idempotency-Key, or any GET, stays replayable. So
	// the guard is general: the trace marks the request written once the
	// Transport has written all of it, and the Transport's next attempt,
	// which always starts by asking proxyOrRefuseResend for its proxy,
	// is refused. The Transport decides to resend only after its writer
	// has finished with the request (mapRoundTripError waits for it), so
	// the mark is always seen. A resend of a request of which nothing was
	// written (a dead connection found on writing) is harmless and still
	// happens; bytes.Reader gives GetBody for that.
	//
	// HTTP/2 (https with ForceAttemptHTTP2) also retries inside its own
	// RoundTrip, out of this guard's reach, but only streams the server
	// declared unprocessed (REFUSED_STREAM, or past the last stream of a
	// GOAWAY), never written, or reset with PROTOCOL_ERROR (golang/go#47635).
	sent := &sentOnce{}
	sent.trace.WroteRequest = func(info httptrace.WroteRequestInfo) {
		if info.Err == nil {
			sent.written.Store(true)
		}
	}
	ctx = httptrace.WithClientTrace(context.WithValue(ctx, sentOnceKey{}, sent), &sent.trace)
	req, err := http.NewRequestWithContext(ctx, h.method, h.url, bytes.NewReader(m.Payload))
	if err != nil {
		return "", fmt.Errorf("http: new request: %w", withoutURL(err))
	}
	req.Header = h.header.Clone()
	if h.forward {
		h.forwardHeaders(req.Header, m.Header)
	}
	if sendKey {
		req.Header.Set(h.keyHeader, string(m.Key))
	}
	if m.ID != "" {
		req.Header.Set("Idempotency-Key", m.ID)
	}
	var sig string
	if h.signer != nil {
		// After the forwarded headers: a message cannot choose them.
		if err := h.signer.Sign(req.Header, m.ID, h.now(), m.Payload); err != nil {
			return "", fmt.Errorf("http: sign: %w: %w", err, shaper.ErrMalformed)
		}
		sig = req.Header.Get(h.signer.SignatureHeader())
	}
	if h.host != "" {
		req.Host = h.host
	}

	resp, err := h.client.Do(req)
	if err != nil {
		return "error", fmt.Errorf("http: %s %s: %w", h.method, h.target, withoutURL(err))
	}
	defer drainClose(resp.Body)

	code := strconv.Itoa(resp.StatusCode)
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return code, nil
	}
	serr := &shaper.StatusError{Code: resp.StatusCode}
	if v := resp.Header.Get("Retry-After"); v != "" {
		if at, ok := ParseRetryAfter(v, time.Now()); ok {
			serr.RetryAfter = at
		}
	}
	// Read past maxErrorBody by the longest secret, so that one starting
	// within the excerpt is blanked out whole. The signature goes too: it
	// is no key, but could be replayed within the receiver's tolerance.
	// The value first, then the MAC alone ("v1,<base64>" or
	// "t=...,v2=<hex>"), which a receiver may echo without its prefix.
	secrets := h.secrets
	if sig != "" {
		_, mac, ok := strings.Cut(sig, "v1,")
		if !ok {
			_, mac, _ = strings.Cut(sig, ",v2=")
		}
		secrets = append([][]byte{[]byte(sig), []byte(mac)}, secrets...)
	}
	buf := make([]byte, maxErrorBody+max(h.longestSecret, len(sig)))
	n, _ := io.ReadFull(resp.Body, buf) // a short or failed read keeps what came
	serr.Body = excerpt(redact(buf[:n], maxErrorBody, secrets))
	return code, serr
}

// addSecrets adds values to blank out of quoted response bodies, those at
// least minRedacted bytes long.
func (h *httpSink) addSecrets(values ...string) {
	for _, v := range values {
		if len(v) >= minRedacted {
			h.secrets = append(h.secrets, []byte(v))
			h.longestSecret = max(h.longestSecret, len(v))
		}
	}
}

// redact returns b up to limit bytes, with every one of secrets (longest
// first) that starts there replaced by "[redacted]", whole even where it
// runs past limit. Replacing in place and cutting after would let a shorter
// replacement pull the start of a later secret into the excerpt.
func redact(b []byte, limit int, secrets [][]byte) []byte {
	if len(secrets) == 0 {
		return b[:min(len(b), limit)]
	}
	out := make([]byte, 0, limit)
	for i := 0; i < len(b) && i < limit; {
		matched := false
		for _, s := range secrets {
			if bytes.HasPrefix(b[i:], s) {
				out = append(out, redacted...)
				i += len(s)
				matched = true
				break
			}
		}
		if !matched {
			out = append(out, b[i])
			i++
		}
	}
	return out
}

// unforwardable holds the headers a message may never set: they describe
// the connection or the framing of this one request (hop-by-hop headers,
// RFC 9110 section 7.6.1, and the length, host and expectations), not the
// message, and a forged one could desynchronize the connection, reach a
// proxy, or send the request elsewhere.
var unforwardable = map[string]bool{
	"Host":                true,
	"Content-Length":      true,
	"Transfer-Encoding":   true,
	"Connection":          true,
	"Keep-Alive":          true,
	"Proxy-Connection":    true,
	"Proxy-Authenticate":  true,
	"Proxy-Authorization": true,
	"Te":                  true,
	"Trailer":             true,
	"Upgrade":             true,
	"Expect":              true,
	"Http2-Settings":      true,
}

// forwardHeaders adds the message headers src to the request headers dst,
// leaving out what is not valid HTTP, what may never be forwarded, and what
// shaper sets itself: the configured headers, Idempotency-Key, the key
// header and the signature's headers. Names that differ only in case become
// one header, their values in the sorted order of the names.
func (h *httpSink) forwardHeaders(dst http.Header, src map[string][]string) {
	for _, name := range slices.Sorted(maps.Keys(src)) {
		if !validToken(name) {
			continue
		}
		key := http.CanonicalHeaderKey(name)
		if unforwardable[key] || key == "Idempotency-Key" || key == h.keyHeader || slices.Contains(h.signHeaders, key) || h.header[key] != nil {
			continue
		}
		for _, v := range src[name] {
			// Receivers ignore white space at the ends; a CR, LF or NUL
			// would end the header or the request early.
			v = strings.Trim(v, " \t")
			if validHeaderValue(v, true) {
				dst[key] = append(dst[key], v)
			}
		}
	}
}

// validKey reports whether a message key can be sent as a header value and
// arrive unchanged: no control characters, and no white space at either end,
// which receivers trim.
func validKey(key []byte) bool {
	s := string(key)
	return validHeaderValue(s, false) && strings.Trim(s, " ") == s
}

// withoutURL unwraps a *url.Error, whose message repeats the whole URL with
// its path and query string, which may carry a credential. The cause is kept, so
// errors.Is still finds context.DeadlineExceeded and the like.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// drainClose reads what is left of a response body, up to maxDrain, so
// the connection goes back to the pool, and closes it.
func drainClose(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, maxDrain)
	_ = body.Close()
}

// ParseRetryAfter returns the time a Retry-After header value v asks for,
// given that the response arrived at now. It accepts delay-seconds (a
// non-negative decimal integer) and an HTTP-date in any form http.ParseTime
// knows. A date in the past gives now. A delay too long for a
// time.Duration is held to the longest one (about 292 years) rather than
// overflowing. Anything else, a negative number included, returns false.
func ParseRetryAfter(v string, now time.Time) (time.Time, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, false
	}
	if isDigits(v) {
		const maxSeconds = math.MaxInt64 / int64(time.Second)
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || secs > maxSeconds { // only digits: err is out of range
			secs = maxSeconds
		}
		return now.Add(time.Duration(secs) * time.Second), true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return time.Time{}, false
	}
	if at.Before(now) {
		return now, true
	}
	return at, true
}

// sentOnce is the state of one Send that the Transport's hooks share
// through the request's context: whether the request was written whole.
type sentOnce struct {
	written atomic.Bool
	trace   httptrace.ClientTrace
}

type sentOnceKey struct{}

// errResend refuses net/http's resending of a request it wrote whole.
var errResend = errors.New("connection lost after the request was written, before an answer; not sent again, as a second request would take no rate slot")

// proxyOrRefuseResend is the Transport's Proxy function. The Transport
// calls it before every attempt of a request, so it is where a resend of a
// request already written is stopped (see send); otherwise it returns the
// proxy of these settings, nil for none.
func (h *httpSink) proxyOrRefuseResend(r *http.Request) (*url.URL, error) {
	if s, _ := r.Context().Value(sentOnceKey{}).(*sentOnce); s != nil && s.written.Load() {
		return nil, errResend
	}
	return h.proxy, nil
}

// proxyFor returns the proxy of a validated sink.http.proxy setting for
// requests to target (nil for none) and its description for Proxy.
// "environment" reads HTTPS_PROXY, HTTP_PROXY and NO_PROXY (or their lower
// case forms) now, not once per process as http.ProxyFromEnvironment does,
// and like it never proxies a loopback target. Errors never show the URL:
// it may hold the proxy's password.
func proxyFor(setting string, target *url.URL) (*url.URL, string, error) {
	switch setting {
	case "":
		return nil, "none", nil
	case shaper.ProxyEnvironment:
		p, err := httpproxy.FromEnvironment().ProxyFunc()(target)
		if err != nil { // only in a CGI environment; no value in the message
			return nil, "", fmt.Errorf("http: proxy: environment: %w", err)
		}
		if p == nil {
			return nil, "environment: none for this url", nil
		}
		return p, "environment: " + proxyShown(p), nil
	}
	p, err := url.Parse(setting)
	if err != nil {
		return nil, "", errors.New("http: proxy: not a URL (not shown: it may hold a password)")
	}
	switch p.Scheme {
	case "http", "https", "socks5", "socks5h":
	default:
		return nil, "", errors.New("http: proxy: want scheme http, https, socks5 or socks5h")
	}
	if p.Hostname() == "" {
		return nil, "", errors.New("http: proxy: no host")
	}
	return p, proxyShown(p), nil
}

// proxyShown is a proxy's URL for a log: scheme and host, no user
// information or path.
func proxyShown(p *url.URL) string {
	return p.Scheme + "://" + p.Host
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// excerpt makes b printable single-line text for StatusError.Body: runs of
// control characters and white space become one space, invalid UTF-8
// becomes '?', and a rune cut off at the end of b is dropped. The result is
// never longer than b.
func excerpt(b []byte) string {
	var sb strings.Builder
	sb.Grow(len(b))
	space := false
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size <= 1 {
			if !utf8.FullRune(b) {
				break // cut off by the read limit
			}
			r = '?'
		}
		b = b[size:]
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			space = true
			continue
		}
		if space && sb.Len() > 0 {
			sb.WriteByte(' ')
		}
		space = false
		sb.WriteRune(r)
	}
	return sb.String()
}

// validToken reports whether s is an RFC 9110 token, as header names and
// methods must be.
func validToken(s string) bool { return httpguts.ValidHeaderFieldName(s) }

// validHeaderValue reports whether s may be sent as a header value: no
// control characters (CR, LF, NUL, DEL, ...). A horizontal tab is allowed
// only when tab is true; it is legal HTTP, but receivers trim it at the
// ends, so an idempotency key with one would not compare equal.
func validHeaderValue(s string, tab bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < ' ' && !(tab && c == '\t')) || c == 0x7f {
			return false
		}
	}
	return true
}
