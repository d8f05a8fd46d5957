// This file holds the HTTP sink's proxy rule (none unless configured,
// "environment" read when the sink is built, never a credential shown) and
// the resend guard, which shares the Transport's Proxy hook: one Send
// writes at most one request.

package sinks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync/atomic"

	"golang.org/x/net/http/httpproxy"
)

// sentOnce is the state of one Send that the Transport's hooks share
// through the request's context: whether the request was written whole.
type sentOnce struct {
	written atomic.Bool
	trace   httptrace.ClientTrace
}

type sentOnceKey struct{}

// errResend refuses net/http's resending of a request it wrote whole.
var errResend = errors.New("connection lost after the request was written, before an answer; not sent again, as a second request would take no rate slot")

// withSentOnce returns ctx with the resend guard of one Send: a request
// made with it is written at most once, whatever net/http would do.
//
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
func withSentOnce(ctx context.Context) context.Context {
	sent := &sentOnce{}
	sent.trace.WroteRequest = func(info httptrace.WroteRequestInfo) {
		if info.Err == nil {
			sent.written.Store(true)
		}
	}
	return httptrace.WithClientTrace(context.WithValue(ctx, sentOnceKey{}, sent), &sent.trace)
}

// proxyOrRefuseResend is the Transport's Proxy function. The Transport
// calls it before every attempt of a request, so it is where a resend of a
// request already written is stopped (see withSentOnce); otherwise it
// returns the proxy of these settings, nil for none.
func (h *httpSink) proxyOrRefuseResend(r *http.Request) (*url.URL, error) {
	if s, _ := r.Context().Value(sentOnceKey{}).(*sentOnce); s != nil && s.written.Load() {
		return nil, errResend
	}
	return h.proxy, nil
}

// setProxy takes the proxy of the setting for requests to target into
// h.proxy and h.proxyInfo, and its password into the secrets.
func (h *httpSink) setProxy(setting string, target *url.URL) error {
	var err error
	if h.proxy, h.proxyInfo, err = proxyFor(setting, target); err != nil {
		return err
	}
	if h.proxy != nil && h.proxy.User != nil {
		if pw, ok := h.proxy.User.Password(); ok {
			h.addSecrets(pw)
		}
	}
	return nil
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
	case ProxyEnvironment:
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
