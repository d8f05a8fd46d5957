// This file is the HTTP sink itself: its settings, NewHTTP, Send,
// Reconfigure, Proxy and Close, the client it sends with (its own, package
// internal/h1, or net/http's Transport), and the one request each Send
// makes. The rules it applies live beside it:
// http_headers.go (what may be sent as a header), http_redact.go (what an
// error may quote), http_signing.go, http_proxy.go (the proxy and the
// resend guard) and retry_after.go.

package sinks

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shaper-dev/shaper/internal/h1"
	"github.com/shaper-dev/shaper/internal/tlsconf"
	"github.com/shaper-dev/shaper/internal/urlguard"
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
)

// HTTP sends each message as one HTTP request to a fixed URL.
//
// It keeps up to MaxInFlight connections alive to the sink and never opens
// more, so a steady rate reuses them instead of paying a TCP and TLS
// handshake per request. Which client sends is chosen once, when the
// settings are built: a fixed http:// or https:// URL without a proxy goes
// through the sink's own HTTP/1.1 client (package internal/h1), which
// writes a request from the goroutine that sends it; a proxy or url_from
// goes through net/http's Transport. Both write the same bytes and the
// sink judges their answers with the same code. Redirects are not followed:
// a 3xx comes back as a StatusError, because following one would turn a
// POST into a body-less GET and could carry the configured headers to
// another host.
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
// wrote on a connection that then died is refused (see the comment on
// withSentOnce).
//
// Credentials never reach an error: the URL's user information, path and
// query are left out, and a response body quoted in a StatusError has the
// values of sensitive configured headers ([SensitiveHeader]), the
// signing secret and the URL's credentials blanked out, in case the receiver
// echoes the request back.
//
// A Reconfigure (live reload) swaps all of this at once; requests in flight
// finish with what they started with.
//
// HTTP is safe for concurrent use by multiple goroutines.
type HTTP struct {
	cur     atomic.Pointer[httpSink]
	mu      sync.Mutex  // guards retired, and orders Reconfigure with Close
	retired []*httpSink // settings a Reconfigure replaced, closed by Close
	dial    dialFunc    // dials every connection; nil: a net.Dialer (tests set it)
	lookup  lookupFunc  // with url_from, resolves hosts; nil: the system's (tests set it)
}

// dialFunc is the signature of net.Dialer.DialContext.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// httpSink is one set of settings of an HTTP sink, with its client.
type httpSink struct {
	url       string
	urlOf     func(*shaper.Message) (string, bool) // with url_from: the URL a message names; nil: url
	urlFrom   string                               // url_from, for errors
	guard     *urlguard.Guard                      // with url_from: what a message's URL must pass
	method    string
	host      string      // the Host header, when configured
	header    http.Header // configured headers; every request's map shares their values, read only
	target    string      // scheme://host for errors: no userinfo, path or query
	origin    string      // the canonical origin of url (Destination)
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

	// own is the sink's own HTTP/1.1 client, for a fixed URL without a
	// proxy; nil: requests go through transport.
	own       *h1.Client
	transport *http.Transport
}

var _ shaper.Destinations = (*HTTP)(nil)

// NewHTTP returns an HTTP sink for cfg, with its defaults set. A config
// HTTPConfig.Validate refuses is an error, the same one: there is one set
// of rules.
//
// The per-attempt timeout comes from the ctx given to Send; cfg.Timeout also
// bounds the wait for response headers, in case a caller passes a ctx
// without a deadline.
func NewHTTP(cfg HTTPConfig) (*HTTP, error) {
	return newHTTPDialing(cfg, nil, nil)
}

// newHTTPDialing is NewHTTP with every connection, now and after a Reconfigure,
// dialled by dial (nil: a net.Dialer) and, with url_from, every host looked
// up by lookup (nil: the system's resolver).
func newHTTPDialing(cfg HTTPConfig, dial dialFunc, lookup lookupFunc) (*HTTP, error) {
	s, err := newHTTPSink(cfg, dial, lookup)
	if err != nil {
		return nil, err
	}
	h := &HTTP{dial: dial, lookup: lookup}
	h.cur.Store(s)
	return h, nil
}

