// Package kafkaconn turns a Kafka connection config (brokers, TLS, SASL) into
// the kafka-go dialer and transport that the Kafka source and publishers
// use, so both sides secure their connections the same way.
package kafkaconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/shaper-dev/shaper/shaper"
)

// dialTimeout bounds connecting to one broker.
const dialTimeout = 10 * time.Second

// TLS returns the TLS config of cfg, or nil when TLS is off.
func TLS(cfg *shaper.TLSConfig) (*tls.Config, error) {
	if cfg == nil {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: ca_file %s: no PEM certificates found", cfg.CAFile)
		}
		t.RootCAs = pool
	}
	if cfg.CertFile != "" || cfg.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: client certificate: %w", err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}

// SASL returns the SASL mechanism of cfg, or nil when SASL is off.
func SASL(cfg *shaper.SASLConfig) (sasl.Mechanism, error) {
	if cfg == nil {
		return nil, nil
	}
	switch cfg.Mechanism {
	case shaper.SASLPlain:
		return plain.Mechanism{Username: cfg.Username, Password: cfg.Password}, nil
	case shaper.SASLScramSHA256:
		m, err := scram.Mechanism(scram.SHA256, cfg.Username, cfg.Password)
		if err != nil {
			return nil, fmt.Errorf("sasl: %w", err)
		}
		return m, nil
	case shaper.SASLScramSHA512:
		m, err := scram.Mechanism(scram.SHA512, cfg.Username, cfg.Password)
		if err != nil {
			return nil, fmt.Errorf("sasl: %w", err)
		}
		return m, nil
	}
	return nil, fmt.Errorf("sasl: unknown mechanism %q", cfg.Mechanism)
}

// Dialer returns a dialer for cfg, for kafka.Reader and kafka.Conn.
func Dialer(cfg shaper.KafkaConnConfig, clientID string) (*kafka.Dialer, error) {
	t, tErr := TLS(cfg.TLS)
	m, sErr := SASL(cfg.SASL)
	if err := errors.Join(tErr, sErr); err != nil {
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
func Transport(cfg shaper.KafkaConnConfig, clientID string) (*kafka.Transport, error) {
	t, tErr := TLS(cfg.TLS)
	m, sErr := SASL(cfg.SASL)
	if err := errors.Join(tErr, sErr); err != nil {
		return nil, err
	}
	return &kafka.Transport{
		ClientID:    clientID,
		DialTimeout: dialTimeout,
		TLS:         t,
		SASL:        m,
	}, nil
}
