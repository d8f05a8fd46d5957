// Package urlguard is the HTTP sink's guard for per-message destinations
// (sink.http.url_from): a message names its own endpoint, and the guard
// decides whether it may be requested, so that a message cannot make
// shaper request the cloud metadata service, an admin port on loopback or
// anything else inside the network it runs in.
//
// It works in two steps. Check reads the URL a message names, before any
// DNS lookup: https only (http where allowed), no user information, a host
// that matches allowed_hosts, an IP literal only in its one standard
// spelling and only when listed. Control, the net.Dialer's Control hook,
// then refuses the connection when the address actually dialled is not
// public, which a name that passed Check may well resolve to (DNS
// rebinding). Redirects are the sink's to refuse; nothing here follows one.
//
// Errors say why a URL was refused without echoing the URL: its path or
// query may carry a token. They show the scheme, the host and the port.
package urlguard

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/shaper-dev/shaper/internal/check"
)

// ErrRefused is wrapped by every error of Check and Control: the URL or the
// address may not be requested, and never will be, so the message is to be
// dead-lettered as rejected, not retried. Match it with errors.Is.
var ErrRefused = errors.New("destination refused")

// MaxURLBytes is the longest URL Check accepts, in bytes.
const MaxURLBytes = 8 << 10

// Guard decides whether a URL a message names may be requested (Check) and
// whether an address may be dialled (Control). It is built once from the
// sink's allowed_hosts and allow_private, never changes, and is safe for
// simultaneous use by multiple goroutines.
//
// The zero Guard allows no host and refuses every address that is not
// public.
type Guard struct {
	// byHost holds the entries by what they match: a name or an IP's
	// text for an exact entry, "*."+suffix for a wildcard, so that a check
	// costs the same with 10 entries or 10 000.
	byHost       map[string][]entry
	allowPrivate bool
}

// candidates returns the entries that may match name or ip: the exact ones,
// and the wildcards of each suffix of name.
func (g *Guard) candidates(name string, ip netip.Addr) []entry {
	if ip.IsValid() {
		return g.byHost[ip.String()]
	}
	out := g.byHost[name]
	for i := 0; i < len(name); i++ {
		if name[i] == '.' {
			out = append(out[:len(out):len(out)], g.byHost["*."+name[i+1:]]...)
		}
	}
	return out
}

// key is what an entry is filed under in byHost.
func (e entry) key() string {
	switch {
	case e.ip.IsValid():
		return e.ip.String()
	case e.wild:
		return "*." + e.name
	}
	return e.name
}

// entry is one compiled allowed_hosts entry.
type entry struct {
	name string     // lower case, no trailing dot; a wildcard's suffix; "" for an IP
	wild bool       // name is a suffix: any subdomain matches, name itself does not
	ip   netip.Addr // the address of an IP entry
	port int        // the only port allowed; 0 for any
	http bool       // written http://: plain http allowed as well as https
}

// EntryError is one refused allowed_hosts entry. New returns one for each
// entry it refuses, joined, so that config validation can show them all
// with their key paths.
type EntryError struct {
	// Index is the entry's position in allowed_hosts.
	Index int
	// Entry is the entry as written, or "" when it is not shown because
	// it may hold a credential (it has user information).
	Entry string
	// Reason says what is wrong with it.
	Reason string
}

// Error returns "allowed_hosts[i]: "entry": reason".
func (e *EntryError) Error() string {
	if e.Entry == "" {
		return fmt.Sprintf("allowed_hosts[%d]: %s", e.Index, e.Reason)
	}
	return fmt.Sprintf("allowed_hosts[%d]: %q: %s", e.Index, e.Entry, e.Reason)
}

