package shaper

import (
	"strings"
	"time"
)

// Config is the whole configuration file of a shaper daemon.
type Config struct {
	// Admin is the HTTP server for metrics, health and the pipelines API.
	Admin AdminConfig `yaml:"admin"`
	// Shutdown bounds the graceful drain.
	Shutdown ShutdownConfig `yaml:"shutdown"`
	// Pipelines run side by side, each from one source to one sink.
	Pipelines []PipelineConfig `yaml:"pipelines"`
}

// AdminConfig configures the admin HTTP server.
type AdminConfig struct {
	// Listen is the host:port of /metrics, /healthz, /readyz and /v1/pipelines.
	// Default 127.0.0.1:9090. An empty host listens on every interface.
	Listen string `yaml:"listen"`
	// Token, when set, must be sent as "Authorization: Bearer <token>" on
	// mutating calls (PUT). Reading endpoints stay open. Required when
	// Listen is not a loopback address (127.0.0.0/8, ::1, localhost): anyone
	// who can reach the port could otherwise change the rate. Use ${VAR}.
	Token string `yaml:"token"`
}

// ShutdownConfig configures the graceful drain on SIGTERM or SIGINT.
type ShutdownConfig struct {
	// DrainTimeout is how long the bucket keeps draining after the signal
	// before what remains is nacked. Default 30s.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
}

// PipelineConfig is one source, one bucket, one rate and one sink.
type PipelineConfig struct {
	// Name labels the pipeline's metrics and its admin API path. Required,
	// unique, letters, digits, '-', '_' and '.'.
	Name string `yaml:"name"`
	// Source is where messages come from: exactly one of its fields.
	Source SourceConfig `yaml:"source"`
	// Bucket bounds how many messages wait and for how long.
	Bucket BucketConfig `yaml:"bucket"`
	// Rate is how fast messages leave the bucket.
	Rate RateConfig `yaml:"rate"`
	// Sink is where messages go: exactly one of its fields.
	Sink SinkConfig `yaml:"sink"`
	// DeadLetter is where undeliverable messages go: exactly one of its
	// fields, or left out (then they are nacked for redelivery and logged).
	DeadLetter *DeadLetterConfig `yaml:"dead_letter"`
}

// SourceConfig selects the source of a pipeline.
type SourceConfig struct {
	// Kafka consumes a topic as a member of a consumer group.
	Kafka *KafkaSourceConfig `yaml:"kafka"`
	// NATS consumes a subject: JetStream when Stream is set, else core NATS.
	NATS *NATSSourceConfig `yaml:"nats"`
}

// Values of KafkaSourceConfig.Start.
const (
	StartEarliest = "earliest"
	StartLatest   = "latest"
)

// KafkaSourceConfig configures a Kafka consumer-group source.
type KafkaSourceConfig struct {
	KafkaConnConfig `yaml:",inline"`
	// Topic to consume. Required.
	Topic string `yaml:"topic"`
	// Group is the consumer group id. Required. Replicas with the same
	// group split the topic's partitions.
	Group string `yaml:"group"`
	// Start is where a group with no committed offset begins: earliest
	// (default) or latest.
	Start string `yaml:"start"`
	// CommitInterval is how often finished offsets are committed. Offsets
	// are also committed on drain and when a rebalance revokes partitions.
	// Default 1s.
	CommitInterval time.Duration `yaml:"commit_interval"`
	// SessionTimeout is how long the group coordinator waits for a
	// heartbeat before it gives this member's partitions to another.
	// Default 30s.
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// HeartbeatInterval is how often this member heartbeats; well below
	// SessionTimeout. Default 3s.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// RebalanceTimeout is how long a rebalance waits for members to rejoin.
	// Default 30s.
	RebalanceTimeout time.Duration `yaml:"rebalance_timeout"`
	// MaxWait is the longest one fetch waits at the broker for new records;
	// it also bounds how long closing the consumer takes. Default 500ms.
	MaxWait time.Duration `yaml:"max_wait"`
}

// KafkaConnConfig is how to reach a Kafka cluster: its brokers and security.
type KafkaConnConfig struct {
	// Brokers are host:port bootstrap addresses. Required.
	Brokers []string `yaml:"brokers"`
	// TLS, when present (even empty: tls: {}), encrypts connections; an
	// empty TLS uses the system's CAs.
	TLS *TLSConfig `yaml:"tls"`
	// SASL, when present, authenticates the connection.
	SASL *SASLConfig `yaml:"sasl"`
}

