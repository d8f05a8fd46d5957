// Package webhook signs the requests of shaper's HTTP sink (sink.http.signing)
// and verifies them at the receiver. It is the one implementation of both
// sides: the sink signs with it, and a receiver written in Go verifies with
// it. It imports only the standard library, so a receiver pulls in neither
// Kafka, NATS nor Prometheus.
//
// # Schemes
//
// [Standard] (signing.scheme: standard, the default) is Standard Webhooks
// 1.0 (https://www.standardwebhooks.com/), which any Standard Webhooks library
// verifies:
//
//	webhook-id: psp.callbacks/3/1234
//	webhook-timestamp: 1767225600
//	webhook-signature: v1,<base64 of HMAC-SHA256(key, "<webhook-id>.<webhook-timestamp>.<body>")>
//
// The id is the message id, the same value as the Idempotency-Key header;
// the timestamp is the time of the attempt in Unix seconds; the body is the
// request body exactly as sent; base64 is the standard alphabet with padding.
//
// [Shaper] (signing.scheme: shaper) carries everything in one header, by
// default Shaper-Signature, and takes the id from Idempotency-Key:
//
//	Shaper-Signature: t=1767225600,v2=<hex of HMAC-SHA256(key, "<t>\n<id>\n<body>")>
//
// t is the attempt's time in Unix seconds, id the value of the
// Idempotency-Key header ("" when the request has none), "\n" a line feed
// (0x0A) and hex lower case. The id cannot hold a line feed (it is a header
// value), so where it ends and the body begins is fixed: with a '.' there,
// an id holding a '.' (a Kafka topic name does) could trade bytes with the
// body under the same signature. The tag is v2 because version 1 signed
// only "<t>.<body>"; a verifier of version 1 finds no v1 entry and refuses.
//
// # Keys
//
// A secret of the form "whsec_<base64>" (the Standard Webhooks
// serialization) is base64-decoded (standard alphabet, with padding): the
// decoded bytes are the HMAC key. Any other secret is used as it is: its
// bytes are the key. Either way the key must be at least [MinKeyBytes]
// long. Standard Webhooks libraries take the "whsec_" form, or the raw key
// through their raw-key option; see [Key].
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Scheme is a signature format.
type Scheme string

// The schemes; see the package documentation for their formats.
const (
	// Standard is Standard Webhooks 1.0: headers webhook-id,
	// webhook-timestamp and webhook-signature.
	Standard Scheme = "standard"
	// Shaper is one header (DefaultHeader unless configured) carrying
	// t=<unix seconds>,v2=<hex HMAC>, with the id in Idempotency-Key.
	Shaper Scheme = "shaper"
)

// Header names, in canonical form. HTTP header names are case-insensitive:
// Standard Webhooks writes them in lower case, which is the same header.
const (
	// IDHeader carries the message id in the Standard scheme.
	IDHeader = "Webhook-Id"
	// TimestampHeader carries the attempt's Unix seconds in the Standard scheme.
	TimestampHeader = "Webhook-Timestamp"
	// SignatureHeader carries "v1,<base64>" in the Standard scheme.
	SignatureHeader = "Webhook-Signature"
	// IdempotencyKeyHeader carries the message id in the Shaper scheme.
	IdempotencyKeyHeader = "Idempotency-Key"
	// DefaultHeader carries the signature in the Shaper scheme unless
	// Config.Header names another.
	DefaultHeader = "Shaper-Signature"
)

const (
	// SecretPrefix marks a secret given as base64 of the key.
	SecretPrefix = "whsec_"
	// MinKeyBytes is the shortest key accepted. Standard Webhooks asks for
	// at least 24 random bytes; 32 (openssl rand -base64 32) is a good choice.
	MinKeyBytes = 16
	// DefaultTolerance is how far a signature's timestamp may be from the
	// receiver's clock, either way, when Verify is given no tolerance. It is
	// the Standard Webhooks libraries' tolerance.
	DefaultTolerance = 5 * time.Minute
)

// Errors of Verify, matched with errors.Is.
var (
	// ErrBadSignature: a header is missing or malformed, or no signature
	// in it matches the id, timestamp and body under the key. The request
	// did not come from a sender holding the key, or was altered on the way.
	ErrBadSignature = errors.New("webhook: signature does not match")
	// ErrStaleSignature: the signature matches, but its timestamp is
	// further from now than the tolerance: a replay, or a clock far off.
	ErrStaleSignature = errors.New("webhook: signature timestamp outside the tolerance")
)

