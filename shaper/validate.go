package shaper

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/shaper-dev/shaper/webhook"
)

// Defaults, in one place. Field comments in config.go repeat them.
const (
	DefaultAdminListen    = "127.0.0.1:9090"
	DefaultDrainTimeout   = 30 * time.Second
	DefaultCapacity       = 1000
	DefaultMaxQueueTime   = 5 * time.Second
	DefaultTimeout        = 2 * time.Second
	DefaultMaxInFlight    = 8
	DefaultMaxAttempts    = 5
	DefaultInitialBackoff = 200 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
	DefaultMaxElapsed     = 10 * time.Minute
	DefaultMaxBodyBytes   = 10 << 20
	DefaultAckWait        = 30 * time.Second
	DefaultCommitInterval = time.Second

	DefaultSessionTimeout    = 30 * time.Second
	DefaultHeartbeatInterval = 3 * time.Second
	DefaultRebalanceTimeout  = 30 * time.Second
	DefaultKafkaMaxWait      = 500 * time.Millisecond

	DefaultRedisTimeout = 50 * time.Millisecond

	DefaultTLSMinVersion = TLSVersion12
	// DefaultSigningScheme is signing.scheme's default: Standard Webhooks.
	DefaultSigningScheme = string(webhook.Standard)
	// DefaultSigningHeader is signing.header's default, with scheme shaper.
	DefaultSigningHeader = webhook.DefaultHeader
	// MinSigningSecret is the shortest signing key accepted, in bytes.
	MinSigningSecret = webhook.MinKeyBytes
	// MinAdminToken is the shortest admin.token accepted, in bytes.
	MinAdminToken = 16
)

// SetDefaults fills every field left out with its default. Load calls it
// before Validate; a program building a Config in code calls it too.
func (c *Config) SetDefaults() {
	if c.Admin.Listen == "" {
		c.Admin.Listen = DefaultAdminListen
	}
	if c.Shutdown.DrainTimeout == 0 {
		c.Shutdown.DrainTimeout = DefaultDrainTimeout
	}
	for i := range c.Pipelines {
		c.Pipelines[i].setDefaults()
	}
}

func (p *PipelineConfig) setDefaults() {
	if n := p.Source.NATS; n != nil {
		n.setDefaults(p.Name)
	}
	if k := p.Source.Kafka; k != nil {
		k.setDefaults()
	}
	p.Bucket.setDefaults()
	p.Rate.setDefaults(p.Name)
	if h := p.Sink.HTTP; h != nil {
		h.setDefaults()
	}
	if n := p.Sink.NATS; n != nil {
		n.DeliveryConfig.setDefaults()
	}
	if k := p.Sink.Kafka; k != nil {
		k.TLS.setDefaults()
		k.DeliveryConfig.setDefaults()
	}
	if dl := p.DeadLetter; dl != nil && dl.Kafka != nil {
		dl.Kafka.TLS.setDefaults()
	}
}

// setDefaults fills a NATS source of the pipeline called name.
func (n *NATSSourceConfig) setDefaults(name string) {
	if n.Durable == "" && n.Stream != "" {
		n.Durable = "shaper-" + name
	}
	if n.AckWait == 0 {
		n.AckWait = DefaultAckWait
	}
}

func (k *KafkaSourceConfig) setDefaults() {
	if k.Start == "" {
		k.Start = StartEarliest
	}
	for _, d := range []struct {
		field *time.Duration
		def   time.Duration
	}{
		{&k.CommitInterval, DefaultCommitInterval}, {&k.SessionTimeout, DefaultSessionTimeout},
		{&k.HeartbeatInterval, DefaultHeartbeatInterval}, {&k.RebalanceTimeout, DefaultRebalanceTimeout},
		{&k.MaxWait, DefaultKafkaMaxWait},
	} {
		if *d.field == 0 {
			*d.field = d.def
		}
	}
	k.TLS.setDefaults()
}

func (b *BucketConfig) setDefaults() {
	if b.Capacity == 0 {
		b.Capacity = DefaultCapacity
	}
	if b.MaxQueueTime == 0 {
		b.MaxQueueTime = DefaultMaxQueueTime
	}
	if b.OnExpire == "" {
		b.OnExpire = OnExpireDeadLetter
	}
}

