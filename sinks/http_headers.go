// This file holds the HTTP sink's header rules: the configured headers, the
// Basic authentication of the URL's user information, the key header it
// accepts, which broker headers may be forwarded (never the hop-by-hop,
// framing and reserved names), and which names and values are valid HTTP.

package sinks

import (
	"encoding/base64"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"
)

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

// setHeaders takes the configured headers into h.header, Host into
// h.host, and the values of sensitive ones into the secrets.
func (h *httpSink) setHeaders(headers map[string]string) {
	for name, value := range headers {
		if SensitiveHeader(name) {
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
}

// setBasicAuth sends the user information of the sink's URL u as Basic
// authentication, as http.Client would, unless an Authorization header is
// configured; the encoded value is a secret too.
func (h *httpSink) setBasicAuth(u *url.URL) {
	if u.User == nil || h.header.Get("Authorization") != "" {
		return
	}
	pw, _ := u.User.Password()
	token := base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + pw))
	h.header.Set("Authorization", "Basic "+token)
	h.addSecrets(token)
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
