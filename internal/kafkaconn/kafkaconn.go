// Package kafkaconn turns a Kafka connection config (brokers, TLS, SASL) into
// the kafka-go dialer and transport that the Kafka source and publishers
// use, so both sides secure their connections the same way.
//
// Errors name the files they could not use and never carry a SASL password,
// nor any part of one: they end up in logs and in /readyz.
package kafkaconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/shaper-dev/shaper/shaper"
)

// dialTimeout bounds connecting to one broker, TLS handshake and SASL
// authentication included.
const dialTimeout = 10 * time.Second

// TLS returns the TLS config of cfg, or nil when TLS is off. An empty cfg
// trusts the system's CAs. Without ServerName, kafka-go checks each broker's
// certificate against the host it dials.
func TLS(cfg *shaper.TLSConfig) (*tls.Config, error) {
	if cfg == nil {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: ca_file %s: %w", cfg.CAFile, pathless(err))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: ca_file %s: no PEM certificate found", cfg.CAFile)
		}
		t.RootCAs = pool
	}
	switch {
	case cfg.CertFile == "" && cfg.KeyFile == "":
	case cfg.CertFile == "" || cfg.KeyFile == "":
		// tls.LoadX509KeyPair would report "open : no such file".
		return nil, fmt.Errorf("tls: cert_file %q and key_file %q go together: set both or neither", cfg.CertFile, cfg.KeyFile)
	default:
		cert, err := keyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, err
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}

// keyPair loads a client certificate and its key. It reads the files itself
// because tls.LoadX509KeyPair names neither file when one fails to parse.
func keyPair(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tls: cert_file %s: %w", certFile, pathless(err))
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tls: key_file %s: %w", keyFile, pathless(err))
	}
	// X509KeyPair's errors describe the problem ("failed to find any PEM
	// data in key input", "private key does not match public key"), never
	// the key itself.
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tls: cert_file %s, key_file %s: %w", certFile, keyFile, err)
	}
	return cert, nil
}

// pathless drops the path from an *os.PathError, which the caller names
// already: "open", "no such file or directory" is left.
func pathless(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}

// SASL returns the SASL mechanism of cfg, or nil when SASL is off.
//
// PLAIN sends the password as it is, so it belongs on a TLS connection.
// SCRAM never sends it; the mechanism prepares both credentials with SASLprep
// (RFC 4013) up front, so a password with characters SASLprep forbids is an
// error here rather than a failed login later.
func SASL(cfg *shaper.SASLConfig) (sasl.Mechanism, error) {
	if cfg == nil {
		return nil, nil
	}
	switch cfg.Mechanism {
	case shaper.SASLPlain:
		// The PLAIN message is authzid NUL username NUL password: a NUL in
		// either would shift the fields.
		if strings.ContainsRune(cfg.Username, 0) {
			return nil, fmt.Errorf("sasl: PLAIN username %q contains a NUL character", cfg.Username)
		}
		if strings.ContainsRune(cfg.Password, 0) {
			return nil, errors.New("sasl: PLAIN password contains a NUL character")
		}
		return plain.Mechanism{Username: cfg.Username, Password: cfg.Password}, nil
	case shaper.SASLScramSHA256:
		return scramMechanism(scram.SHA256, cfg.Username, cfg.Password)
	case shaper.SASLScramSHA512:
		return scramMechanism(scram.SHA512, cfg.Username, cfg.Password)
	}
	return nil, fmt.Errorf("sasl: unknown mechanism %q: want %s, %s or %s", cfg.Mechanism, shaper.SASLPlain, shaper.SASLScramSHA256, shaper.SASLScramSHA512)
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
// The caller owns it: CloseIdleConnections stops its background metadata
// refresh and closes its connections once they are idle.
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