// New compiles allowed_hosts and allow_private into a Guard. An entry is a
// host name or IP address, matched whatever the port and case, or with a
// port (api.partner.com:8443, [2001:db8::1]:8443) matched on that port
// only; "*.suffix" matches any subdomain of suffix, not suffix itself. An
// entry written http://host also allows plain http to the hosts it
// matches (https:// may be written too and changes nothing): otherwise
// only https is requested, unless allowPrivate.
//
// New refuses an empty list, and each entry that is empty, has a path,
// query, user information, white space or another scheme, matches every
// host ("*", "*.") or a whole public suffix ("*.com", "*.co.uk",
// "*.github.io"), spells an IP address other than in its standard form,
// or, without allowPrivate, names an address or name that is not public
// (10.0.0.1, localhost). It returns an *EntryError for every refused
// entry, joined.
func New(allowedHosts []string, allowPrivate bool) (*Guard, error) {
	if len(allowedHosts) == 0 {
		return nil, errors.New("allowed_hosts: required: at least one host a message's URL may name")
	}
	g := &Guard{allowPrivate: allowPrivate, byHost: map[string][]entry{}}
	var errs []error
	for i, raw := range allowedHosts {
		e, shown, why := parseEntry(raw, allowPrivate)
		if why != "" {
			if !shown {
				raw = ""
			}
			errs = append(errs, &EntryError{Index: i, Entry: raw, Reason: why})
			continue
		}
		g.byHost[e.key()] = append(g.byHost[e.key()], e)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return g, nil
}

// parseEntry compiles one allowed_hosts entry, or says why not; shown is
// false when the entry must not be echoed.
func parseEntry(s string, allowPrivate bool) (e entry, shown bool, why string) {
	shown = !strings.Contains(s, "@")
	if s, e.http, why = entryScheme(s); why != "" {
		return e, shown, why
	}
	host, port, bracketed, why := entryHostPort(s)
	if why != "" {
		return e, shown, why
	}
	e.port = port
	switch {
	case bracketed || strings.Contains(host, ":"):
		ip, why := ipv6Entry(host, allowPrivate)
		if why != "" {
			return e, shown, why
		}
		e.ip = ip
	case strings.HasPrefix(host, "*"):
		suffix, why := wildcardEntry(host, allowPrivate)
		if why != "" {
			return e, shown, why
		}
		e.name, e.wild = suffix, true
	case strings.Contains(host, "*"):
		return e, shown, "'*' is allowed only as the whole first label, *.suffix"
	default:
		name, ip, why := hostEntry(host, allowPrivate)
		if why != "" {
			return e, shown, why
		}
		e.name, e.ip = name, ip
	}
	return e, shown, ""
}

// entryScheme strips the http:// or https:// an entry may start with
// (http tells it was http://) and refuses an entry that is empty, holds
// white space or a control character, has another scheme, or is more
// than a host, host:port or *.suffix.
func entryScheme(s string) (rest string, http bool, why string) {
	if s == "" {
		return s, false, "empty"
	}
	if i := strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }); i >= 0 {
		return s, false, "contains white space or a control character"
	}
	if i := strings.Index(s, "://"); i >= 0 {
		switch scheme := strings.ToLower(s[:i]); scheme {
		case "http":
			http = true
		case "https":
		default:
			return s, false, fmt.Sprintf("scheme %s: only http:// (to allow plain http too) or https:// may prefix an entry", check.ShownScheme(s[:i]))
		}
		s = s[i+3:]
	}
	switch {
	case strings.Contains(s, "@"):
		return s, http, "has user information (the entry is not shown: it may hold a password); an entry is a host, host:port or *.suffix"
	case strings.ContainsAny(s, "/?#\\"):
		return s, http, "has a path, query or fragment; an entry is a host, host:port or *.suffix"
	case strings.Contains(s, "%"):
		return s, http, "has percent-encoding or an IPv6 zone; an entry is a host, host:port or *.suffix"
	case s == "":
		return s, http, "no host"
	}
	return s, http, ""
}

