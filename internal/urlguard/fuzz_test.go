package urlguard

import (
	"errors"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// FuzzCheck checks Check on arbitrary input, with and without
// allow_private: it never panics; a refusal wraps ErrRefused and is short
// (the input is never echoed whole); and a URL it accepts came from input
// without control characters, spaces or backslashes, is https (or http
// where an http:// entry or allow_private allows it), has no user
// information or fragment, names a host that an entry matches on that
// port (by a matcher written separately here) and, for an IP literal, a
// public one unless allow_private; it reads back the same through
// url.Parse, and Check accepts it again unchanged.
//
// The seed corpus is testdata/fuzz/FuzzCheck (hostile URLs) and the
// f.Add calls below (allowed ones).
func FuzzCheck(f *testing.F) {
	for _, seed := range []string{
		"https://api.partner.com/notify",
		"https://a.b.merchant.example/x?y=1",
		"HTTPS://ALLOWED.EXAMPLE.:443/p?q#f",
		"https://ports.example:8443/",
		"http://plain.example/",
		"http://plain-port.example:8080/",
		"https://93.184.215.14/",
		"https://[2606:4700:4700::1111]:8443/",
		"http://127.0.0.1:8080/hook",
	} {
		f.Add(seed)
	}
	guards := []struct {
		g            *Guard
		allowPrivate bool
	}{
		{g: mustNew(f, testHosts, false)},
		{g: mustNew(f, append([]string{"127.0.0.1"}, testHosts...), true), allowPrivate: true},
	}
	f.Fuzz(func(t *testing.T, raw string) {
		for _, gg := range guards {
			u, err := gg.g.Check(raw)
			if err != nil {
				if u != nil {
					t.Fatalf("Check(%q) = %v, %v; want no URL with an error", raw, u, err)
				}
				if !errors.Is(err, ErrRefused) {
					t.Fatalf("Check(%q) = %v; want an error wrapping ErrRefused", raw, err)
				}
				if len(err.Error()) > 512 {
					t.Fatalf("Check(%q): error of %d bytes", raw, len(err.Error()))
				}
				continue
			}
			checkAccepted(t, raw, u, gg.allowPrivate)
			again, err := gg.g.Check(u.String())
			if err != nil || again.String() != u.String() {
				t.Fatalf("Check(%q) = %s, but Check(%s) = %v, %v", raw, u, u, again, err)
			}
		}
	})
}

// checkAccepted fails t unless u, accepted by Check from raw with
// testHosts (and 127.0.0.1 with allowPrivate), keeps every promise of
// Check.
func checkAccepted(t *testing.T, raw string, u *url.URL, allowPrivate bool) {
	t.Helper()
	if len(raw) > MaxURLBytes {
		t.Fatalf("Check accepted %d bytes", len(raw))
	}
	if i := strings.IndexFunc(raw, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '\\' }); i >= 0 {
		t.Fatalf("Check(%q) accepted byte %#02x at %d", raw, raw[i], i)
	}
	if u.User != nil || u.Fragment != "" || u.RawFragment != "" || u.Opaque != "" {
		t.Fatalf("Check(%q) = %#v: user information, fragment or opaque", raw, u)
	}
	for i := 0; i < len(u.Host); i++ {
		c := u.Host[i]
		if c <= ' ' || c >= 0x7f || c == '%' || c == '@' || 'A' <= c && c <= 'Z' {
			t.Fatalf("Check(%q): host %q has byte %#02x", raw, u.Host, c)
		}
	}
	host, port := u.Hostname(), u.Port()
	if strings.HasSuffix(host, ".") {
		t.Fatalf("Check(%q): host %q ends in a dot", raw, u.Host)
	}
	if port == "" {
		port = map[string]string{"https": "443", "http": "80"}[u.Scheme]
	} else if port == "443" && u.Scheme == "https" || port == "80" && u.Scheme == "http" {
		t.Fatalf("Check(%q) = %s: keeps the default port", raw, u)
	}
	httpEntry := false
	switch {
	case host == "allowed.example", host == "api.partner.com", host == "93.184.215.14", host == "2606:4700:4700::1111":
	case strings.HasSuffix(host, ".allowed.example"), strings.HasSuffix(host, ".merchant.example"):
	case host == "ports.example" && port == "8443":
	case host == "plain.example":
		httpEntry = true
	case host == "plain-port.example" && port == "8080":
		httpEntry = true
	case host == "127.0.0.1" && allowPrivate:
	default:
		t.Fatalf("Check(%q) = %s: host %q port %s matches no entry", raw, u, host, port)
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !httpEntry && !allowPrivate {
			t.Fatalf("Check(%q) = %s: plain http without an http:// entry or allow_private", raw, u)
		}
	default:
		t.Fatalf("Check(%q) = %s: scheme %q", raw, u, u.Scheme)
	}
	if ip, err := netip.ParseAddr(host); err == nil && nonPublic(ip) != "" && !allowPrivate {
		t.Fatalf("Check(%q) = %s: %s is %s", raw, u, ip, nonPublic(ip))
	}
	v, err := url.Parse(u.String())
	if err != nil || v.Scheme != u.Scheme || v.Host != u.Host || v.User != nil || v.EscapedPath() != u.EscapedPath() || v.RawQuery != u.RawQuery {
		t.Fatalf("Check(%q) = %s, which url.Parse reads as %#v, %v", raw, u, v, err)
	}
}