// Config is what sender and receiver agree on.
type Config struct {
	// Scheme is Standard or Shaper. Default ("") Standard.
	Scheme Scheme
	// Secret gives the HMAC key: "whsec_<base64>" or the raw key; see Key.
	// Required.
	Secret string
	// Header names the header that carries the signature. Shaper scheme
	// only; default ("") DefaultHeader. Must be "" with Standard, whose
	// headers are fixed.
	Header string
}

// Signer signs requests, and verifies them, under one Config. Each
// signature covers the message id, the timestamp and the body, so two
// messages with the same body sent in the same second get different
// signatures, and a captured request does not verify under another id.
//
// Signer is safe for concurrent use by multiple goroutines.
type Signer struct {
	scheme Scheme
	header string // canonical name of the Shaper scheme's header
	key    []byte
}

// New returns a Signer for cfg, or an error that never shows the secret.
func New(cfg Config) (*Signer, error) {
	s := &Signer{scheme: cfg.Scheme}
	switch s.scheme {
	case "", Standard:
		s.scheme = Standard
		if cfg.Header != "" {
			return nil, fmt.Errorf("webhook: header %q: only the shaper scheme takes a header name; the standard scheme's are %s, %s and %s", cfg.Header, IDHeader, TimestampHeader, SignatureHeader)
		}
	case Shaper:
		s.header = DefaultHeader
		if cfg.Header != "" {
			if !validToken(cfg.Header) {
				return nil, fmt.Errorf("webhook: invalid header name %q", cfg.Header)
			}
			s.header = http.CanonicalHeaderKey(cfg.Header)
		}
		if s.header == IdempotencyKeyHeader {
			return nil, fmt.Errorf("webhook: header %q carries the id in the shaper scheme, not the signature", cfg.Header)
		}
	default:
		return nil, fmt.Errorf("webhook: unknown scheme %q, want %q or %q", cfg.Scheme, Standard, Shaper)
	}
	key, err := Key(cfg.Secret)
	if err != nil {
		return nil, err
	}
	s.key = key
	return s, nil
}

// Key returns the HMAC key a secret stands for: the base64-decoded bytes of
// "whsec_<base64>" (standard alphabet, with padding, as Standard Webhooks
// serializes a key), or the bytes of any other secret as they are. The key
// must be at least MinKeyBytes long. Errors never show the secret.
//
// A Standard Webhooks library given the same "whsec_" secret computes the
// same key. Given a secret without the prefix, most libraries would
// base64-decode it as well, so hand them the key itself instead (Go:
// NewWebhookRaw([]byte(secret)); JavaScript: new Webhook(secret, {format:
// "raw"}); Python: Webhook(secret.encode())), or "whsec_" followed by the
// base64 of the secret.
func Key(secret string) ([]byte, error) {
	if b64, ok := strings.CutPrefix(secret, SecretPrefix); ok {
		key, err := base64.StdEncoding.Strict().DecodeString(b64)
		if err != nil {
			// The position in err would point into the secret.
			return nil, errors.New("webhook: secret: what follows whsec_ is not standard base64 with padding")
		}
		if len(key) < MinKeyBytes {
			return nil, fmt.Errorf("webhook: secret: whsec_ key must be at least %d bytes once decoded, got %d", MinKeyBytes, len(key))
		}
		return key, nil
	}
	if secret == "" {
		return nil, errors.New("webhook: secret: required")
	}
	if len(secret) < MinKeyBytes {
		return nil, fmt.Errorf("webhook: secret: must be at least %d bytes, got %d", MinKeyBytes, len(secret))
	}
	return []byte(secret), nil
}

// Scheme returns the scheme s signs with.
func (s *Signer) Scheme() Scheme { return s.scheme }

// Headers returns the canonical names of the headers Sign sets, besides
// Idempotency-Key: webhook-id, webhook-timestamp and webhook-signature, or
// the Shaper scheme's one header.
func (s *Signer) Headers() []string {
	if s.scheme == Standard {
		return []string{IDHeader, TimestampHeader, SignatureHeader}
	}
	return []string{s.header}
}

// SignatureHeader returns the canonical name of the header that carries
// the signature itself: webhook-signature, or the Shaper scheme's header.
func (s *Signer) SignatureHeader() string {
	if s.scheme == Standard {
		return SignatureHeader
	}
	return s.header
}