// entryHostPort splits an entry, its scheme stripped, into the host,
// without brackets (bracketed tells it had them), and the port, 0 when
// none is written. An entry with more than one ':' and no brackets is all
// host: an IPv6 address, which ipv6Entry reads.
func entryHostPort(s string) (host string, port int, bracketed bool, why string) {
	host, portPart := s, ""
	bracketed = strings.HasPrefix(s, "[")
	switch {
	case bracketed:
		end := strings.Index(s, "]")
		if end < 0 {
			return "", 0, bracketed, "'[' without ']'"
		}
		host, portPart = s[1:end], s[end+1:]
		if portPart != "" {
			if portPart[0] != ':' {
				return "", 0, bracketed, "something other than :port after ']'"
			}
			portPart = portPart[1:]
			if portPart == "" {
				return "", 0, bracketed, "no port after ':'"
			}
		}
	case strings.Count(s, ":") == 1:
		host, portPart, _ = strings.Cut(s, ":")
		if portPart == "" {
			return "", 0, bracketed, "no port after ':'"
		}
	}
	if portPart != "" {
		p, ok := parsePort(portPart)
		if !ok {
			return "", 0, bracketed, fmt.Sprintf("port %q is not a number from 1 to 65535", portPart)
		}
		port = p
	}
	return host, port, bracketed, ""
}

// ipv6Entry reads the host of an entry that was bracketed or has a ':': an
// IPv6 address in its standard form, not IPv4-mapped, and public unless
// allowPrivate.
func ipv6Entry(host string, allowPrivate bool) (netip.Addr, string) {
	ip, err := netip.ParseAddr(host)
	switch {
	case err != nil || !ip.Is6():
		return netip.Addr{}, "not an IPv6 address (a name or IPv4 address is written without brackets)"
	case ip.Is4In6():
		return netip.Addr{}, fmt.Sprintf("an IPv4-mapped IPv6 address: write %s", ip.Unmap())
	}
	if why := privateRefused(ip, allowPrivate); why != "" {
		return netip.Addr{}, why
	}
	return ip, ""
}

// wildcardEntry reads an entry's host that starts with '*': "*.suffix",
// where suffix is a name, neither a whole public suffix nor, unless
// allowPrivate, under localhost. It returns the suffix.
func wildcardEntry(host string, allowPrivate bool) (string, string) {
	if host == "*" || host == "*." {
		return "", "matches every host; name the hosts, or *.suffix for the subdomains of one"
	}
	if !strings.HasPrefix(host, "*.") || strings.Contains(host[2:], "*") {
		return "", "'*' is allowed only as the whole first label, *.suffix"
	}
	suffix, ip, why := canonicalHost(host[2:])
	switch {
	case why != "":
		return "", why
	case ip.IsValid():
		return "", "a wildcard of an IP address; list the address"
	}
	switch ps, _ := publicsuffix.PublicSuffix(suffix); {
	case isLocalhost(suffix):
		if !allowPrivate {
			return "", "names under localhost are loopback: allowed only with allow_private"
		}
	case ps == suffix:
		return "", fmt.Sprintf("matches a whole public suffix (%s): anyone can register a name under it", suffix)
	}
	return suffix, ""
}

// hostEntry reads an entry's host that is a name or an IPv4 address:
// either is allowed only if public, unless allowPrivate.
func hostEntry(host string, allowPrivate bool) (name string, ip netip.Addr, why string) {
	name, ip, why = canonicalHost(host)
	switch {
	case why != "":
		return "", netip.Addr{}, why
	case ip.IsValid():
		if why := privateRefused(ip, allowPrivate); why != "" {
			return "", netip.Addr{}, why
		}
		return "", ip, ""
	case isLocalhost(name) && !allowPrivate:
		return "", netip.Addr{}, "localhost is loopback: allowed only with allow_private"
	}
	return name, netip.Addr{}, ""
}

// privateRefused says why an entry may not list ip, an address that is not
// public, without allowPrivate; "" when it may.
func privateRefused(ip netip.Addr, allowPrivate bool) string {
	if why := nonPublic(ip); why != "" && !allowPrivate {
		return fmt.Sprintf("%s is %s: allowed only with allow_private", ip, why)
	}
	return ""
}

// isLocalhost reports whether name is localhost or a name under it, which
// resolvers answer with loopback (RFC 6761).
func isLocalhost(name string) bool {
	return name == "localhost" || strings.HasSuffix(name, ".localhost")
}

