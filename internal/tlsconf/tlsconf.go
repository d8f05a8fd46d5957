// Package tlsconf turns a TLS config (CAs, a client certificate, a server
// name, the oldest version) into the *tls.Config of every client the daemon
// opens: to Kafka brokers, to Redis and to an HTTP sink, so all of them
// verify servers the same way.
//
// Certificates are always verified: there is no option to skip it. Errors
// name the files they could not use, once, and never quote their contents.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Client returns the client TLS config of cfg, or nil when TLS is off (cfg
// is nil). An empty cfg trusts the system's CAs and accepts TLS 1.2 or
// later. Without ServerName, the client checks the server's certificate
// against the host it dials.
func Client(cfg *Config) (*tls.Config, error) {
	if cfg == nil {
		return nil, nil
	}
	minVersion, err := Version(cfg.MinVersion)
	if err != nil {
		return nil, err
	}
	t := &tls.Config{MinVersion: minVersion, ServerName: cfg.ServerName}
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

// Version returns the crypto/tls constant of a min_version: "1.2" (also
// for "", the default) or "1.3".
func Version(v string) (uint16, error) {
	switch v {
	case "", Version12:
		return tls.VersionTLS12, nil
	case Version13:
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("tls: min_version: want %q or %q, got %q", Version12, Version13, v)
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
