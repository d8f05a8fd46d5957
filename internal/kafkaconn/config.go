package kafkaconn

import (
	"fmt"
	"regexp"

	"github.com/shaper-dev/shaper/internal/check"
	"github.com/shaper-dev/shaper/internal/tlsconf"
)

// Config is how to reach a Kafka cluster: its brokers and security. The
// Kafka source and the Kafka publishers embed it.
type Config struct {
	// Brokers are host:port bootstrap addresses. Required.
	Brokers []string `yaml:"brokers"`
	// TLS, when present (even empty: tls: {}), encrypts connections; an
	// empty TLS uses the system's CAs.
	TLS *tlsconf.Config `yaml:"tls"`
	// SASL, when present, authenticates the connection.
	SASL *SASLConfig `yaml:"sasl"`
}

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

// SetDefaults fills what c leaves out.
func (c *Config) SetDefaults() { c.TLS.SetDefaults() }

// Validate reports every problem of c at key path path.
func (c Config) Validate(path string) error {
	var ps check.Problems
	if len(c.Brokers) == 0 {
		ps.Add(path+".brokers", "at least one host:port is required")
	}
	for i, b := range c.Brokers {
		ps.HostPort(fmt.Sprintf("%s.brokers[%d]", path, i), b)
	}
	ps.Also(c.TLS.Validate(path + ".tls"))
	if s := c.SASL; s != nil {
		switch s.Mechanism {
		case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		case "":
			ps.Add(path+".sasl.mechanism", "required: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		default:
			ps.Add(path+".sasl.mechanism", "want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got %q", s.Mechanism)
		}
		if s.Username == "" {
			ps.Add(path+".sasl.username", "required")
		}
		if s.Password == "" {
			ps.Add(path+".sasl.password", "required")
		}
	}
	return ps.Err()
}

var topicName = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// ValidateTopic reports a topic name Kafka would refuse, at key path path.
func ValidateTopic(path, topic string) error {
	var ps check.Problems
	switch {
	case topic == "":
		ps.Add(path, "required")
	case !topicName.MatchString(topic) || topic == "." || topic == "..":
		ps.Add(path, "want 1 to 249 letters, digits, '.', '_' or '-', got %q", topic)
	}
	return ps.Err()
}
