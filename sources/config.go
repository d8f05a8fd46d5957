package sources

import (
	"net"
	"regexp"
	"time"

	"github.com/shaper-dev/shaper/internal/check"
	"github.com/shaper-dev/shaper/internal/kafkaconn"
)

// InProcessKafka is the config of a Kafka source reading topic as group
// from brokers that run in this process (the demo's and the bench's
// kfake). Its group timings make a group form in about a second instead of
// the production defaults' tens; they are safe only with no network
// between the consumer and the broker to be slow.
func InProcessKafka(brokers []string, topic, group string) *KafkaConfig {
	return &KafkaConfig{
		Config:            kafkaconn.Config{Brokers: brokers},
		Topic:             topic,
		Group:             group,
		SessionTimeout:    6 * time.Second,
		HeartbeatInterval: 100 * time.Millisecond,
		RebalanceTimeout:  2 * time.Second,
		MaxWait:           200 * time.Millisecond,
	}
}

// KafkaConfig configures a Kafka consumer-group source (source.kafka).
type KafkaConfig struct {
	kafkaconn.Config `yaml:",inline"`
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
	// DeadLetters reads dead-letter records written by shaper (a
	// dead_letter topic or subject) as the messages they were: each goes
	// out with the id it was first sent with (Idempotency-Key), without
	// the Shaper-* headers, and a dead letter of it counts its attempts on
	// (see AsDeadLetter). A record written without its payload is passed
	// over, and logged. Only the pipeline's own dead letters are read:
	// one whose Shaper-Pipeline is another pipeline's name, or missing,
	// is passed over (skipped, other_pipeline), and logged. Default false.
	DeadLetters bool `yaml:"dead_letters"`
	// Pipeline is the name of the pipeline the source feeds, which
	// DeadLetters requires; the config sets it, not the file.
	Pipeline string `yaml:"-"`
}

// Values of KafkaConfig.Start.
const (
	StartEarliest = "earliest"
	StartLatest   = "latest"
)

// Defaults of KafkaConfig and NATSConfig.
const (
	DefaultCommitInterval    = time.Second
	DefaultSessionTimeout    = 30 * time.Second
	DefaultHeartbeatInterval = 3 * time.Second
	DefaultRebalanceTimeout  = 30 * time.Second
	DefaultKafkaMaxWait      = 500 * time.Millisecond
	DefaultAckWait           = 30 * time.Second
)

// SetDefaults fills every field left out with its default.
func (k *KafkaConfig) SetDefaults() {
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
	k.Config.SetDefaults()
}

// Validate reports every problem of a defaulted k at key path path.
func (k *KafkaConfig) Validate(path string) error {
	var ps check.Problems
	ps.Also(k.Config.Validate(path))
	ps.Also(kafkaconn.ValidateTopic(path+".topic", k.Topic))
	if k.Group == "" {
		ps.Add(path+".group", "required")
	}
	if k.Start != StartEarliest && k.Start != StartLatest {
		ps.Add(path+".start", "want earliest or latest, got %q", k.Start)
	}
	ps.Positive(path+".commit_interval", k.CommitInterval)
	ps.Positive(path+".session_timeout", k.SessionTimeout)
	ps.Positive(path+".rebalance_timeout", k.RebalanceTimeout)
	ps.Positive(path+".max_wait", k.MaxWait)
	if k.HeartbeatInterval <= 0 || k.HeartbeatInterval >= k.SessionTimeout {
		ps.Add(path+".heartbeat_interval", "must be > 0 and below session_timeout (%s), got %s", k.SessionTimeout, k.HeartbeatInterval)
	}
	return ps.Err()
}

// NATSConfig configures a NATS source (source.nats): JetStream with a
// stream, core NATS without.
type NATSConfig struct {
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
	// DeadLetters reads dead-letter records written by shaper (a
	// dead_letter topic or subject) as the messages they were: each goes
	// out with the id it was first sent with (Idempotency-Key), without
	// the Shaper-* headers, and a dead letter of it counts its attempts on
	// (see AsDeadLetter). A record written without its payload is passed
	// over, and logged. Only the pipeline's own dead letters are read:
	// one whose Shaper-Pipeline is another pipeline's name, or missing,
	// is passed over (skipped, other_pipeline), and logged. Default false.
	DeadLetters bool `yaml:"dead_letters"`
	// Pipeline is the name of the pipeline the source feeds, which
	// DeadLetters requires; the config sets it, not the file.
	Pipeline string `yaml:"-"`
	// WrapConn, when set, wraps each connection to the NATS server (the
	// conn knob of internal/tuning). The program sets it, not the file.
	WrapConn func(net.Conn) net.Conn `yaml:"-"`
}

// SetDefaults fills every field left out with its default, for the
// pipeline called pipeline.
func (n *NATSConfig) SetDefaults(pipeline string) {
	n.Pipeline = pipeline
	if n.Durable == "" && n.Stream != "" {
		n.Durable = "shaper-" + pipeline
	}
	if n.AckWait == 0 {
		n.AckWait = DefaultAckWait
	}
}

var natsToken = regexp.MustCompile(`^[^\s.*>]+$`)

// Validate reports every problem of a defaulted n at key path path.
func (n *NATSConfig) Validate(path string) error {
	var ps check.Problems
	ps.NATSURL(path+".url", n.URL)
	ps.NATSSubject(path+".subject", n.Subject, true)
	if n.Stream != "" && !natsToken.MatchString(n.Stream) {
		ps.Add(path+".stream", "must not contain whitespace, '.', '*' or '>', got %q", n.Stream)
	}
	if n.Stream != "" && !natsToken.MatchString(n.Durable) {
		ps.Add(path+".durable", "must not contain whitespace, '.', '*' or '>', got %q", n.Durable)
	}
	if n.Stream == "" && n.Durable != "" {
		ps.Add(path+".durable", "needs stream: core NATS has no durable consumers")
	}
	if n.AckWait < time.Second {
		ps.Add(path+".ack_wait", "must be >= 1s, got %s", n.AckWait)
	}
	return ps.Err()
}
