package sinks

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/shaper-dev/shaper/internal/check"
	"github.com/shaper-dev/shaper/internal/kafkaconn"
	"github.com/shaper-dev/shaper/internal/tlsconf"
	"github.com/shaper-dev/shaper/internal/urlguard"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/webhook"
)

// HTTPConfig configures the HTTP sink (sink.http).
type HTTPConfig struct {
	// URL receives every request: http or https. Exactly one of URL and
	// URLFrom is required.
	URL string `yaml:"url"`
	// URLFrom takes each request's URL from its message instead:
	// header:NAME or json:a.b.c (a merchant's notify URL). Only a URL to a
	// host AllowedHosts matches is requested, only https unless an
	// http:// entry or AllowPrivate allows http, and only to a public
	// address unless AllowPrivate, checked again on the address actually
	// dialled; anything else is dead-lettered "rejected", never requested.
	URLFrom string `yaml:"url_from"`
	// AllowedHosts are the hosts URLFrom may name: a host name or IP,
	// "*.suffix" for any subdomain of suffix, with ":port" to allow only
	// that port and "http://" in front to allow plain http. Required with
	// URLFrom, and only with it.
	AllowedHosts []string `yaml:"allowed_hosts"`
	// AllowPrivate lets URLFrom reach loopback, private, link-local and
	// other non-public addresses, and plain http. Default false.
	AllowPrivate bool `yaml:"allow_private"`
	// MaxInFlightPerHost bounds the requests in flight, and the
	// connections kept, to one host. Default: MaxInFlight.
	MaxInFlightPerHost int `yaml:"max_in_flight_per_host"`
	// Method of every request. Default POST.
	Method string `yaml:"method"`
	// Headers are added to every request.
	Headers map[string]string `yaml:"headers"`
	// MaxBodyBytes: a larger payload is dead-lettered as malformed instead of
	// sent. Default 10485760 (10 MiB).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// ForwardHeaders sends the broker message's headers (Kafka record
	// headers, NATS headers) as HTTP headers of the same name. A header whose
	// name or value is not valid in HTTP is left out; Headers and
	// Idempotency-Key take precedence. Default false.
	ForwardHeaders bool `yaml:"forward_headers"`
	// KeyHeader, when set, names the HTTP header that carries the message key
	// (the Kafka record key). A key that is not a valid header value makes
	// the message malformed. Default: the key is not sent.
	KeyHeader string `yaml:"key_header"`
	// TLS, when present (even empty: tls: {}), configures the TLS of an
	// https:// URL: the CAs to trust, a client certificate for mutual TLS,
	// the server name and the oldest version. Left out: the system's CAs,
	// TLS 1.2 or later. Only with an https:// URL.
	TLS *tlsconf.Config `yaml:"tls"`
	// Signing, when set, signs every request with an HMAC of its message
	// id, timestamp and body, so the receiver can tell it came from this
	// daemon, unaltered, recent and meant for that id. Left out: requests
	// are not signed.
	Signing *SigningConfig `yaml:"signing"`
	// Proxy is the proxy every request goes through: "" (the default) for
	// none, whatever HTTP_PROXY or HTTPS_PROXY say; a URL with scheme http,
	// https, socks5 or socks5h (user information in it authenticates to
	// the proxy; use ${VAR}); or "environment" for what HTTPS_PROXY,
	// HTTP_PROXY and NO_PROXY say for the sink's URL, read when the sink is
	// built (at startup or on a reload). Loopback sinks never go through an
	// environment proxy. The proxy in force is logged at startup.
	Proxy string `yaml:"proxy"`
	// WrapConn, when set, wraps each connection the sink's own HTTP/1.1
	// client dials (the socket, below TLS): the conn knob of
	// internal/tuning. The program sets it, not the file.
	WrapConn func(net.Conn) net.Conn `yaml:"-"`

	shaper.DeliveryConfig `yaml:",inline"`
}

// ProxyEnvironment is the HTTPConfig.Proxy value that takes the proxy
// from the environment.
const ProxyEnvironment = "environment"

// SigningConfig configures the signature of HTTP sink requests, made with
// Secret on every attempt over the message id (Idempotency-Key), the
// attempt's time and the body. The formats are in package webhook, whose
// Signer also verifies them at the receiver.
type SigningConfig struct {
	// Scheme is the signature format: "standard" (the default), Standard
	// Webhooks 1.0: headers webhook-id, webhook-timestamp and
	// webhook-signature: v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">;
	// or "shaper": one header (Header) carrying
	// t=<unix seconds>,v2=<hex HMAC-SHA256 of "<t>\n<id>\n<body>">.
	Scheme string `yaml:"scheme"`
	// Secret gives the HMAC key shared with the receiver: "whsec_<base64>"
	// is base64-decoded (the Standard Webhooks form); any other value is
	// the key as it is. The key is at least 16 bytes. Required. Use ${VAR}:
	// it is never printed.
	Secret string `yaml:"secret"`
	// Header is the name of the header that carries the signature, with
	// scheme shaper only (the standard headers are fixed). Default
	// Shaper-Signature.
	Header string `yaml:"header"`
}