// parsePort reads a port number from 1 to 65535, in decimal digits only
// (leading zeros are read as a dialer reads them).
func parsePort(s string) (int, bool) {
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	t := strings.TrimLeft(s, "0")
	if t == "" || len(t) > 5 {
		return 0, false
	}
	p, _ := strconv.Atoi(t)
	return p, p <= 65535
}

// canonicalHost reads a host name or an IPv4 address (not bracketed): the
// name in lower case without its trailing dot, or the address; or why it
// refuses it. A host whose last label is a number (decimal, or hex with
// 0x) is an IPv4 address to a browser and to the C resolver, in any of
// their spellings (2130706433, 0x7f.1, 0177.0.0.1): it is accepted only as
// four decimal numbers without leading zeros, its one unambiguous form.
func canonicalHost(h string) (name string, ip netip.Addr, why string) {
	for i := 0; i < len(h); i++ {
		if h[i] >= 0x80 {
			return "", ip, "a non-ASCII host name: write it in its punycode form (xn--...)"
		}
	}
	name = strings.ToLower(strings.TrimSuffix(h, "."))
	if name == "" {
		return "", ip, "no host"
	}
	if len(name) > 253 {
		return "", ip, "a host name longer than 253 characters"
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return "", ip, fmt.Sprintf("character %q in the host name", c)
		}
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		switch {
		case l == "":
			return "", ip, "an empty label (two dots, or a leading dot) in the host name"
		case len(l) > 63:
			return "", ip, "a label longer than 63 characters in the host name"
		}
	}
	if isNumber(labels[len(labels)-1]) {
		if ip, err := netip.ParseAddr(name); err == nil && ip.Is4() {
			return "", ip, ""
		}
		return "", ip, "an IPv4 address in a non-standard spelling (decimal, hex, octal or short form): write it as four decimal numbers"
	}
	return name, ip, ""
}

// isNumber reports whether a label is a number to the WHATWG URL parser's
// IPv4 reading: decimal digits, or 0x followed by hex digits or nothing.
func isNumber(l string) bool {
	if rest, ok := strings.CutPrefix(l, "0x"); ok {
		for i := 0; i < len(rest); i++ {
			c := rest[i]
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(l); i++ {
		if l[i] < '0' || l[i] > '9' {
			return false
		}
	}
	return l != ""
}

// Check reads raw, the URL a message names, and returns the URL to
// request, or an error wrapping ErrRefused that says why not. It never
// resolves a name: whether the address a name resolves to is public is
// Control's to decide when it is dialled.
//
// raw is refused when it is longer than MaxURLBytes, as written or as it
// would be sent (escaped); has a control
// character, a space or a backslash anywhere; is not absolute http or
// https (a relative or scheme-relative URL, another scheme); is plain
// http and neither the matching entry (http://host) nor allow_private
// allows it; has user information, no host, a percent-encoded host, a
// non-ASCII host, or a port outside 1 to 65535; names a host that no
// entry matches, on that port; or names an IP address that is not listed
// exactly, is not public (unless allow_private), is written in another
// spelling than four decimal numbers, is an IPv4-mapped IPv6 address or
// has an IPv6 zone.
//
// The URL returned has the host in lower case without a trailing dot, the
// port only when it is not the scheme's default, and no fragment (a
// fragment is never sent; it is dropped, not refused). Its Host is thus
// the same for every spelling of one destination, which suits a key per
// host.
func (g *Guard) Check(raw string) (*url.URL, error) {
	if err := checkBytes(raw); err != nil {
		return nil, err
	}
	d, err := readDestination(raw)
	if err != nil {
		return nil, err
	}
	if err := g.allow(d); err != nil {
		return nil, err
	}
	return d.url(raw)
}

// destination is what Check reads from a URL before url.Parse does: where
// a request to it would go, and how to name that place in an error.
type destination struct {
	scheme    string     // "https" or "http", in lower case
	authority string     // as written, between "//" and the path
	name      string     // the host name, lower case, no trailing dot; "" for an IP
	ip        netip.Addr // the address of an IP literal
	port      int        // the port written, or the scheme's default
	shown     string     // the host in errors
	hostOf    string     // the host of the URL returned, brackets included
}

// checkBytes refuses raw for its length or for a byte that no URL a
// message may name has: a control character, a space or a backslash.
func checkBytes(raw string) error {
	if len(raw) > MaxURLBytes {
		return refuse("longer than %d bytes (%d)", MaxURLBytes, len(raw))
	}
	if raw == "" {
		return refuse("no URL")
	}
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c < ' ' || c == 0x7f:
			return refuse("a control character (%#02x) at byte %d", c, i)
		case c == ' ':
			return refuse("a space at byte %d (write %%20)", i)
		case c == '\\':
			return refuse("a backslash at byte %d (browsers read it as '/', Go does not)", i)
		}
	}
	return nil
}

