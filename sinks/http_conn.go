// This file builds the sink's own HTTP/1.1 client (package internal/h1) for
// a fixed URL without a proxy.

package sinks

import (
	"crypto/tls"
	"net"
	"net/url"

	"github.com/shaper-dev/shaper/internal/h1"
)

// newOwnClient returns the own client of cfg for u, a fixed http:// or
// https:// URL without a proxy: at most cfg.MaxInFlightPerHost connections,
// dialled by dial and wrapped by cfg.WrapConn; over TLS with tlsConfig
// (nil: the system's CAs), checking u's host unless it names a server_name,
// as net/http's Transport does, and offering only http/1.1.
func newOwnClient(cfg HTTPConfig, u *url.URL, tlsConfig *tls.Config, dial dialFunc) *h1.Client {
	port := u.Port()
	var tc *tls.Config
	switch {
	case u.Scheme == "https":
		tc = tlsConfig.Clone()
		if tc == nil {
			tc = &tls.Config{}
		}
		if tc.ServerName == "" {
			tc.ServerName = u.Hostname()
		}
		tc.NextProtos = []string{"http/1.1"}
		if port == "" {
			port = "443"
		}
	case port == "":
		port = "80"
	}
	return h1.New(h1.Config{
		Addr:             net.JoinHostPort(u.Hostname(), port),
		TLS:              tc,
		Dial:             dial,
		Wrap:             cfg.WrapConn,
		MaxConns:         max(cfg.MaxInFlightPerHost, 1),
		Timeout:          cfg.Timeout,
		HandshakeTimeout: tlsHandshakeTimeout,
		IdleTimeout:      idleConnTimeout,
		MaxDrain:         maxDrain,
	})
}