// setDefaults fills the rate of the pipeline called name.
func (r *RateConfig) setDefaults(name string) {
	if r.Mode == "" {
		r.Mode = ModeLeaky
	}
	if sh := r.Shared; sh != nil {
		if sh.Key == "" {
			sh.Key = "shaper:" + name
		}
		if sh.Timeout == 0 {
			sh.Timeout = DefaultRedisTimeout
		}
		sh.Redis.TLS.setDefaults()
	}
	if r.Burst == nil {
		burst := 1
		if r.Mode == ModeToken && r.Limit > 1 {
			burst = int(math.Min(r.Limit, math.MaxInt32))
		}
		r.Burst = &burst
	}
}

func (h *HTTPSinkConfig) setDefaults() {
	if h.Method == "" {
		h.Method = "POST"
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
	h.TLS.setDefaults()
	h.DeliveryConfig.setDefaults()
}

// setDefaults fills a TLS config left partly out; nil (TLS off) stays nil.
func (t *TLSConfig) setDefaults() {
	if t != nil && t.MinVersion == "" {
		t.MinVersion = DefaultTLSMinVersion
	}
}

func (d *DeliveryConfig) setDefaults() {
	if d.Timeout == 0 {
		d.Timeout = DefaultTimeout
	}
	if d.MaxInFlight == 0 {
		d.MaxInFlight = DefaultMaxInFlight
	}
	r := &d.Retry
	if r.MaxAttempts == 0 {
		r.MaxAttempts = DefaultMaxAttempts
	}
	if r.InitialBackoff == 0 {
		r.InitialBackoff = DefaultInitialBackoff
	}
	if r.MaxBackoff == 0 {
		r.MaxBackoff = max(DefaultMaxBackoff, r.InitialBackoff)
	}
	if r.MaxElapsed == 0 {
		r.MaxElapsed = DefaultMaxElapsed
	}
}

// Delivery returns the dispatcher settings of whichever sink is configured.
func (s SinkConfig) Delivery() DeliveryConfig {
	switch {
	case s.HTTP != nil:
		return s.HTTP.DeliveryConfig
	case s.NATS != nil:
		return s.NATS.DeliveryConfig
	case s.Kafka != nil:
		return s.Kafka.DeliveryConfig
	}
	return DeliveryConfig{}
}

// problems collects validation errors, each with its key path.
type problems []error

func (ps *problems) add(path, format string, args ...any) {
	*ps = append(*ps, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

var (
	pipelineName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	headerName   = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	natsToken    = regexp.MustCompile(`^[^\s.*>]+$`)
)

// Validate reports every problem of a defaulted config at once, joined, each
// as "key.path: what is wrong".
func (c *Config) Validate() error {
	var ps problems
	if host, port, err := net.SplitHostPort(c.Admin.Listen); err != nil || port == "" {
		ps.add("admin.listen", "want host:port, got %q", c.Admin.Listen)
	} else if c.Admin.Token != "" && len(c.Admin.Token) < MinAdminToken {
		ps.add("admin.token", "must be at least %d bytes, got %d: a short token can be guessed", MinAdminToken, len(c.Admin.Token))
	} else if c.Admin.Token == "" && !IsLoopback(host) {
		where := fmt.Sprintf("admin.listen host %q is not a loopback address (127.0.0.0/8, ::1, localhost)", host)
		if ip, err := netip.ParseAddr(host); host == "" || err == nil && ip.IsUnspecified() {
			where = fmt.Sprintf("admin.listen %q listens on every interface", c.Admin.Listen)
		}
		ps.add("admin.token", "required: %s, and without a token anyone who reaches it can change the rate (PUT /v1/pipelines/{name}/rate); "+
			"set token: ${SHAPER_ADMIN_TOKEN}, or listen on 127.0.0.1", where)
	}
	if c.Shutdown.DrainTimeout < 0 {
		ps.add("shutdown.drain_timeout", "must be >= 0, got %s", c.Shutdown.DrainTimeout)
	}
	if len(c.Pipelines) == 0 {
		ps.add("pipelines", "at least one pipeline is required")
	}
	names := map[string]int{}
	for i := range c.Pipelines {
		p := &c.Pipelines[i]
		path := fmt.Sprintf("pipelines[%d]", i)
		if j, dup := names[p.Name]; dup && p.Name != "" {
			ps.add(path+".name", "%q is already the name of pipelines[%d]", p.Name, j)
		}
		names[p.Name] = i
		p.validate(path, &ps)
	}
	return errors.Join(ps...)
}

func (p *PipelineConfig) validate(path string, ps *problems) {
	switch {
	case p.Name == "":
		ps.add(path+".name", "required")
	case !pipelineName.MatchString(p.Name):
		ps.add(path+".name", "want letters, digits, '-', '_' or '.', got %q", p.Name)
	}

	p.Source.validate(path+".source", ps)
	p.Bucket.validate(path+".bucket", ps)
	p.Rate.validate(path+".rate", p.Bucket.MaxQueueTime, ps)
	p.Sink.validate(path+".sink", ps)
	if dl := p.DeadLetter; dl != nil {
		dl.validate(path+".dead_letter", ps)
	}
}

func (s SourceConfig) validate(path string, ps *problems) {
	if (s.Kafka == nil) == (s.NATS == nil) {
		ps.add(path, "exactly one of kafka or nats is required")
	}
	if s.Kafka != nil {
		s.Kafka.validate(path+".kafka", ps)
	}
	if s.NATS != nil {
		s.NATS.validate(path+".nats", ps)
	}
}

func (k *KafkaSourceConfig) validate(path string, ps *problems) {
	k.KafkaConnConfig.validate(path, ps)
	validateKafkaTopic(path+".topic", k.Topic, ps)
	if k.Group == "" {
		ps.add(path+".group", "required")
	}
	if k.Start != StartEarliest && k.Start != StartLatest {
		ps.add(path+".start", "want earliest or latest, got %q", k.Start)
	}
	for _, d := range []struct {
		key string
		d   time.Duration
	}{{"commit_interval", k.CommitInterval}, {"session_timeout", k.SessionTimeout}, {"rebalance_timeout", k.RebalanceTimeout}, {"max_wait", k.MaxWait}} {
		if d.d <= 0 {
			ps.add(path+"."+d.key, "must be > 0, got %s", d.d)
		}
	}
	if k.HeartbeatInterval <= 0 || k.HeartbeatInterval >= k.SessionTimeout {
		ps.add(path+".heartbeat_interval", "must be > 0 and below session_timeout (%s), got %s", k.SessionTimeout, k.HeartbeatInterval)
	}
}

func (n *NATSSourceConfig) validate(path string, ps *problems) {
	validateNATSURL(path+".url", n.URL, ps)
	if n.Subject == "" {
		ps.add(path+".subject", "required")
	} else if strings.ContainsAny(n.Subject, " \t\r\n") {
		ps.add(path+".subject", "must not contain whitespace, got %q", n.Subject)
	}
	if n.Stream != "" && !natsToken.MatchString(n.Stream) {
		ps.add(path+".stream", "must not contain whitespace, '.', '*' or '>', got %q", n.Stream)
	}
	if n.Stream != "" && !natsToken.MatchString(n.Durable) {
		ps.add(path+".durable", "must not contain whitespace, '.', '*' or '>', got %q", n.Durable)
	}
	if n.Stream == "" && n.Durable != "" {
		ps.add(path+".durable", "needs stream: core NATS has no durable consumers")
	}
	if n.AckWait < time.Second {
		ps.add(path+".ack_wait", "must be >= 1s, got %s", n.AckWait)
	}
}

func (b BucketConfig) validate(path string, ps *problems) {
	if b.Capacity < 1 {
		ps.add(path+".capacity", "must be >= 1, got %d", b.Capacity)
	}
	if b.MaxQueueTime <= 0 {
		ps.add(path+".max_queue_time", "must be > 0, got %s", b.MaxQueueTime)
	}
	switch b.OnExpire {
	case OnExpireDeadLetter, OnExpireDrop, OnExpireDeliver:
	default:
		ps.add(path+".on_expire", "want dead_letter, drop or deliver, got %q", b.OnExpire)
	}
}

// validate checks the rate against the bucket's max_queue_time.
func (r RateConfig) validate(path string, maxQueueTime time.Duration, ps *problems) {
	switch r.Mode {
	case ModeLeaky, ModeToken:
	default:
		ps.add(path+".mode", "want leaky or token, got %q", r.Mode)
	}
	validateRate(path, r.Mode, r.Limit, r.Burst, maxQueueTime, ps)
	if r.Warmup < 0 {
		ps.add(path+".warmup", "must be >= 0, got %s", r.Warmup)
	}
	if sh := r.Shared; sh != nil {
		sh.validate(path+".shared", r.Limit, ps)
	}
}

// validate checks a shared rate whose global limit is limit.
func (sh *SharedRateConfig) validate(path string, limit float64, ps *problems) {
	sh.Redis.validate(path+".redis", ps)
	if sh.Key == "" {
		ps.add(path+".key", "required")
	}
	if !(sh.FallbackLimit > 0) || math.IsInf(sh.FallbackLimit, 0) {
		ps.add(path+".fallback_limit", "must be > 0 (a replica never sends unlimited), got %v", sh.FallbackLimit)
	} else if sh.FallbackLimit > limit {
		ps.add(path+".fallback_limit", "must be <= rate.limit (%v), got %v", limit, sh.FallbackLimit)
	}
	if sh.Timeout <= 0 {
		ps.add(path+".timeout", "must be > 0, got %s", sh.Timeout)
	}
}

func (s SinkConfig) validate(path string, ps *problems) {
	sinks := 0
	if h := s.HTTP; h != nil {
		sinks++
		h.validate(path+".http", ps)
	}
	if n := s.NATS; n != nil {
		sinks++
		n.NATSPublisherConfig.validate(path+".nats", ps)
		n.DeliveryConfig.validate(path+".nats", ps)
	}
	if k := s.Kafka; k != nil {
		sinks++
		k.KafkaPublisherConfig.validate(path+".kafka", ps)
		k.DeliveryConfig.validate(path+".kafka", ps)
	}
	if sinks != 1 {
		ps.add(path, "exactly one of http, kafka or nats is required")
	}
}

func (h *HTTPSinkConfig) validate(path string, ps *problems) {
	// The URL is described, never echoed: webhook URLs carry tokens in
	// their user information, path or query.
	u, err := url.Parse(h.URL)
	switch {
	case h.URL == "":
		ps.add(path+".url", "required")
	case err != nil:
		ps.add(path+".url", "want an absolute http:// or https:// URL: %s", urlProblem(err))
	case u.Scheme == "":
		ps.add(path+".url", "want an absolute http:// or https:// URL, got one without a scheme")
	case u.Scheme != "http" && u.Scheme != "https":
		ps.add(path+".url", "want an absolute http:// or https:// URL, got scheme %s", shownScheme(u.Scheme))
	case u.Host == "":
		ps.add(path+".url", "want an absolute http:// or https:// URL, got one without a host")
	}
	if !headerName.MatchString(h.Method) {
		ps.add(path+".method", "want an HTTP method such as POST, got %q", h.Method)
	}
	h.validateHeaders(path, ps)
	if h.MaxBodyBytes < 0 {
		ps.add(path+".max_body_bytes", "must be >= 0, got %d", h.MaxBodyBytes)
	}
	if h.TLS != nil && err == nil && u.Scheme == "http" {
		ps.add(path+".tls", "needs an https:// url: a plain http:// request uses no TLS")
	}
	h.TLS.validate(path+".tls", ps)
	h.Signing.validate(path, *h, ps)
	validateProxy(path+".proxy", h.Proxy, ps)
	h.DeliveryConfig.validate(path, ps)
}

// validateHeaders checks the configured headers and the key header.
func (h *HTTPSinkConfig) validateHeaders(path string, ps *problems) {
	for name, value := range h.Headers {
		hp := join(path+".headers", name)
		if !headerName.MatchString(name) {
			ps.add(hp, "invalid header name")
		}
		if strings.ContainsAny(value, "\r\n\x00") {
			ps.add(hp, "value must not contain CR, LF or NUL")
		}
		if strings.EqualFold(name, "Idempotency-Key") {
			ps.add(hp, "is set by shaper to the message id")
		}
	}
	if h.KeyHeader != "" {
		_, configured := h.Headers[h.KeyHeader]
		switch {
		case !headerName.MatchString(h.KeyHeader):
			ps.add(path+".key_header", "invalid header name %q", h.KeyHeader)
		case strings.EqualFold(h.KeyHeader, "Idempotency-Key"):
			ps.add(path+".key_header", "Idempotency-Key is set by shaper to the message id")
		case configured:
			ps.add(path+".key_header", "%q is also set in headers: choose one", h.KeyHeader)
		}
	}
}

func (dl *DeadLetterConfig) validate(path string, ps *problems) {
	if (dl.NATS == nil) == (dl.Kafka == nil) {
		ps.add(path, "exactly one of kafka or nats is required (or leave dead_letter out)")
	}
	if dl.NATS != nil {
		dl.NATS.validate(path+".nats", ps)
	}
	if dl.Kafka != nil {
		dl.Kafka.validate(path+".kafka", ps)
	}
}

// MaxLimit is the highest rate.limit accepted, in requests per second: one
// request per microsecond, far above what one sink takes.
const MaxLimit = 1e6

// validateRate checks a rate's limit and burst (nil: left out) in mode,
// against the bucket's max_queue_time: the one set of rules for a config
// file and for a change through the admin API. path is where the rate is
// (pipelines[0].rate).
func validateRate(path, mode string, limit float64, burst *int, maxQueueTime time.Duration, ps *problems) {
	switch {
	case !(limit > 0) || math.IsInf(limit, 0):
		ps.add(path+".limit", "must be a number > 0, got %v", limit)
	case limit > MaxLimit:
		ps.add(path+".limit", "must be <= %g (one request per microsecond), got %v", MaxLimit, limit)
	case maxQueueTime > 0 && limit*maxQueueTime.Seconds() < 1:
		ps.add(path+".limit", "must be >= %g, got %v: at a lower rate not one message can leave within bucket.max_queue_time (%s), "+
			"so every message would expire; raise max_queue_time or the limit", 1/maxQueueTime.Seconds(), limit, maxQueueTime)
	}
	switch {
	case burst == nil:
	case *burst < 1:
		ps.add(path+".burst", "must be >= 1, got %d", *burst)
	case *burst > 1 && mode == ModeLeaky:
		ps.add(path+".burst", "leaky mode never bursts: leave burst out or use mode: token, got %d", *burst)
	}
}

// validate checks a signing config against the rest of its HTTP sink at
// key path sp; nil (no signing) is valid. The secret is never echoed.
func (s *SigningConfig) validate(sp string, h HTTPSinkConfig, ps *problems) {
	if s == nil {
		return
	}
	path := sp + ".signing"
	if s.Secret == "" {
		ps.add(path+".secret", "required: the HMAC key shared with the receiver, at least %d bytes (use ${VAR})", MinSigningSecret)
	} else if _, err := webhook.Key(s.Secret); err != nil {
		// webhook.Key's errors say what is wrong, never what the secret is.
		ps.add(path+".secret", "%s", strings.TrimPrefix(err.Error(), "webhook: secret: "))
	}
	switch webhook.Scheme(s.Scheme) {
	case webhook.Standard:
		if s.Header != "" {
			ps.add(path+".header", "only with scheme: shaper; the standard scheme's headers are fixed: webhook-id, webhook-timestamp and webhook-signature")
		}
		// The fixed headers must stay free for the signature.
		fixed := []string{webhook.IDHeader, webhook.TimestampHeader, webhook.SignatureHeader}
		for name := range h.Headers {
			for _, f := range fixed {
				if strings.EqualFold(name, f) {
					ps.add(join(sp+".headers", name), "is set by signing (scheme standard)")
				}
			}
		}
		for _, f := range fixed {
			if strings.EqualFold(h.KeyHeader, f) {
				ps.add(sp+".key_header", "%q is set by signing (scheme standard): choose another", h.KeyHeader)
			}
		}
	case webhook.Shaper:
		switch {
		case !headerName.MatchString(s.Header):
			ps.add(path+".header", "invalid header name %q", s.Header)
		case strings.EqualFold(s.Header, "Idempotency-Key"):
			ps.add(path+".header", "Idempotency-Key is set by shaper to the message id")
		case strings.EqualFold(s.Header, h.KeyHeader):
			ps.add(path+".header", "%q is also the key_header: choose another", s.Header)
		default:
			for name := range h.Headers {
				if strings.EqualFold(name, s.Header) {
					ps.add(path+".header", "%q is also set in headers: choose one", s.Header)
				}
			}
		}
	default:
		ps.add(path+".scheme", "want %s or %s, got %q", webhook.Standard, webhook.Shaper, s.Scheme)
	}
}

// validateProxy checks sink.http.proxy: empty, "environment", or the URL
// of a proxy net/http can use. The URL is described, never echoed: it may
// carry the proxy's password.
func validateProxy(path, proxy string, ps *problems) {
	if proxy == "" || proxy == ProxyEnvironment {
		return
	}
	const want = "want %q or a proxy URL such as http://proxy.example:3128 (scheme http, https, socks5 or socks5h)"
	u, err := url.Parse(proxy)
	switch {
	case err != nil:
		ps.add(path, want+": %s", ProxyEnvironment, urlProblem(err))
	case u.Scheme == "":
		ps.add(path, want+", got one without a scheme", ProxyEnvironment)
	case u.Opaque != "": // host:port, read as scheme:opaque
		ps.add(path, want+", got one without // after the scheme (host:port alone? write http://host:port)", ProxyEnvironment)
	case u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "socks5" && u.Scheme != "socks5h":
		ps.add(path, want+", got scheme %s", ProxyEnvironment, shownScheme(u.Scheme))
	case u.Hostname() == "":
		ps.add(path, want+", got one without a host", ProxyEnvironment)
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		ps.add(path, want+", got one with a path, query or fragment, which a proxy URL does not use", ProxyEnvironment)
	}
}

func (r RedisConfig) validate(path string, ps *problems) {
	switch {
	case r.Addr == "" && len(r.Addrs) == 0:
		ps.add(path, "exactly one of addr or addrs is required")
	case r.Addr != "" && len(r.Addrs) > 0:
		ps.add(path, "exactly one of addr or addrs is allowed, got both")
	}
	if r.Addr != "" {
		validateHostPort(path+".addr", r.Addr, ps)
	}
	for i, a := range r.Addrs {
		validateHostPort(fmt.Sprintf("%s.addrs[%d]", path, i), a, ps)
	}
	if r.MasterName != "" && len(r.Addrs) == 0 {
		ps.add(path+".master_name", "needs addrs: the Sentinel addresses")
	}
	if r.DB < 0 {
		ps.add(path+".db", "must be >= 0, got %d", r.DB)
	} else if r.DB != 0 && len(r.Addrs) > 0 && r.MasterName == "" {
		ps.add(path+".db", "must be 0 with a Cluster (addrs without master_name), got %d", r.DB)
	}
	r.TLS.validate(path+".tls", ps)
}

// validate checks a TLS config; nil (TLS off) is valid.
func (t *TLSConfig) validate(path string, ps *problems) {
	if t == nil {
		return
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		ps.add(path, "cert_file and key_file go together: set both or neither")
	}
	switch t.MinVersion {
	case "", TLSVersion12, TLSVersion13:
	default:
		ps.add(path+".min_version", "want %q or %q, got %q", TLSVersion12, TLSVersion13, t.MinVersion)
	}
	for _, f := range []struct{ key, file string }{{"ca_file", t.CAFile}, {"cert_file", t.CertFile}, {"key_file", t.KeyFile}} {
		if f.file == "" {
			continue
		}
		if _, err := os.Stat(f.file); err != nil {
			ps.add(path+"."+f.key, "cannot read %q: %v", f.file, errors.Unwrap(err))
		}
	}
}

func validateHostPort(path, addr string, ps *problems) {
	if strings.Contains(addr, "@") || strings.Contains(addr, "://") {
		// redis://:password@host:6379 is a common slip; echoing it would
		// print the password.
		ps.add(path, "want host:port, got a URL or user information (not shown): credentials go in their own keys")
		return
	}
	if host, port, err := net.SplitHostPort(addr); err != nil || host == "" || port == "" {
		ps.add(path, "want host:port, got %q", addr)
	}
}

func (k KafkaPublisherConfig) validate(path string, ps *problems) {
	k.KafkaConnConfig.validate(path, ps)
	validateKafkaTopic(path+".topic", k.Topic, ps)
}

var kafkaTopic = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

func validateKafkaTopic(path, topic string, ps *problems) {
	switch {
	case topic == "":
		ps.add(path, "required")
	case !kafkaTopic.MatchString(topic) || topic == "." || topic == "..":
		ps.add(path, "want 1 to 249 letters, digits, '.', '_' or '-', got %q", topic)
	}
}

func (k KafkaConnConfig) validate(path string, ps *problems) {
	if len(k.Brokers) == 0 {
		ps.add(path+".brokers", "at least one host:port is required")
	}
	for i, b := range k.Brokers {
		validateHostPort(fmt.Sprintf("%s.brokers[%d]", path, i), b, ps)
	}
	k.TLS.validate(path+".tls", ps)
	if s := k.SASL; s != nil {
		switch s.Mechanism {
		case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		case "":
			ps.add(path+".sasl.mechanism", "required: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		default:
			ps.add(path+".sasl.mechanism", "want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got %q", s.Mechanism)
		}
		if s.Username == "" {
			ps.add(path+".sasl.username", "required")
		}
		if s.Password == "" {
			ps.add(path+".sasl.password", "required")
		}
	}
}

func (d DeliveryConfig) validate(path string, ps *problems) {
	if d.Timeout <= 0 {
		ps.add(path+".timeout", "must be > 0, got %s", d.Timeout)
	}
	if d.MaxInFlight < 1 {
		ps.add(path+".max_in_flight", "must be >= 1, got %d", d.MaxInFlight)
	}
	r, rp := d.Retry, path+".retry"
	if r.MaxAttempts < 1 {
		ps.add(rp+".max_attempts", "must be >= 1, got %d", r.MaxAttempts)
	}
	if r.InitialBackoff <= 0 {
		ps.add(rp+".initial_backoff", "must be > 0, got %s", r.InitialBackoff)
	}
	if r.MaxBackoff < r.InitialBackoff {
		ps.add(rp+".max_backoff", "must be >= initial_backoff (%s), got %s", r.InitialBackoff, r.MaxBackoff)
	}
	if r.MaxElapsed <= 0 {
		ps.add(rp+".max_elapsed", "must be > 0, got %s", r.MaxElapsed)
	}
}

func (n NATSPublisherConfig) validate(path string, ps *problems) {
	validateNATSURL(path+".url", n.URL, ps)
	if n.Subject == "" {
		ps.add(path+".subject", "required")
	} else if strings.ContainsAny(n.Subject, " \t\r\n*>") {
		ps.add(path+".subject", "must be a literal subject (no whitespace or wildcards), got %q", n.Subject)
	}
}

func validateNATSURL(path, raw string, ps *problems) {
	if raw == "" {
		ps.add(path, "required")
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
			ps.add(path, "want nats://host:port%s: %s", which, urlProblem(err))
			continue
		case u.Host == "":
			ps.add(path, "want nats://host:port%s, got one without a host", which)
			continue
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			ps.add(path, "want scheme nats, tls, ws or wss%s, got %s", which, shownScheme(u.Scheme))
		}
	}
}

// urlProblem says why url.Parse refused a URL without quoting the URL: the
// *url.Error is left out, and so is a cause that quotes a piece of it (an
// invalid port or escape), which may be a piece of a password.
func urlProblem(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if msg := err.Error(); !strings.ContainsAny(msg, "\"'`") {
		return msg
	}
	return "it does not parse as a URL (the offending part is not shown: it may be a credential)"
}

// shownScheme quotes a URL scheme for an error, unless it is long enough to
// be the start of a credential mistaken for a URL.
func shownScheme(scheme string) string {
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