// readDestination reads the scheme and the authority of raw. They are read
// here, before url.Parse, so that each refusal is precise; url.Parse then
// reads the rest, and must agree (see destination.url).
func readDestination(raw string) (destination, error) {
	var d destination
	scheme, rest, ok := splitScheme(raw)
	if !ok {
		return d, refuse("no scheme: want an absolute https:// URL")
	}
	d.scheme = strings.ToLower(scheme)
	if d.scheme != "https" && d.scheme != "http" {
		return d, refuse("scheme %s: want https", check.ShownScheme(d.scheme))
	}
	authority, ok := strings.CutPrefix(rest, "//")
	if !ok {
		return d, refuse("no host: want %s://host/...", d.scheme)
	}
	if i := strings.IndexAny(authority, "/?#"); i >= 0 {
		authority = authority[:i]
	}
	switch {
	case strings.Contains(authority, "@"):
		return d, refuse("user information in the URL (not shown); a message's URL may not carry credentials")
	case authority == "":
		return d, refuse("no host")
	case strings.HasPrefix(authority, "[") && strings.Contains(authority, "%"):
		return d, refuse("an IPv6 zone in the host")
	case strings.Contains(authority, "%"):
		return d, refuse("percent-encoding in the host")
	}
	d.authority = authority
	host, bracketed, err := d.readPort()
	if err != nil {
		return d, err
	}
	return d, d.readHost(host, bracketed)
}

// readPort splits d.authority into the host and the port, sets d.port
// (the scheme's default when none is written) and returns the host,
// without brackets; bracketed tells that it had them.
func (d *destination) readPort() (host string, bracketed bool, err error) {
	host, portPart := d.authority, ""
	if strings.HasPrefix(host, "[") {
		end := strings.Index(host, "]")
		if end < 0 {
			return "", false, refuse("'[' without ']' in the host")
		}
		host, portPart, bracketed = host[1:end], host[end+1:], true
		if portPart != "" && portPart[0] != ':' {
			return "", false, refuse("something other than :port after ']'")
		}
		portPart = strings.TrimPrefix(portPart, ":")
	} else if i := strings.LastIndex(host, ":"); i >= 0 {
		host, portPart = host[:i], host[i+1:]
	}
	d.port = defaultPort(d.scheme)
	if portPart != "" {
		p, ok := parsePort(portPart)
		if !ok {
			return "", false, refuse("port %q is not a number from 1 to 65535", shorten(portPart))
		}
		d.port = p
	}
	return host, bracketed, nil
}

// readHost reads host, an IPv6 address when it was bracketed and a name or
// an IPv4 address otherwise, into d.name or d.ip, d.shown and d.hostOf.
func (d *destination) readHost(host string, bracketed bool) error {
	if bracketed {
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() {
			return refuse("%q in brackets is not an IPv6 address", shorten(host))
		}
		d.ip, d.shown, d.hostOf = a, a.String(), "["+a.String()+"]"
		return nil
	}
	name, ip, why := canonicalHost(host)
	if why != "" {
		return refuse("%s", why)
	}
	d.name, d.ip, d.shown, d.hostOf = name, ip, name, name
	if ip.IsValid() {
		d.shown, d.hostOf = ip.String(), ip.String()
	}
	return nil
}