// TLSConfig configures TLS to a server: a Kafka broker, Redis or an HTTP
// sink. Certificates are always verified; there is no way to turn that off.
type TLSConfig struct {
	// CAFile is a PEM bundle of CAs to trust instead of the system's.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// mutual TLS. Both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName overrides the name checked in the server's certificate.
	ServerName string `yaml:"server_name"`
	// MinVersion is the oldest TLS version accepted: "1.2" (default) or
	// "1.3".
	MinVersion string `yaml:"min_version"`
}

// Values of TLSConfig.MinVersion.
const (
	TLSVersion12 = "1.2"
	TLSVersion13 = "1.3"
)

// SASL mechanisms of SASLConfig.Mechanism.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// SASLConfig configures SASL authentication. Use ${VAR} for the password.
type SASLConfig struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512. Required.
	Mechanism string `yaml:"mechanism"`
	// Username and Password are the credentials. Required.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
}

// KafkaPublisherConfig is a Kafka topic to publish to.
type KafkaPublisherConfig struct {
	KafkaConnConfig `yaml:",inline"`
	// Topic to publish to. Required. Writes wait for every in-sync replica
	// (acks=all).
	Topic string `yaml:"topic"`
}

// KafkaSinkConfig configures a Kafka publisher used as a sink (shaping one
// topic into another).
type KafkaSinkConfig struct {
	KafkaPublisherConfig `yaml:",inline"`
	DeliveryConfig       `yaml:",inline"`
}

// NATSSourceConfig configures a NATS source.
type NATSSourceConfig struct {
	// URL of the NATS server(s), comma-separated. Required.
	URL string `yaml:"url"`
	// Subject to consume; wildcards allowed. Required.
	Subject string `yaml:"subject"`
	// Stream, when set, makes the source a JetStream durable pull consumer
	// (at-least-once) on that existing stream. Left out: core NATS
	// (at-most-once; messages arriving while the bucket is full are dropped
	// and counted in shaper_source_dropped_total).
	Stream string `yaml:"stream"`
	// Durable is the JetStream consumer name. Default "shaper-<pipeline name>".
	Durable string `yaml:"durable"`
	// AckWait is the JetStream consumer's AckWait: how long the server waits
	// for an ack before redelivering. The source sends InProgress for every
	// message it holds well before that, so a queued message is never
	// redelivered while it waits. Default 30s.
	AckWait time.Duration `yaml:"ack_wait"`
}

// BucketConfig configures the bounded leaky bucket.
type BucketConfig struct {
	// Capacity is the most messages held at once (queued, waiting for a
	// retry, or in flight). When full, the source stops fetching. It is also
	// held to limit × max_queue_time. Default 1000.
	Capacity int `yaml:"capacity"`
	// MaxQueueTime is the longest a message may wait in the bucket before its
	// departure. Default 5s.
	MaxQueueTime time.Duration `yaml:"max_queue_time"`
	// OnExpire is what happens to a message that would wait longer:
	// dead_letter (default), drop (ack without delivery), or deliver (send late).
	OnExpire string `yaml:"on_expire"`
}

// Modes of RateConfig.Mode.
const (
	ModeLeaky = "leaky"
	ModeToken = "token"
)

// Values of BucketConfig.OnExpire.
const (
	OnExpireDeadLetter = "dead_letter"
	OnExpireDrop       = "drop"
	OnExpireDeliver    = "deliver"
)

// RateConfig configures the limiter.
type RateConfig struct {
	// Mode is leaky (default: requests exactly 1/limit apart, never a burst)
	// or token (up to Burst at once after idle time, average Limit).
	Mode string `yaml:"mode"`
	// Limit is requests per second to the sink, retries included. Required;
	// fractions allowed (0.5 is one request every two seconds).
	Limit float64 `yaml:"limit"`
	// Burst is how many requests token mode lets go at once, >= 1. Left out:
	// 1 in leaky mode, one second's worth (Limit, at least 1) in token mode.
	Burst *int `yaml:"burst"`
	// Warmup ramps the limit from Limit/3 to Limit over this time after
	// start. Default 0 (no ramp).
	Warmup time.Duration `yaml:"warmup"`
	// Shared, when set, makes Limit one global limit for every replica with
	// the same Shared.Key, kept in Redis.
	Shared *SharedRateConfig `yaml:"shared"`
}

