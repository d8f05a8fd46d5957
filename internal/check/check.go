// Package check holds what every part's config validation shares: a list
// of problems, each "key.path: what is wrong", and the rules that more than
// one part applies (host:port, NATS URLs and subjects, key paths). Errors
// describe a value they refuse and never echo one that may hold a
// credential (a URL, an address with user information).
//
// A part's Validate(path string) error returns Problems.Err: every problem
// at once, joined, each starting with its key path, which the config
// loader maps to a place in the file.
package check

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Problems collects validation errors, each with its key path.
type Problems []error

// Add records a problem at path.
func (ps *Problems) Add(path, format string, args ...any) {
	*ps = append(*ps, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

// Also records every problem of err, a Validate's result (nil adds none).
func (ps *Problems) Also(err error) {
	*ps = append(*ps, Flatten(err)...)
}

// Err returns the problems joined, or nil when there are none.
func (ps Problems) Err() error {
	return errors.Join(ps...)
}

// Flatten returns the problems joined in err, however deeply, in order.
func Flatten(err error) []error {
	if err == nil {
		return nil
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range joined.Unwrap() {
		out = append(out, Flatten(e)...)
	}
	return out
}

// Positive checks that d, the duration at path, is > 0.
func (ps *Problems) Positive(path string, d time.Duration) {
	if d <= 0 {
		ps.Add(path, "must be > 0, got %s", d)
	}
}

// Join appends key to a key path: ".key", or ["key"] quoted when it is not
// plain letters, digits, '_' and '-' (a header name with a '.', a key with
// a space or a newline), so every error line starts with an unambiguous path.
func Join(path, key string) string {
	if !plainKey.MatchString(key) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// HostPort checks addr as host:port at path.
func (ps *Problems) HostPort(path, addr string) {
	if strings.Contains(addr, "@") || strings.Contains(addr, "://") {
		// redis://:password@host:6379 is a common slip; echoing it would
		// print the password.
		ps.Add(path, "want host:port, got a URL or user information (not shown): credentials go in their own keys")
		return
	}
	if host, port, err := net.SplitHostPort(addr); err != nil || host == "" || port == "" {
		ps.Add(path, "want host:port, got %q", addr)
	}
}

// NATSURL checks raw as one or more comma-separated NATS server URLs.
func (ps *Problems) NATSURL(path, raw string) {
	if raw == "" {
		ps.Add(path, "required")
		return
	}
	// A URL is described, never echoed: it may carry a user and password,
	// or a token in the user position.
	parts := strings.Split(raw, ",")
	for i, part := range parts {
		which := ""
		if len(parts) > 1 {
			which = fmt.Sprintf(" (URL %d of %d)", i+1, len(parts))
		}
		u, err := url.Parse(strings.TrimSpace(part))
		switch {
		case err != nil:
			ps.Add(path, "want nats://host:port%s: %s", which, URLProblem(err))
			continue
		case u.Host == "":
			ps.Add(path, "want nats://host:port%s, got one without a host", which)
			continue
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			ps.Add(path, "want scheme nats, tls, ws or wss%s, got %s", which, ShownScheme(u.Scheme))
		}
	}
}

// NATSSubject checks a NATS subject: required, no white space, and no
// wildcard ('*', '>') unless wildcards is true (a subscription's; a
// publish goes to a literal subject).
func (ps *Problems) NATSSubject(path, subject string, wildcards bool) {
	switch {
	case subject == "":
		ps.Add(path, "required")
	case wildcards && strings.ContainsAny(subject, " \t\r\n"):
		ps.Add(path, "must not contain whitespace, got %q", subject)
	case !wildcards && strings.ContainsAny(subject, " \t\r\n*>"):
		ps.Add(path, "must be a literal subject (no whitespace or wildcards), got %q", subject)
	}
}

// URLProblem says why url.Parse refused a URL without quoting the URL: the
// *url.Error is left out, and so is a cause that quotes a piece of it (an
// invalid port or escape), which may be a piece of a password.
func URLProblem(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if msg := err.Error(); !strings.ContainsAny(msg, "\"'`") {
		return msg
	}
	return "it does not parse as a URL (the offending part is not shown: it may be a credential)"
}

// ShownScheme quotes a URL scheme for an error, unless it is long enough to
// be the start of a credential mistaken for a URL.
func ShownScheme(scheme string) string {
	if len(scheme) <= 10 {
		return strconv.Quote(scheme)
	}
	return "of " + strconv.Itoa(len(scheme)) + " characters"
}

// IsLoopback reports whether host names the loopback interface: localhost,
// an address in 127.0.0.0/8, or ::1. An empty host or an unspecified
// address (0.0.0.0, ::) is every interface, not loopback; any other name is
// taken as reachable from elsewhere, since it is not resolved.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