// Reconfigure switches the sink to cfg (a live reload: new URL, headers,
// signing, TLS, limits): the next Send uses it. Requests in flight finish
// with the settings they started with. On error nothing changes. The
// proxy is chosen as by NewHTTP: "environment" reads the environment again.
func (h *HTTP) Reconfigure(cfg HTTPConfig) error {
	s, err := newHTTPSink(cfg, h.dial, h.lookup)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	old := h.cur.Swap(s)
	old.retire()
	h.retired = append(h.retired, old)
	return nil
}

// Send makes one attempt with the settings in force; see httpSink.send.
func (h *HTTP) Send(ctx context.Context, m *shaper.Message) error {
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
// Reconfigure replaced, and waits for the readers of the sink's own
// connections to end: requests still in flight finish on their
// connections until ctx ends, then their connections are closed.
func (h *HTTP) Close(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range append(h.retired, h.cur.Load()) {
		s.close(ctx)
	}
	return nil
}

// retire keeps no more connections of these settings: idle ones close
// now, busy ones once answered.
func (h *httpSink) retire() {
	if h.own != nil {
		h.own.Retire()
		return
	}
	h.transport.CloseIdleConnections()
}

// close retires these settings and waits for their own connections'
// readers until ctx ends (see h1.Client.Close).
func (h *httpSink) close(ctx context.Context) {
	if h.own != nil {
		h.own.Close(ctx)
		return
	}
	h.transport.CloseIdleConnections()
}

// newHTTPSink builds the settings and client of cfg, with its defaults
// set, once HTTPConfig.Validate accepts it; dial (nil: a net.Dialer)
// makes its connections, and with url_from lookup (nil: the system's
// resolver) finds their addresses.
func newHTTPSink(cfg HTTPConfig, dial dialFunc, lookup lookupFunc) (*httpSink, error) {
	cfg.SetDefaults()
	if err := cfg.Validate("sink.http"); err != nil {
		return nil, err
	}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("http: parse url: %w", withoutURL(err)) // not reached: Validate parsed it
	}
	var guard *urlguard.Guard
	if cfg.URLFrom != "" {
		if guard, err = urlguard.New(cfg.AllowedHosts, cfg.AllowPrivate); err != nil {
			return nil, fmt.Errorf("http: allowed_hosts: %w", err) // not reached: Validate built it
		}
		dial = guardedDial(guard, lookup, dial)
	}
	tlsConfig, err := tlsconf.Client(cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("http: %w", err)
	}
	h := &httpSink{
		url:    cfg.URL,
		method: cfg.Method,
		header: make(http.Header, len(cfg.Headers)+1),
		// Webhook URLs often carry a token in the path or query, and errors
		// end up in logs and dead-letter headers.
		target:  u.Scheme + "://" + u.Host,
		origin:  origin(u),
		maxBody: cfg.MaxBodyBytes,
		now:     time.Now,
	}
	if guard != nil {
		h.urlOf, h.urlFrom, h.guard = shaper.Field(cfg.URLFrom), cfg.URLFrom, guard
	}
	h.addURLSecrets(u)
	h.setHeaders(cfg.Headers)
	h.setBasicAuth(u)
	h.forward = cfg.ForwardHeaders
	if cfg.KeyHeader != "" {
		h.keyHeader = http.CanonicalHeaderKey(cfg.KeyHeader)
	}
	if err := h.setSigning(cfg.Signing); err != nil {
		return nil, err
	}
	if err := h.setProxy(cfg.Proxy, u); err != nil {
		return nil, err
	}
	slices.SortFunc(h.secrets, func(a, b []byte) int { return len(b) - len(a) })

	if dial == nil {
		dial = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext
	}
	if h.proxy == nil && guard == nil {
		h.own = newOwnClient(cfg, u, tlsConfig, dial)
		return h, nil
	}
	// Requests go to the Transport itself, not through an http.Client:
	// a redirect is an answer (not followed), there are no cookies, and
	// the ctx of each Send bounds its attempt. It spares every request the
	// Client's copy of its headers and URL.
	h.transport = h.newTransport(cfg, tlsConfig, dial)
	return h, nil
}

