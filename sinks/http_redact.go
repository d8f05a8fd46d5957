// This file keeps credentials out of what the HTTP sink reports: the
// configured secrets and the URL's credentials are blanked out of a response
// body quoted in a StatusError, which is made printable single-line text,
// and errors never repeat the URL.

package sinks

import (
	"bytes"
	"errors"
	"io"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	// minRedacted is the shortest credential blanked out of a quoted
	// response body; shorter strings would blank out ordinary words.
	minRedacted = 8
	// minURLSecret is the shortest URL path segment taken for a token.
	minURLSecret = 16
	// redacted replaces a credential in a quoted response body.
	redacted = "[redacted]"
)

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

// addURLSecrets adds the credentials the sink's URL may carry: its user
// information, long path segments (webhook URLs carry tokens there) as
// written and unescaped, and the query values.
func (h *httpSink) addURLSecrets(u *url.URL) {
	h.addSecrets(u.User.Username())
	if pw, ok := u.User.Password(); ok {
		h.addSecrets(pw)
	}
	for _, seg := range strings.Split(u.EscapedPath(), "/") {
		if len(seg) >= minURLSecret {
			h.addSecrets(seg)
			if un, err := url.PathUnescape(seg); err == nil {
				h.addSecrets(un)
			}
		}
	}
	for _, vs := range u.Query() {
		h.addSecrets(vs...)
	}
}

// quoteBody returns the start of a non-2xx response body for
// StatusError.Body: at most maxErrorBody bytes, the secrets and the
// request's signature sig ("" for none) blanked out, made printable by
// excerpt. It reads past maxErrorBody by the longest secret, so that one
// starting within the excerpt is blanked out whole.
func (h *httpSink) quoteBody(body io.Reader, sig string) string {
	secrets := h.secrets
	if sig != "" {
		secrets = append(signatureSecrets(sig), secrets...)
	}
	buf := make([]byte, maxErrorBody+max(h.longestSecret, len(sig)))
	n, _ := io.ReadFull(body, buf) // a short or failed read keeps what came
	return excerpt(redact(buf[:n], maxErrorBody, secrets))
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