// SharedRateConfig configures a global limit shared across replicas through
// Redis.
type SharedRateConfig struct {
	// Redis is where the shared limiter state lives.
	Redis RedisConfig `yaml:"redis"`
	// Key is the Redis key of the shared state; replicas with the same key
	// share one limit. Default "shaper:<pipeline name>".
	Key string `yaml:"key"`
	// FallbackLimit is this replica's own limit while Redis cannot be
	// reached (never unlimited). Required, > 0 and <= limit; set it to
	// limit / replicas to keep the total within the contract.
	FallbackLimit float64 `yaml:"fallback_limit"`
	// Timeout bounds each Redis call; past it the replica falls back.
	// Default 50ms.
	Timeout time.Duration `yaml:"timeout"`
}

// RedisConfig is how to reach Redis: one server, a Sentinel set, or a Cluster.
type RedisConfig struct {
	// Addr is host:port of a single Redis server. Exactly one of Addr and
	// Addrs is required.
	Addr string `yaml:"addr"`
	// Addrs are Sentinel addresses (with MasterName) or Cluster seed nodes
	// (without it).
	Addrs []string `yaml:"addrs"`
	// MasterName is the Sentinel master's name; it makes Addrs Sentinels.
	MasterName string `yaml:"master_name"`
	// Username and Password authenticate (Redis 6 ACL; Password alone for
	// requirepass). Use ${VAR} for the password.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// DB is the database number; 0 (the default) with a Cluster.
	DB int `yaml:"db"`
	// TLS, when present (even empty), encrypts the connection.
	TLS *TLSConfig `yaml:"tls"`
}

// SinkConfig selects the sink of a pipeline.
type SinkConfig struct {
	// HTTP sends each message as one HTTP request.
	HTTP *HTTPSinkConfig `yaml:"http"`
	// Kafka publishes each message to a topic (shaping into a topic).
	Kafka *KafkaSinkConfig `yaml:"kafka"`
	// NATS publishes each message to a subject (shaping into a subject).
	NATS *NATSSinkConfig `yaml:"nats"`
}

// DeliveryConfig is how the dispatcher treats a sink: concurrency, the
// per-attempt timeout and retries. Both sinks carry it.
type DeliveryConfig struct {
	// Timeout bounds each attempt. Default 2s.
	Timeout time.Duration `yaml:"timeout"`
	// MaxInFlight is the most attempts outstanding at once. Default 8.
	MaxInFlight int `yaml:"max_in_flight"`
	// Retry is the retry policy.
	Retry RetryConfig `yaml:"retry"`
}

// RetryConfig configures retries of retryable failures.
type RetryConfig struct {
	// MaxAttempts counts every attempt, the first included. Default 5.
	MaxAttempts int `yaml:"max_attempts"`
	// InitialBackoff is the upper bound of the first backoff (full jitter:
	// the wait is uniform in [0, bound]). Default 200ms.
	InitialBackoff time.Duration `yaml:"initial_backoff"`
	// MaxBackoff caps every backoff, and a Retry-After. Default 30s.
	MaxBackoff time.Duration `yaml:"max_backoff"`
	// MaxElapsed bounds a task from its first attempt to its last. Default 10m.
	MaxElapsed time.Duration `yaml:"max_elapsed"`
}

// HTTPSinkConfig configures the HTTP sink.
type HTTPSinkConfig struct {
	// URL receives every request. Required, http or https.
	URL string `yaml:"url"`
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
	TLS *TLSConfig `yaml:"tls"`
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

	DeliveryConfig `yaml:",inline"`
}

// ProxyEnvironment is the HTTPSinkConfig.Proxy value that takes the proxy
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

// NATSSinkConfig configures a NATS publisher used as a sink.
type NATSSinkConfig struct {
	NATSPublisherConfig `yaml:",inline"`
	DeliveryConfig      `yaml:",inline"`
}

// NATSPublisherConfig is a NATS subject to publish to.
type NATSPublisherConfig struct {
	// URL of the NATS server(s), comma-separated. Required.
	URL string `yaml:"url"`
	// Subject to publish to. Required. When a JetStream stream covers it, the
	// publish waits for the stream's ack, which makes it durable.
	Subject string `yaml:"subject"`
}

// DeadLetterConfig selects the dead-letter target.
type DeadLetterConfig struct {
	// Kafka publishes dead letters to a topic.
	Kafka *KafkaPublisherConfig `yaml:"kafka"`
	// NATS publishes dead letters to a subject.
	NATS *NATSPublisherConfig `yaml:"nats"`
}