// newTransport returns the Transport of these settings: at most
// cfg.MaxInFlightPerHost connections to one host, and cfg.MaxInFlight kept
// in all for a fixed url (no such cap with url_from), dialled by dial.
func (h *httpSink) newTransport(cfg HTTPConfig, tlsConfig *tls.Config, dial dialFunc) *http.Transport {
	conns, perHost := max(cfg.MaxInFlight, 1), max(cfg.MaxInFlightPerHost, 1)
	if cfg.URLFrom != "" {
		// No cap over all hosts: with more hosts than max_in_flight,
		// one would close another host's idle connection each time one
		// goes back, and every request would dial (and shake hands)
		// anew. Each host keeps at most perHost, closed after
		// idleConnTimeout unused.
		conns = 0
	}
	return &http.Transport{
		// The Transport asks for the proxy before each attempt of a
		// request, its own resends included: see withSentOnce.
		Proxy:             h.proxyOrRefuseResend,
		DialContext:       dial,
		ForceAttemptHTTP2: true,
		// The default keeps 2 idle connections per host, so MaxInFlight
		// workers would open and close a connection per request.
		MaxIdleConns:          conns,
		MaxIdleConnsPerHost:   perHost,
		MaxConnsPerHost:       perHost,
		IdleConnTimeout:       idleConnTimeout,
		TLSClientConfig:       tlsConfig,
		TLSHandshakeTimeout:   tlsHandshakeTimeout,
		ResponseHeaderTimeout: cfg.Timeout,
		ExpectContinueTimeout: time.Second,
	}
}

// send makes one request carrying m.Payload unchanged, the configured
// headers and Idempotency-Key: m.ID (left out when m.ID is empty), and, when
// configured, the key header, the message's own headers and a signature
// made now (each attempt is signed anew, so a retry after a long backoff is
// not stale). It returns nil for a 2xx status; a *shaper.StatusError for
// any other; shaper.ErrMalformed, marked shaper.NotSent, for a payload over
// MaxBodyBytes, or an id or key that is not a valid header value; and the
// wrapped cause of a network error or timeout.
func (h *httpSink) send(ctx context.Context, m *shaper.Message) error {
	rawURL, target, err := h.destination(m)
	if err != nil {
		return shaper.NotSent(err)
	}
	sendKey, err := h.check(m)
	if err != nil {
		return shaper.NotSent(err)
	}
	if h.own != nil {
		req, sig, err := h.newRequest(ctx, rawURL, m, sendKey)
		if err != nil {
			return shaper.NotSent(err)
		}
		err = h.own.Do(ctx, req, func(resp *http.Response) error {
			return h.judge(resp.StatusCode, resp.Header, resp.Body, sig)
		})
		return h.failed(target, err)
	}
	// One Send writes at most one request, whatever net/http would do.
	req, sig, err := h.newRequest(withSentOnce(ctx), rawURL, m, sendKey)
	if err != nil {
		return shaper.NotSent(err)
	}
	resp, err := h.transport.RoundTrip(req)
	if err != nil {
		return h.failed(target, err)
	}
	defer drainClose(resp.Body)
	return h.judge(resp.StatusCode, resp.Header, resp.Body, sig)
}

// failed is Send's error for err from either client, nil or a judged
// answer (a *shaper.StatusError) as they are: the request and target
// named, http.ErrSchemeMismatch for an https:// URL that an HTTP server
// answered, errResend for a connection lost after the request was written,
// and a destination refused at the dial marked shaper.NotSent.
func (h *httpSink) failed(target string, err error) error {
	var status *shaper.StatusError
	switch {
	case err == nil || errors.As(err, &status):
		return err
	case errors.Is(err, h1.ErrLost):
		err = errResend // as the resend guard answers the Transport
	}
	err = fmt.Errorf("http: %s %s: %w", h.method, target, schemeMismatch(withoutURL(err)))
	if errors.Is(err, shaper.ErrRefused) {
		return shaper.NotSent(err) // refused at the dial: nothing was sent
	}
	return err
}

