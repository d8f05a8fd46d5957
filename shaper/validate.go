package shaper

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"
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
		if n.Durable == "" && n.Stream != "" {
			n.Durable = "shaper-" + p.Name
		}
		if n.AckWait == 0 {
			n.AckWait = DefaultAckWait
		}
	}
	if k := p.Source.Kafka; k != nil {
		if k.Start == "" {
			k.Start = StartEarliest
		}
		if k.CommitInterval == 0 {
			k.CommitInterval = DefaultCommitInterval
		}
		if k.SessionTimeout == 0 {
			k.SessionTimeout = DefaultSessionTimeout
		}
		if k.HeartbeatInterval == 0 {
			k.HeartbeatInterval = DefaultHeartbeatInterval
		}
		if k.RebalanceTimeout == 0 {
			k.RebalanceTimeout = DefaultRebalanceTimeout
		}
		if k.MaxWait == 0 {
			k.MaxWait = DefaultKafkaMaxWait
		}
	}
	if p.Bucket.Capacity == 0 {
		p.Bucket.Capacity = DefaultCapacity
	}
	if p.Bucket.MaxQueueTime == 0 {
		p.Bucket.MaxQueueTime = DefaultMaxQueueTime
	}
	if p.Bucket.OnExpire == "" {
		p.Bucket.OnExpire = OnExpireDeadLetter
	}
	if p.Rate.Mode == "" {
		p.Rate.Mode = ModeLeaky
	}
	if sh := p.Rate.Shared; sh != nil {
		if sh.Key == "" {
			sh.Key = "shaper:" + p.Name
		}
		if sh.Timeout == 0 {
			sh.Timeout = DefaultRedisTimeout
		}
	}
	if p.Rate.Burst == nil {
		burst := 1
		if p.Rate.Mode == ModeToken && p.Rate.Limit > 1 {
			burst = int(math.Min(p.Rate.Limit, math.MaxInt32))
		}
		p.Rate.Burst = &burst
	}
	if h := p.Sink.HTTP; h != nil {
		if h.Method == "" {
			h.Method = "POST"
		}
		if h.MaxBodyBytes == 0 {
			h.MaxBodyBytes = DefaultMaxBodyBytes
		}
		h.DeliveryConfig.setDefaults()
	}
	if n := p.Sink.NATS; n != nil {
		n.DeliveryConfig.setDefaults()
	}
	if k := p.Sink.Kafka; k != nil {
		k.DeliveryConfig.setDefaults()
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
	if _, port, err := net.SplitHostPort(c.Admin.Listen); err != nil || port == "" {
		ps.add("admin.listen", "want host:port, got %q", c.Admin.Listen)
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

	if k := p.Source.Kafka; k != nil {
		sp := path + ".source.kafka"
		k.KafkaConnConfig.validate(sp, ps)
		validateKafkaTopic(sp+".topic", k.Topic, ps)
		if k.Group == "" {
			ps.add(sp+".group", "required")
		}
		if k.Start != StartEarliest && k.Start != StartLatest {
			ps.add(sp+".start", "want earliest or latest, got %q", k.Start)
		}
		if k.CommitInterval <= 0 {
			ps.add(sp+".commit_interval", "must be > 0, got %s", k.CommitInterval)
		}
		if k.SessionTimeout <= 0 {
			ps.add(sp+".session_timeout", "must be > 0, got %s", k.SessionTimeout)
		}
		if k.HeartbeatInterval <= 0 || k.HeartbeatInterval >= k.SessionTimeout {
			ps.add(sp+".heartbeat_interval", "must be > 0 and below session_timeout (%s), got %s", k.SessionTimeout, k.HeartbeatInterval)
		}
		if k.RebalanceTimeout <= 0 {
			ps.add(sp+".rebalance_timeout", "must be > 0, got %s", k.RebalanceTimeout)
		}
		if k.MaxWait <= 0 {
			ps.add(sp+".max_wait", "must be > 0, got %s", k.MaxWait)
		}
	}
	if (p.Source.Kafka == nil) == (p.Source.NATS == nil) {
		ps.add(path+".source", "exactly one of kafka or nats is required")
	}
	if n := p.Source.NATS; n != nil {
		sp := path + ".source.nats"
		validateNATSURL(sp+".url", n.URL, ps)
		if n.Subject == "" {
			ps.add(sp+".subject", "required")
		} else if strings.ContainsAny(n.Subject, " \t\r\n") {
			ps.add(sp+".subject", "must not contain whitespace, got %q", n.Subject)
		}
		if n.Stream != "" && !natsToken.MatchString(n.Stream) {
			ps.add(sp+".stream", "must not contain whitespace, '.', '*' or '>', got %q", n.Stream)
		}
		if n.Stream != "" && !natsToken.MatchString(n.Durable) {
			ps.add(sp+".durable", "must not contain whitespace, '.', '*' or '>', got %q", n.Durable)
		}
		if n.Stream == "" && n.Durable != "" {
			ps.add(sp+".durable", "needs stream: core NATS has no durable consumers")
		}
		if n.AckWait < time.Second {
			ps.add(sp+".ack_wait", "must be >= 1s, got %s", n.AckWait)
		}
	}

	b := p.Bucket
	if b.Capacity < 1 {
		ps.add(path+".bucket.capacity", "must be >= 1, got %d", b.Capacity)
	}
	if b.MaxQueueTime <= 0 {
		ps.add(path+".bucket.max_queue_time", "must be > 0, got %s", b.MaxQueueTime)
	}
	switch b.OnExpire {
	case OnExpireDeadLetter, OnExpireDrop, OnExpireDeliver:
	default:
		ps.add(path+".bucket.on_expire", "want dead_letter, drop or deliver, got %q", b.OnExpire)
	}

	r := p.Rate
	switch r.Mode {
	case ModeLeaky, ModeToken:
	default:
		ps.add(path+".rate.mode", "want leaky or token, got %q", r.Mode)
	}
	if !(r.Limit > 0) || math.IsInf(r.Limit, 0) {
		ps.add(path+".rate.limit", "must be > 0, got %v", r.Limit)
	}
	if r.Burst != nil && *r.Burst < 1 {
		ps.add(path+".rate.burst", "must be >= 1, got %d", *r.Burst)
	} else if r.Burst != nil && *r.Burst > 1 && r.Mode == ModeLeaky {
		ps.add(path+".rate.burst", "leaky mode never bursts: leave burst out or use mode: token, got %d", *r.Burst)
	}
	if r.Warmup < 0 {
		ps.add(path+".rate.warmup", "must be >= 0, got %s", r.Warmup)
	}
	if sh := r.Shared; sh != nil {
		sp := path + ".rate.shared"
		sh.Redis.validate(sp+".redis", ps)
		if sh.Key == "" {
			ps.add(sp+".key", "required")
		}
		if !(sh.FallbackLimit > 0) || math.IsInf(sh.FallbackLimit, 0) {
			ps.add(sp+".fallback_limit", "must be > 0 (a replica never sends unlimited), got %v", sh.FallbackLimit)
		} else if sh.FallbackLimit > r.Limit {
			ps.add(sp+".fallback_limit", "must be <= rate.limit (%v), got %v", r.Limit, sh.FallbackLimit)
		}
		if sh.Timeout <= 0 {
			ps.add(sp+".timeout", "must be > 0, got %s", sh.Timeout)
		}
	}

	sinks := 0
	if h := p.Sink.HTTP; h != nil {
		sinks++
		sp := path + ".sink.http"
		if u, err := url.Parse(h.URL); h.URL == "" {
			ps.add(sp+".url", "required")
		} else if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			ps.add(sp+".url", "want an absolute http:// or https:// URL, got %q", h.URL)
		}
		if !headerName.MatchString(h.Method) {
			ps.add(sp+".method", "want an HTTP method such as POST, got %q", h.Method)
		}
		for name, value := range h.Headers {
			if !headerName.MatchString(name) {
				ps.add(sp+".headers."+name, "invalid header name")
			}
			if strings.ContainsAny(value, "\r\n\x00") {
				ps.add(sp+".headers."+name, "value must not contain CR, LF or NUL")
			}
			if strings.EqualFold(name, "Idempotency-Key") {
				ps.add(sp+".headers."+name, "is set by shaper to the message id")
			}
		}
		if h.KeyHeader != "" {
			_, configured := h.Headers[h.KeyHeader]
			switch {
			case !headerName.MatchString(h.KeyHeader):
				ps.add(sp+".key_header", "invalid header name %q", h.KeyHeader)
			case strings.EqualFold(h.KeyHeader, "Idempotency-Key"):
				ps.add(sp+".key_header", "Idempotency-Key is set by shaper to the message id")
			case configured:
				ps.add(sp+".key_header", "%q is also set in headers: choose one", h.KeyHeader)
			}
		}
		if h.MaxBodyBytes < 0 {
			ps.add(sp+".max_body_bytes", "must be >= 0, got %d", h.MaxBodyBytes)
		}
		h.DeliveryConfig.validate(sp, ps)
	}
	if n := p.Sink.NATS; n != nil {
		sinks++
		n.NATSPublisherConfig.validate(path+".sink.nats", ps)
		n.DeliveryConfig.validate(path+".sink.nats", ps)
	}
	if k := p.Sink.Kafka; k != nil {
		sinks++
		k.KafkaPublisherConfig.validate(path+".sink.kafka", ps)
		k.DeliveryConfig.validate(path+".sink.kafka", ps)
	}
	if sinks != 1 {
		ps.add(path+".sink", "exactly one of http, kafka or nats is required")
	}

	if dl := p.DeadLetter; dl != nil {
		if (dl.NATS == nil) == (dl.Kafka == nil) {
			ps.add(path+".dead_letter", "exactly one of kafka or nats is required (or leave dead_letter out)")
		}
		if dl.NATS != nil {
			dl.NATS.validate(path+".dead_letter.nats", ps)
		}
		if dl.Kafka != nil {
			dl.Kafka.validate(path+".dead_letter.kafka", ps)
		}
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
	for _, part := range strings.Split(raw, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil || u.Host == "" {
			ps.add(path, "want nats://host:port, got %q", redactURL(part))
			continue
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			ps.add(path, "want scheme nats, tls, ws or wss, got %q", u.Scheme)
		}
	}
}

// redactURL hides a password in a URL before it goes into an error.
func redactURL(raw string) string {
	if u, err := url.Parse(strings.TrimSpace(raw)); err == nil {
		return u.Redacted()
	}
	return "(unparseable)"
}
