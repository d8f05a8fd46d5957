// Package kafkaconntest makes a throwaway certificate authority for tests of
// TLS to Kafka: a CA, a server certificate and a client certificate, written
// as PEM files the way an operator configures them, so a test exercises the
// same file loading as the daemon.
package kafkaconntest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a CA with one server and one client certificate, each in its own
// PEM file under a test's temporary directory.
type PKI struct {
	// CAFile holds the CA certificate; trust it to accept both certificates.
	CAFile string
	// ServerCertFile and ServerKeyFile are the server's certificate and key.
	ServerCertFile, ServerKeyFile string
	// ClientCertFile and ClientKeyFile are a client certificate (for mutual
	// TLS) and its key.
	ClientCertFile, ClientKeyFile string

	ca     *x509.CertPool
	server tls.Certificate
}

// NewPKI makes a new CA and certificates under t.TempDir(). The server
// certificate is valid for serverNames: an IP address becomes an IP SAN,
// anything else a DNS SAN. Every call makes an unrelated CA.
func NewPKI(t testing.TB, serverNames ...string) *PKI {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()

	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kafkaconntest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("kafkaconntest: CA certificate: %v", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatalf("kafkaconntest: parse CA certificate: %v", err)
	}

	p := &PKI{CAFile: filepath.Join(dir, "ca.pem"), ca: x509.NewCertPool()}
	p.ca.AddCert(caCert)
	writePEM(t, p.CAFile, "CERTIFICATE", caDER)

	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, names []string) (certFile, keyFile string, cert tls.Certificate) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		for _, n := range names {
			if ip := net.ParseIP(n); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, n)
			}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatalf("kafkaconntest: %s certificate: %v", cn, err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatalf("kafkaconntest: %s key: %v", cn, err)
		}
		certFile, keyFile = filepath.Join(dir, cn+".pem"), filepath.Join(dir, cn+"-key.pem")
		writePEM(t, certFile, "CERTIFICATE", der)
		writePEM(t, keyFile, "PRIVATE KEY", keyDER)
		return certFile, keyFile, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	p.ServerCertFile, p.ServerKeyFile, p.server = issue(2, "server", x509.ExtKeyUsageServerAuth, serverNames)
	p.ClientCertFile, p.ClientKeyFile, _ = issue(3, "client", x509.ExtKeyUsageClientAuth, nil)
	return p
}

// ServerConfig returns a listener's TLS config that presents the server
// certificate. With requireClientCert, it also demands a client certificate
// signed by the CA (mutual TLS).
func (p *PKI) ServerConfig(requireClientCert bool) *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{p.server}}
	if requireClientCert {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = p.ca
	}
	return c
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("kafkaconntest: generate key: %v", err)
	}
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("kafkaconntest: %v", err)
	}
}