// judge is Send's answer for a response: nil for a 2xx status, otherwise
// a *shaper.StatusError with its Retry-After and an excerpt of body, from
// which the request's signature sig and the secrets are blanked out.
func (h *httpSink) judge(code int, header http.Header, body io.Reader, sig string) error {
	if code >= 200 && code <= 299 {
		return nil
	}
	serr := &shaper.StatusError{Code: code}
	if v := header.Get("Retry-After"); v != "" {
		if at, ok := ParseRetryAfter(v, time.Now()); ok {
			serr.RetryAfter = at
		}
	}
	serr.Body = h.quoteBody(body, sig)
	return serr
}

// check returns shaper.ErrMalformed for a message that can never become a
// request of these settings, and whether its key goes in the key header.
func (h *httpSink) check(m *shaper.Message) (sendKey bool, err error) {
	if h.maxBody > 0 && int64(len(m.Payload)) > h.maxBody {
		return false, fmt.Errorf("http: payload of %d bytes is over max_body_bytes %d: %w", len(m.Payload), h.maxBody, shaper.ErrMalformed)
	}
	// The id comes from the broker: a CR or LF in it must never become a
	// header of its own. net/http would refuse it too, but as an error that
	// looks retryable.
	if !validHeaderValue(m.ID, false) {
		return false, fmt.Errorf("http: message id %q is not a valid Idempotency-Key: %w", m.ID, shaper.ErrMalformed)
	}
	// Keys are often binary (a serializer's magic byte, a hash). The key is
	// left out of the error: it may be long, and it is in the dead letter.
	sendKey = h.keyHeader != "" && len(m.Key) > 0
	if sendKey && !validKey(m.Key) {
		return false, fmt.Errorf("http: message key of %d bytes is not a valid %s value (control characters, or white space at an end): %w", len(m.Key), h.keyHeader, shaper.ErrMalformed)
	}
	return sendKey, nil
}

// newRequest makes the request of m under ctx, with its headers and, when
// signing, its signature, which it also returns ("" when not signed). The
// body is a bytes.Reader so that net/http can re-obtain it for a resend of
// a request of which nothing was written.
func (h *httpSink) newRequest(ctx context.Context, rawURL string, m *shaper.Message, sendKey bool) (*http.Request, string, error) {
	req, err := http.NewRequestWithContext(ctx, h.method, rawURL, bytes.NewReader(m.Payload))
	if err != nil {
		return nil, "", fmt.Errorf("http: new request: %w", withoutURL(err))
	}
	// One map, sized for what is added below; the configured values are
	// shared, capped so that an append could never write into them.
	req.Header = make(http.Header, len(h.header)+len(h.signHeaders)+len(m.Header)+2)
	for k, v := range h.header {
		req.Header[k] = v[:len(v):len(v)]
	}
	if h.forward {
		h.forwardHeaders(req.Header, m.Header)
	}
	if sendKey {
		req.Header.Set(h.keyHeader, string(m.Key))
	}
	if m.ID != "" {
		req.Header.Set("Idempotency-Key", m.ID)
	}
	// After the forwarded headers: a message cannot choose them.
	sig, err := h.sign(req.Header, m)
	if err != nil {
		return nil, "", err
	}
	if h.host != "" {
		req.Host = h.host
	}
	return req, sig, nil
}

// schemeMismatch returns http.ErrSchemeMismatch for an https request that
// an HTTP server answered (as http.Client does), and err otherwise.
func schemeMismatch(err error) error {
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) && string(rh.RecordHeader[:]) == "HTTP/" {
		return http.ErrSchemeMismatch
	}
	return err
}

// drainClose reads what is left of a response body, up to maxDrain, so
// the connection goes back to the pool, and closes it.
func drainClose(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, maxDrain)
	_ = body.Close()
}