// allow refuses d unless it may be requested: an IP address must be
// public (or allow_private) and not IPv4-mapped, the host must match an
// entry on the port, and plain http must be allowed by a matching entry
// or by allow_private.
func (g *Guard) allow(d destination) error {
	if d.ip.IsValid() {
		if why := nonPublic(d.ip); why != "" && !g.allowPrivate {
			return refuse("%s is %s; refused without allow_private", d.ip, why)
		}
		if d.ip.Is4In6() {
			return refuse("%s is an IPv4-mapped IPv6 address; only %s could be listed", d.ip, d.ip.Unmap())
		}
	}
	httpOK := g.allowPrivate
	hostMatched, portMatched := false, false
	for _, e := range g.candidates(d.name, d.ip) {
		if !e.matches(d.name, d.ip) {
			continue
		}
		hostMatched = true
		if e.port != 0 && e.port != d.port {
			continue
		}
		portMatched = true
		httpOK = httpOK || e.http
	}
	switch {
	case !hostMatched && d.ip.IsValid():
		return refuse("IP address %s is not listed in allowed_hosts", d.shown)
	case !hostMatched:
		return refuse("host %q is not in allowed_hosts", d.shown)
	case !portMatched:
		return refuse("port %d of host %q is not allowed: its allowed_hosts entries name other ports", d.port, d.shown)
	case d.scheme == "http" && !httpOK:
		return refuse("plain http to %q: want https (an allowed_hosts entry http://%s, or allow_private, allows http)", d.shown, d.hostOf)
	}
	return nil
}

// url has url.Parse read the rest of raw (path, query and fragment),
// refuses raw if url.Parse reads its scheme or authority otherwise than
// readDestination did, and returns the URL to request: d's host, the port
// only when it is not the scheme's default, and no fragment.
func (d destination) url(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, refuse("not a URL: %s", check.URLProblem(err))
	}
	if u.Scheme != d.scheme || u.User != nil || u.Opaque != "" || u.Host != d.authority {
		// Unreachable as long as url.Parse reads a URL as readDestination does.
		return nil, refuse("the URL reads differently to the guard and to url.Parse")
	}
	u.Host = d.hostOf
	if d.port != defaultPort(d.scheme) {
		u.Host += ":" + strconv.Itoa(d.port)
	}
	u.Fragment, u.RawFragment = "", ""
	if n := len(u.String()); n > MaxURLBytes {
		// Bytes that are not ASCII are sent escaped, three times as long.
		return nil, refuse("longer than %d bytes once escaped (%d)", MaxURLBytes, n)
	}
	return u, nil
}

// matches reports whether the entry matches the host name, or ip for an IP
// literal (name is then "").
func (e *entry) matches(name string, ip netip.Addr) bool {
	switch {
	case e.ip.IsValid() || ip.IsValid():
		return e.ip == ip
	case e.wild:
		return len(name) > len(e.name) && strings.HasSuffix(name, e.name) && name[len(name)-len(e.name)-1] == '.'
	default:
		return name == e.name
	}
}

// splitScheme splits raw at the ':' that ends its scheme (RFC 3986: a
// letter, then letters, digits, '+', '-' and '.'); ok is false when raw has
// no scheme.
func splitScheme(raw string) (scheme, rest string, ok bool) {
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.':
			if i == 0 {
				return "", raw, false
			}
		case c == ':' && i > 0:
			return raw[:i], raw[i+1:], true
		default:
			return "", raw, false
		}
	}
	return "", raw, false
}

// defaultPort is the port of a URL of scheme that names none.
func defaultPort(scheme string) int {
	if scheme == "http" {
		return 80
	}
	return 443
}

// shorten cuts a piece of a refused URL to a length fit for an error.
func shorten(s string) string {
	const maxShown = 64
	if len(s) > maxShown {
		return s[:maxShown] + "..."
	}
	return s
}

// refuse returns an error wrapping ErrRefused with the reason.
func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}
