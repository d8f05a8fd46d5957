// This file holds the HTTP sink's per-message destinations (url_from): the
// URL a message names, the guard it must pass, and the dialer that checks
// the address actually dialled.

package sinks

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/shaper-dev/shaper/internal/urlguard"
	"github.com/shaper-dev/shaper/shaper"
)

// lookupFunc is the signature of net.Resolver.LookupNetIP.
type lookupFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

// destination returns the URL to request for m and its scheme://host, for
// errors: the configured URL, or with url_from the one m names, once the
// guard accepts it. A URL refused is an error wrapping shaper.ErrRefused
// that says why, never quoting more of the URL than its host.
func (h *httpSink) destination(m *shaper.Message) (rawURL, target string, err error) {
	if h.urlOf == nil {
		return h.url, h.target, nil
	}
	raw, ok := h.urlOf(m)
	if !ok || raw == "" {
		return "", "", refused(fmt.Errorf("http: the message names no URL (%s)", h.urlFrom))
	}
	u, err := h.guard.Check(raw)
	if err != nil {
		return "", "", refused(fmt.Errorf("http: url from %s: %w", h.urlFrom, err))
	}
	return u.String(), u.Scheme + "://" + u.Host, nil
}

// Destination returns the canonical origin of m's request (see
// shaper.Destinations): with url_from, of the URL m names once the guard
// accepts it ("" when it does not); else of the configured URL. The core
// asks it once, when m enters the bucket; Send checks the URL again under
// the guard in force then, since a reload may have narrowed allowed_hosts
// while m waited.
func (s *HTTP) Destination(m *shaper.Message) string {
	h := s.cur.Load()
	if h.urlOf == nil {
		return h.origin
	}
	raw, ok := h.urlOf(m)
	if !ok {
		return ""
	}
	u, err := h.guard.Check(raw)
	if err != nil {
		return ""
	}
	return origin(u)
}

// origin is u's canonical origin: scheme://host:port, the host in lower
// case without a trailing dot or an IP literal in canonical form (an
// IPv4-mapped IPv6 address as IPv4, IPv6 compressed and bracketed), the
// port the scheme's default when u names none.
func origin(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().WithZone("").String()
	}
	port := defaultPort(scheme)
	if n, err := strconv.Atoi(u.Port()); err == nil {
		port = n // "0080" is 80
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port))
}

// defaultPort is the port of a URL of scheme that names none.
func defaultPort(scheme string) int {
	if scheme == "http" {
		return 80
	}
	return 443
}

// refusedError marks err as shaper.ErrRefused, keeping its text.
type refusedError struct{ error }

func (e refusedError) Unwrap() error      { return e.error }
func (refusedError) Is(target error) bool { return target == shaper.ErrRefused }

func refused(err error) error { return refusedError{err} }

// guardedDial returns the dialer of a sink with url_from: it looks the
// host up (lookup), refuses unless every address it gives passes the guard
// (a name the guard allowed may still resolve to a private address: DNS
// rebinding), and dials an address it checked (dial, which in production
// checks the address again in its Control hook). lookup and dial are the
// system's when nil.
func guardedDial(g *urlguard.Guard, lookup lookupFunc, dial dialFunc) dialFunc {
	if lookup == nil {
		lookup = net.DefaultResolver.LookupNetIP
	}
	if dial == nil {
		dial = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second, Control: g.Control}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		var ips []netip.Addr
		if ip, err := netip.ParseAddr(host); err == nil {
			ips = []netip.Addr{ip}
		} else if ips, err = lookup(ctx, "ip", host); err != nil {
			return nil, err
		}
		if len(ips) == 0 {
			return nil, fmt.Errorf("http: %s has no address", host)
		}
		for _, ip := range ips {
			if err := g.Control(network, net.JoinHostPort(ip.Unmap().String(), port), nil); err != nil {
				return nil, refused(fmt.Errorf("http: %s: %w", host, err))
			}
		}
		var last error
		for _, ip := range ips {
			conn, err := dial(ctx, network, net.JoinHostPort(ip.Unmap().String(), port))
			if err == nil {
				return conn, nil
			}
			last = err
		}
		return nil, last
	}
}
