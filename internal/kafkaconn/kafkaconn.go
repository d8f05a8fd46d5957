// Package kafkaconn turns a Kafka connection config (brokers, TLS, SASL) into
// the kafka-go dialer and transport that the Kafka source and publishers
// use, so both sides secure their connections the same way. TLS comes from
// package tlsconf, shared with Redis and the HTTP sink.
//
// Errors name the files they could not use and never carry a SASL password,
// nor any part of one: they end up in logs and in /readyz.
package kafkaconn

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/shaper-dev/shaper/internal/tlsconf"
)

// dialTimeout bounds connecting to one broker, TLS handshake and SASL
// authentication included.
const dialTimeout = 10 * time.Second

// SASL returns the SASL mechanism of cfg, or nil when SASL is off.
//
// PLAIN sends the password as it is, so it belongs on a TLS connection.
// SCRAM never sends it; the mechanism prepares both credentials with SASLprep
// (RFC 4013) up front, so a password with characters SASLprep forbids is an
// error here rather than a failed login later.
func SASL(cfg *SASLConfig) (sasl.Mechanism, error) {
	if cfg == nil {
		return nil, nil
	}
	switch cfg.Mechanism {
	case SASLPlain:
		// The PLAIN message is authzid NUL username NUL password: a NUL in
		// either would shift the fields.
		if strings.ContainsRune(cfg.Username, 0) {
			return nil, fmt.Errorf("sasl: PLAIN username %q contains a NUL character", cfg.Username)
		}
		if strings.ContainsRune(cfg.Password, 0) {
			return nil, errors.New("sasl: PLAIN password contains a NUL character")
		}
		return plain.Mechanism{Username: cfg.Username, Password: cfg.Password}, nil
	case SASLScramSHA256:
		return scramMechanism(scram.SHA256, cfg.Username, cfg.Password)
	case SASLScramSHA512:
		return scramMechanism(scram.SHA512, cfg.Username, cfg.Password)
	}
	return nil, fmt.Errorf("sasl: unknown mechanism %q: want %s, %s or %s", cfg.Mechanism, SASLPlain, SASLScramSHA256, SASLScramSHA512)
}

// scramMechanism builds a SCRAM mechanism without ever returning the error of
// the SCRAM library as it is: that error quotes the password it could not
// prepare.
func scramMechanism(algo scram.Algorithm, username, password string) (sasl.Mechanism, error) {
	m, err := scram.Mechanism(algo, username, password)
	if err == nil {
		return m, nil
	}
	// Which credential was refused? Ask again with a password that always
	// prepares; the username's error may be shown, the password's may not.
	if _, uerr := scram.Mechanism(algo, username, "password"); uerr != nil {
		return nil, fmt.Errorf("sasl: %s username %q is refused by SASLprep (RFC 4013): it holds a prohibited or unassigned character", algo.Name(), username)
	}
	return nil, fmt.Errorf("sasl: %s password is refused by SASLprep (RFC 4013): it holds a prohibited or unassigned character", algo.Name())
}

// security returns the TLS config and SASL mechanism of cfg, either nil when
// it is off. It reports a TLS and a SASL problem together, so one look at the
// error shows everything wrong with the connection config.
func security(cfg Config) (*tls.Config, sasl.Mechanism, error) {
	t, tErr := tlsconf.Client(cfg.TLS)
	m, sErr := SASL(cfg.SASL)
	if err := errors.Join(tErr, sErr); err != nil {
		return nil, nil, err
	}
	return t, m, nil
}

// Dialer returns a dialer for cfg, for kafka.Reader and kafka.Conn.
func Dialer(cfg Config, clientID string) (*kafka.Dialer, error) {
	t, m, err := security(cfg)
	if err != nil {
		return nil, err
	}
	return &kafka.Dialer{
		ClientID:      clientID,
		Timeout:       dialTimeout,
		DualStack:     true,
		TLS:           t,
		SASLMechanism: m,
	}, nil
}

// Transport returns a transport for cfg, for kafka.Writer and kafka.Client.
// The caller owns it: CloseIdleConnections stops its background metadata
// refresh and closes its connections once they are idle.
func Transport(cfg Config, clientID string) (*kafka.Transport, error) {
	t, m, err := security(cfg)
	if err != nil {
		return nil, err
	}
	return &kafka.Transport{
		ClientID:    clientID,
		DialTimeout: dialTimeout,
		TLS:         t,
		SASL:        m,
	}, nil
}