// Defaults of HTTPConfig.
const (
	DefaultMethod       = "POST"
	DefaultMaxBodyBytes = 10 << 20
	// DefaultSigningScheme is signing.scheme's default: Standard Webhooks.
	DefaultSigningScheme = string(webhook.Standard)
	// DefaultSigningHeader is signing.header's default, with scheme shaper.
	DefaultSigningHeader = webhook.DefaultHeader
)

// SetDefaults fills every field left out with its default.
func (h *HTTPConfig) SetDefaults() {
	if h.Method == "" {
		h.Method = DefaultMethod
	}
	if h.MaxBodyBytes == 0 {
		h.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if s := h.Signing; s != nil {
		if s.Scheme == "" {
			s.Scheme = DefaultSigningScheme
		}
		// The standard scheme's headers are fixed: a header there is
		// an error, not a default.
		if s.Scheme == string(webhook.Shaper) && s.Header == "" {
			s.Header = DefaultSigningHeader
		}
	}
	h.TLS.SetDefaults()
	h.DeliveryConfig.SetDefaults()
	if h.MaxInFlightPerHost == 0 {
		h.MaxInFlightPerHost = h.MaxInFlight
	}
}

// Validate reports every problem of a defaulted h at key path path. It is
// the one set of rules: NewHTTP and Reconfigure apply it too.
func (h *HTTPConfig) Validate(path string) error {
	var ps check.Problems
	// The URL is described, never echoed: webhook URLs carry tokens in
	// their user information, path or query.
	u, err := url.Parse(h.URL)
	switch {
	case h.URL == "" && h.URLFrom == "":
		ps.Add(path+".url", "required (or url_from)")
	case h.URL != "" && h.URLFrom != "":
		ps.Add(path+".url", "give url or url_from, not both")
	case h.URL == "":
		u = &url.URL{Scheme: "https"} // per message; only what TLS needs to know
		h.validateURLFrom(path, &ps)
	case err != nil:
		ps.Add(path+".url", "want an absolute http:// or https:// URL: %s", check.URLProblem(err))
	case u.Scheme == "":
		ps.Add(path+".url", "want an absolute http:// or https:// URL, got one without a scheme")
	case u.Scheme != "http" && u.Scheme != "https":
		ps.Add(path+".url", "want an absolute http:// or https:// URL, got scheme %s", check.ShownScheme(u.Scheme))
	case u.Host == "":
		ps.Add(path+".url", "want an absolute http:// or https:// URL, got one without a host")
	}
	if !validToken(h.Method) {
		ps.Add(path+".method", "want an HTTP method such as POST, got %q", h.Method)
	}
	h.validateHeaders(path, &ps)
	if h.MaxBodyBytes < 0 {
		ps.Add(path+".max_body_bytes", "must be >= 0, got %d", h.MaxBodyBytes)
	}
	if h.URLFrom == "" && (len(h.AllowedHosts) > 0 || h.AllowPrivate) {
		ps.Add(path+".allowed_hosts", "and allow_private go with url_from only")
	}
	if h.MaxInFlightPerHost < 0 || h.MaxInFlightPerHost > h.MaxInFlight {
		ps.Add(path+".max_in_flight_per_host", "must be >= 1 and <= max_in_flight (%d), got %d", h.MaxInFlight, h.MaxInFlightPerHost)
	}
	if h.TLS != nil && err == nil && u.Scheme == "http" {
		ps.Add(path+".tls", "needs an https:// url: a plain http:// request uses no TLS")
	}
	ps.Also(h.TLS.Validate(path + ".tls"))
	h.Signing.validate(path, *h, &ps)
	validateProxy(path+".proxy", h.Proxy, &ps)
	ps.Also(h.DeliveryConfig.Validate(path))
	return ps.Err()
}

// validateURLFrom checks url_from and what goes with it.
func (h *HTTPConfig) validateURLFrom(path string, ps *check.Problems) {
	if !shaper.ValidField(h.URLFrom) {
		ps.Add(path+".url_from", "want header:NAME or json:a.b.c (a dot path), got %q", h.URLFrom)
	}
	if len(h.AllowedHosts) == 0 {
		ps.Add(path+".allowed_hosts", "required with url_from: the hosts a message may name")
	} else if _, err := urlguard.New(h.AllowedHosts, h.AllowPrivate); err != nil {
		for _, e := range check.Flatten(err) {
			var ee *urlguard.EntryError
			if errors.As(e, &ee) {
				if ee.Entry == "" {
					ps.Add(fmt.Sprintf("%s.allowed_hosts[%d]", path, ee.Index), "%s", ee.Reason)
				} else {
					ps.Add(fmt.Sprintf("%s.allowed_hosts[%d]", path, ee.Index), "%q: %s", ee.Entry, ee.Reason)
				}
				continue
			}
			ps.Add(path+".allowed_hosts", "%v", e)
		}
	}
	if h.Proxy != "" {
		ps.Add(path+".proxy", "is not supported with url_from: the check of the address dialled would see the proxy's")
	}
}

// validateHeaders checks the configured headers and the key header.
func (h *HTTPConfig) validateHeaders(path string, ps *check.Problems) {
	for name, value := range h.Headers {
		hp := check.Join(path+".headers", name)
		if !validToken(name) {
			ps.Add(hp, "invalid header name")
		}
		if !validHeaderValue(value, true) {
			ps.Add(hp, "value must not contain control characters (CR, LF, NUL...)")
		}
		if strings.EqualFold(name, "Idempotency-Key") {
			ps.Add(hp, "is set by shaper to the message id")
		}
	}
	if h.KeyHeader != "" {
		configured := false
		for name := range h.Headers {
			configured = configured || strings.EqualFold(name, h.KeyHeader)
		}
		switch problem := settableHeader(h.KeyHeader); {
		case problem != "":
			ps.Add(path+".key_header", "%s", problem)
		case configured:
			ps.Add(path+".key_header", "%q is also set in headers: choose one", h.KeyHeader)
		}
	}
}

// settableHeader says why name cannot be a header the config makes the
// sink set on every message (key_header, signing.header), or "" when it
// can.
func settableHeader(name string) string {
	switch {
	case !validToken(name):
		return fmt.Sprintf("invalid header name %q", name)
	case strings.EqualFold(name, "Idempotency-Key"):
		return "Idempotency-Key is set by shaper to the message id"
	case unforwardable[http.CanonicalHeaderKey(name)]:
		return fmt.Sprintf("%q describes the connection or the request's framing, which net/http sets: choose another", name)
	}
	return ""
}

// validate checks a signing config against the rest of its HTTP sink at
// key path sp; nil (no signing) is valid. The secret is never echoed.
func (s *SigningConfig) validate(sp string, h HTTPConfig, ps *check.Problems) {
	if s == nil {
		return
	}
	path := sp + ".signing"
	if s.Secret == "" {
		ps.Add(path+".secret", "required: the HMAC key shared with the receiver, at least %d bytes (use ${VAR})", webhook.MinKeyBytes)
	} else if _, err := webhook.Key(s.Secret); err != nil {
		// webhook.Key's errors say what is wrong, never what the secret is.
		ps.Add(path+".secret", "%s", strings.TrimPrefix(err.Error(), "webhook: secret: "))
	}
	switch webhook.Scheme(s.Scheme) {
	case webhook.Standard:
		if s.Header != "" {
			ps.Add(path+".header", "only with scheme: shaper; the standard scheme's headers are fixed: webhook-id, webhook-timestamp and webhook-signature")
		}
		// The fixed headers must stay free for the signature.
		fixed := []string{webhook.IDHeader, webhook.TimestampHeader, webhook.SignatureHeader}
		for name := range h.Headers {
			for _, f := range fixed {
				if strings.EqualFold(name, f) {
					ps.Add(check.Join(sp+".headers", name), "is set by signing (scheme standard)")
				}
			}
		}
		for _, f := range fixed {
			if strings.EqualFold(h.KeyHeader, f) {
				ps.Add(sp+".key_header", "%q is set by signing (scheme standard): choose another", h.KeyHeader)
			}
		}
	case webhook.Shaper:
		switch problem := settableHeader(s.Header); {
		case problem != "":
			ps.Add(path+".header", "%s", problem)
		case strings.EqualFold(s.Header, h.KeyHeader):
			ps.Add(path+".header", "%q is also the key_header: choose another", s.Header)
		default:
			for name := range h.Headers {
				if strings.EqualFold(name, s.Header) {
					ps.Add(path+".header", "%q is also set in headers: choose one", s.Header)
				}
			}
		}
	default:
		ps.Add(path+".scheme", "want %s or %s, got %q", webhook.Standard, webhook.Shaper, s.Scheme)
	}
}

// validateProxy checks sink.http.proxy: empty, "environment", or the URL
// of a proxy net/http can use. The URL is described, never echoed: it may
// carry the proxy's password.
func validateProxy(path, proxy string, ps *check.Problems) {
	if proxy == "" || proxy == ProxyEnvironment {
		return
	}
	const want = "want %q or a proxy URL such as http://proxy.example:3128 (scheme http, https, socks5 or socks5h)"
	u, err := url.Parse(proxy)
	switch {
	case err != nil:
		ps.Add(path, want+": %s", ProxyEnvironment, check.URLProblem(err))
	case u.Scheme == "":
		ps.Add(path, want+", got one without a scheme", ProxyEnvironment)
	case u.Opaque != "": // host:port, read as scheme:opaque
		ps.Add(path, want+", got one without // after the scheme (host:port alone? write http://host:port)", ProxyEnvironment)
	case u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "socks5" && u.Scheme != "socks5h":
		ps.Add(path, want+", got scheme %s", ProxyEnvironment, check.ShownScheme(u.Scheme))
	case u.Hostname() == "":
		ps.Add(path, want+", got one without a host", ProxyEnvironment)
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		ps.Add(path, want+", got one with a path, query or fragment, which a proxy URL does not use", ProxyEnvironment)
	}
}

// SensitiveHeader reports whether an HTTP header of this name carries a
// credential: Authorization, Proxy-Authorization, Cookie, Set-Cookie, and any
// name containing auth, token, secret, key, passw, signature, credential,
// session or cookie, in any case. The values of such configured headers are
// kept out of errors, logs and dead letters: the HTTP sink blanks them out
// of a response body it quotes in an error.
func SensitiveHeader(name string) bool {
	name = strings.ToLower(name)
	for _, s := range sensitiveHeaderParts {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

var sensitiveHeaderParts = []string{"auth", "cookie", "token", "secret", "key", "passw", "signature", "credential", "session"}

// NATSPublisherConfig is a NATS subject to publish to: a sink's, or the
// dead-letter target's (dead_letter.nats).
type NATSPublisherConfig struct {
	// URL of the NATS server(s), comma-separated. Required.
	URL string `yaml:"url"`
	// Subject to publish to. Required. When a JetStream stream covers it, the
	// publish waits for the stream's ack, which makes it durable.
	Subject string `yaml:"subject"`
}

// Validate reports every problem of n at key path path.
func (n NATSPublisherConfig) Validate(path string) error {
	var ps check.Problems
	ps.NATSURL(path+".url", n.URL)
	ps.NATSSubject(path+".subject", n.Subject, false)
	return ps.Err()
}

// NATSConfig configures a NATS publisher used as a sink (sink.nats).
type NATSConfig struct {
	NATSPublisherConfig   `yaml:",inline"`
	shaper.DeliveryConfig `yaml:",inline"`
}

// SetDefaults fills every field left out with its default.
func (n *NATSConfig) SetDefaults() { n.DeliveryConfig.SetDefaults() }

// Validate reports every problem of a defaulted n at key path path.
func (n *NATSConfig) Validate(path string) error {
	return joinAll(n.NATSPublisherConfig.Validate(path), n.DeliveryConfig.Validate(path))
}

// KafkaPublisherConfig is a Kafka topic to publish to: a sink's, or the
// dead-letter target's (dead_letter.kafka).
type KafkaPublisherConfig struct {
	kafkaconn.Config `yaml:",inline"`
	// Topic to publish to. Required. Writes wait for every in-sync replica
	// (acks=all).
	Topic string `yaml:"topic"`
}

// SetDefaults fills every field left out with its default.
func (k *KafkaPublisherConfig) SetDefaults() { k.Config.SetDefaults() }

// Validate reports every problem of a defaulted k at key path path.
func (k *KafkaPublisherConfig) Validate(path string) error {
	return joinAll(k.Config.Validate(path), kafkaconn.ValidateTopic(path+".topic", k.Topic))
}

// KafkaConfig configures a Kafka publisher used as a sink (sink.kafka):
// shaping one topic into another.
type KafkaConfig struct {
	KafkaPublisherConfig  `yaml:",inline"`
	shaper.DeliveryConfig `yaml:",inline"`
}

// SetDefaults fills every field left out with its default.
func (k *KafkaConfig) SetDefaults() {
	k.KafkaPublisherConfig.SetDefaults()
	k.DeliveryConfig.SetDefaults()
}

// Validate reports every problem of a defaulted k at key path path.
func (k *KafkaConfig) Validate(path string) error {
	return joinAll(k.KafkaPublisherConfig.Validate(path), k.DeliveryConfig.Validate(path))
}

// joinAll joins Validate results into one list of problems.
func joinAll(errs ...error) error {
	var ps check.Problems
	for _, err := range errs {
		ps.Also(err)
	}
	return ps.Err()
}