// Sign sets in h the headers that sign a request with message id id, sent
// at t with body body: for Standard, webhook-id, webhook-timestamp and
// webhook-signature; for Shaper, its signature header and Idempotency-Key
// (the verifier reads the id there; an empty id is signed as "" and sent as
// no Idempotency-Key). Values already in h under those names are replaced.
//
// It fails when id is not a valid header value (a control character), or
// is empty with Standard, whose receivers require webhook-id.
func (s *Signer) Sign(h http.Header, id string, t time.Time, body []byte) error {
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < ' ' || c == 0x7f {
			return fmt.Errorf("webhook: message id %q has a control character", id)
		}
	}
	ts := strconv.FormatInt(t.Unix(), 10)
	if s.scheme == Standard {
		if id == "" {
			return errors.New("webhook: the standard scheme needs a message id for webhook-id")
		}
		h.Set(IDHeader, id)
		h.Set(TimestampHeader, ts)
		h.Set(SignatureHeader, "v1,"+base64.StdEncoding.EncodeToString(s.mac(id, ts, body)))
		return nil
	}
	if id != "" {
		h.Set(IdempotencyKeyHeader, id)
	} else {
		h.Del(IdempotencyKeyHeader)
	}
	h.Set(s.header, "t="+ts+",v2="+hex.EncodeToString(s.mac(id, ts, body)))
	return nil
}

// mac returns the HMAC-SHA256 under s.key of what the scheme signs.
func (s *Signer) mac(id, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	if s.scheme == Standard {
		m.Write([]byte(id + "." + ts + "."))
	} else {
		m.Write([]byte(ts + "\n" + id + "\n"))
	}
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks the signature of a request received with headers h and
// raw body body (as read, before any JSON decoding), at time now. It
// returns nil when a signature in h is the HMAC of the request's id,
// timestamp and body under the key and the timestamp is within tolerance of
// now, either way (tolerance <= 0 means DefaultTolerance); an error
// wrapping ErrBadSignature when a header is missing or malformed or
// nothing matches; and one wrapping ErrStaleSignature when the signature
// matches but the timestamp is too far from now.
//
// Signatures are compared in constant time. Several signatures may be
// present (a key rotation), any may match; entries of other versions are
// ignored, so the format can grow. Inside the tolerance, drop duplicates by
// the id (webhook-id, or Idempotency-Key): shaper's own retries share it,
// and a replayed request cannot change it without breaking the signature.
func (s *Signer) Verify(h http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	var (
		id, ts string
		sigs   [][]byte
	)
	if s.scheme == Standard {
		id, ts = h.Get(IDHeader), h.Get(TimestampHeader)
		header := h.Get(SignatureHeader)
		if id == "" || ts == "" || header == "" {
			return fmt.Errorf("%w: want headers %s, %s and %s", ErrBadSignature, IDHeader, TimestampHeader, SignatureHeader)
		}
		for _, entry := range strings.Split(header, " ") {
			version, sig, ok := strings.Cut(entry, ",")
			if !ok || version != "v1" {
				continue
			}
			if b, err := base64.StdEncoding.DecodeString(sig); err == nil && len(b) == sha256.Size {
				sigs = append(sigs, b)
			}
		}
	} else {
		id = h.Get(IdempotencyKeyHeader)
		header := h.Get(s.header)
		if header == "" {
			return fmt.Errorf("%w: no %s header", ErrBadSignature, s.header)
		}
		for _, part := range strings.Split(header, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
			switch {
			case !ok:
				return fmt.Errorf("%w: malformed entry in %s", ErrBadSignature, s.header)
			case k == "t" && ts != "":
				return fmt.Errorf("%w: two timestamps in %s", ErrBadSignature, s.header)
			case k == "t":
				ts = v
			case k == "v2":
				if b, err := hex.DecodeString(v); err == nil && len(b) == sha256.Size {
					sigs = append(sigs, b)
				}
			}
		}
	}
	if !isDigits(ts) || len(ts) > 18 { // 18 digits always fit an int64
		return fmt.Errorf("%w: timestamp is not unix seconds", ErrBadSignature)
	}
	if len(sigs) == 0 {
		return fmt.Errorf("%w: no signature of this scheme's version (%s)", ErrBadSignature, s.version())
	}
	want := s.mac(id, ts, body)
	match := 0
	for _, sig := range sigs {
		match |= subtle.ConstantTimeCompare(sig, want)
	}
	if match != 1 {
		return ErrBadSignature
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	secs, _ := strconv.ParseInt(ts, 10, 64)
	if age := now.Sub(time.Unix(secs, 0)); age > tolerance || age < -tolerance {
		return fmt.Errorf("%w: signed %s from now, tolerance %s", ErrStaleSignature, age.Round(time.Second), tolerance)
	}
	return nil
}

func (s *Signer) version() string {
	if s.scheme == Standard {
		return "v1"
	}
	return "v2"
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// validToken reports whether s is an RFC 9110 token, as header names must be.
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
