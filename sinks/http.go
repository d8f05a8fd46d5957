package sinks

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/shaper-dev/shaper/internal/tlsconf"
	"github.com/shaper-dev/shaper/shaper"
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
// attempt carries a signature of its timestamp and body (see
// [VerifySignature]). With TLS, an https:// URL uses those CAs, client
// certificate and oldest version.
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
}

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

	signHeader string           // canonical name of the signature header, or "" (not signed)
	signSecret []byte           // the HMAC key
	now        func() time.Time // the signature's clock: time.Now, but in tests

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
	s, err := newHTTPSink(cfg)
	if err != nil {
		return nil, err
	}
	h := &HTTP{}
	h.cur.Store(s)
	return h, nil
}

// Reconfigure switches the sink to cfg (a live reload: new URL, headers,
// signing, TLS, limits): the next Send uses it. Requests in flight finish
// with the settings they started with. On error nothing changes.
func (h *HTTP) Reconfigure(cfg shaper.HTTPSinkConfig) error {
	s, err := newHTTPSink(cfg)
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

// newHTTPSink builds the settings and client of a validated config.
func newHTTPSink(cfg shaper.HTTPSinkConfig) (*httpSink, error) {
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
		header := sc.Header
		if header == "" {
			header = shaper.DefaultSigningHeader
		}
		name := http.CanonicalHeaderKey(header)
		switch {
		case !validToken(header):
			return nil, fmt.Errorf("http: invalid signing header name %q", header)
		case name == "Idempotency-Key" || unforwardable[name] || name == h.keyHeader || h.header[name] != nil:
			return nil, fmt.Errorf("http: signing header %q is already a header shaper, net/http, key_header or headers set", header)
		case len(sc.Secret) < shaper.MinSigningSecret:
			// The secret is not shown, nor its length.
			return nil, fmt.Errorf("http: signing secret must be at least %d bytes", shaper.MinSigningSecret)
		}
		h.signHeader, h.signSecret = name, []byte(sc.Secret)
		h.addSecrets(sc.Secret)
	}
	slices.SortFunc(h.secrets, func(a, b []byte) int { return len(b) - len(a) })

	conns := max(cfg.MaxInFlight, 1)
	dialer := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	h.transport = &http.Transport{
		Proxy:             http.ProxyFromEnvironment,
		DialContext:       dialer.DialContext,
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

	// bytes.Reader lets NewRequest set ContentLength and GetBody. With
	// GetBody and an Idempotency-Key, net/http may replay the request when
	// a keep-alive connection turns out to be closed by the server before
	// it read anything.
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
	if h.signHeader != "" {
		sig = signature(h.signSecret, h.now(), m.Payload)
		req.Header.Set(h.signHeader, sig)
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
	secrets := h.secrets
	if sig != "" {
		_, v1, _ := strings.Cut(sig, "v1=")
		secrets = append([][]byte{[]byte(sig), []byte(v1)}, secrets...)
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
// shaper sets itself: the configured headers, Idempotency-Key and the key
// header. Names that differ only in case become one header, their values
// in the sorted order of the names.
func (h *httpSink) forwardHeaders(dst http.Header, src map[string][]string) {
	for _, name := range slices.Sorted(maps.Keys(src)) {
		if !validToken(name) {
			continue
		}
		key := http.CanonicalHeaderKey(name)
		if unforwardable[key] || key == "Idempotency-Key" || key == h.keyHeader || key == h.signHeader || h.header[key] != nil {
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

// DefaultSignatureTolerance is how far from now a signature's timestamp
// may be, either way, when VerifySignature is given no tolerance.
const DefaultSignatureTolerance = 5 * time.Minute

// Errors of VerifySignature, matched with errors.Is.
var (
	// ErrBadSignature: the header is malformed, or no signature in it
	// matches the body and timestamp under the secret. The request did not
	// come from a sender holding the secret, or was altered on the way.
	ErrBadSignature = errors.New("signature does not match")
	// ErrStaleSignature: the signature matches, but its timestamp is
	// further from now than the tolerance: a replay, or a clock far off.
	ErrStaleSignature = errors.New("signature timestamp outside the tolerance")
)

// signature returns the value of the signature header for body sent at t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" under secret>".
func signature(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(signatureMAC(secret, ts, body))
}

func signatureMAC(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// VerifySignature checks the signature header of a request an HTTP sink
// signed (signing: {secret: ...}), for receivers written in Go. header is
// the header's value, body the raw request body as received (before any
// JSON decoding), secret the shared signing secret, and now the time of
// receipt. It returns nil when a v1 signature in header is the HMAC-SHA256,
// under secret, of "<t>.<body>" and t is within tolerance of now (either
// way; tolerance <= 0 means DefaultSignatureTolerance); an error wrapping
// ErrBadSignature when the header is malformed or nothing matches; and one
// wrapping ErrStaleSignature when it matches but t is too far from now.
//
// Signatures are compared in constant time. Entries other than t and v1
// are ignored, and several v1 entries are allowed (any may match), so the
// format can grow. The signature does not cover Idempotency-Key or other
// headers: dedupe on Idempotency-Key to drop shaper's own retries, and
// remember the v1 values accepted within the tolerance to drop a replayed
// request, whatever headers it carries.
func VerifySignature(header string, body []byte, secret string, tolerance time.Duration, now time.Time) error {
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		switch {
		case !ok:
			return fmt.Errorf("%w: malformed entry in signature header", ErrBadSignature)
		case k == "t" && ts != "":
			return fmt.Errorf("%w: two timestamps in signature header", ErrBadSignature)
		case k == "t":
			if !isDigits(v) || len(v) > 18 {
				return fmt.Errorf("%w: timestamp is not unix seconds", ErrBadSignature)
			}
			ts = v
		case k == "v1":
			if sig, err := hex.DecodeString(v); err == nil && len(sig) == sha256.Size {
				sigs = append(sigs, sig)
			}
		}
	}
	if ts == "" || len(sigs) == 0 {
		return fmt.Errorf("%w: signature header needs t= and v1=", ErrBadSignature)
	}
	want := signatureMAC([]byte(secret), ts, body)
	match := 0
	for _, sig := range sigs {
		match |= subtle.ConstantTimeCompare(sig, want)
	}
	if match != 1 {
		return ErrBadSignature
	}
	if tolerance <= 0 {
		tolerance = DefaultSignatureTolerance
	}
	secs, _ := strconv.ParseInt(ts, 10, 64) // at most 18 digits: fits
	if age := now.Sub(time.Unix(secs, 0)); age > tolerance || age < -tolerance {
		return fmt.Errorf("%w: signed %s from now, tolerance %s", ErrStaleSignature, age.Round(time.Second), tolerance)
	}
	return nil
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
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

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
