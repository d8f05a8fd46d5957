package tlsconf

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/kafkaconn/kafkaconntest"
)

// handshake runs a TLS server with serverCfg on loopback and connects to it
// with clientCfg the way kafka-go does: with no ServerName set, the dialed
// host is the name checked. It returns the client's error, including a
// client certificate the server refused, which TLS 1.3 reports on the first
// read after the handshake.
func handshake(t *testing.T, serverCfg, clientCfg *tls.Config) error {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", serverCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if c.(*tls.Conn).Handshake() == nil {
			_, _ = c.Write([]byte("ok"))
		}
	}()
	defer func() { <-served }()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	host, _, _ := net.SplitHostPort(ln.Addr().String())
	if clientCfg.ServerName == "" {
		clientCfg = clientCfg.Clone()
		clientCfg.ServerName = host
	}
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := tls.Client(raw, clientCfg)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.HandshakeContext(ctx); err != nil {
		return err
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	return nil
}

func TestTLSIsOffWithoutConfig(t *testing.T) {
	got, err := Client(nil)
	if got != nil || err != nil {
		t.Errorf("Client(nil) = %v, %v; want nil, nil", got, err)
	}
}

func TestTLSEmptyConfigUsesSystemCAsAndTLS12(t *testing.T) {
	got, err := Client(&Config{})
	if err != nil {
		t.Fatalf("Client({}) = %v", err)
	}
	if got.RootCAs != nil || len(got.Certificates) != 0 || got.ServerName != "" || got.InsecureSkipVerify {
		t.Errorf("Client({}) = RootCAs %v, %d certificates, ServerName %q, InsecureSkipVerify %v; want the system's CAs, none, \"\", false",
			got.RootCAs, len(got.Certificates), got.ServerName, got.InsecureSkipVerify)
	}
	if got.MinVersion != tls.VersionTLS12 {
		t.Errorf("MinVersion = %#x; want TLS 1.2 (%#x)", got.MinVersion, tls.VersionTLS12)
	}
}

func TestTLSConfigCompletesHandshakesItShouldAndOnlyThose(t *testing.T) {
	ip := kafkaconntest.NewPKI(t, "127.0.0.1")       // server certificate for the dialed address
	named := kafkaconntest.NewPKI(t, "kafka-0.test") // server certificate for a name only
	other := kafkaconntest.NewPKI(t, "127.0.0.1")    // an unrelated CA

	tests := []struct {
		name      string
		server    *tls.Config
		give      Config
		wantError string // "" for a completed handshake
	}{
		{"ca_file trusts the server", ip.ServerConfig(false),
			Config{CAFile: ip.CAFile}, ""},
		{"another CA is not trusted", ip.ServerConfig(false),
			Config{CAFile: other.CAFile}, "unknown authority"},
		{"server_name checks the name in the certificate", named.ServerConfig(false),
			Config{CAFile: named.CAFile, ServerName: "kafka-0.test"}, ""},
		{"without server_name the dialed address is checked", named.ServerConfig(false),
			Config{CAFile: named.CAFile}, "127.0.0.1"},
		{"a wrong server_name fails", named.ServerConfig(false),
			Config{CAFile: named.CAFile, ServerName: "kafka-1.test"}, "kafka-1.test"},
		{"client certificate passes mutual TLS", ip.ServerConfig(true),
			Config{CAFile: ip.CAFile, CertFile: ip.ClientCertFile, KeyFile: ip.ClientKeyFile}, ""},
		{"mutual TLS without a client certificate fails", ip.ServerConfig(true),
			Config{CAFile: ip.CAFile}, "certificate"},
		{"a client certificate of another CA fails mutual TLS", ip.ServerConfig(true),
			Config{CAFile: ip.CAFile, CertFile: other.ClientCertFile, KeyFile: other.ClientKeyFile}, "certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Client(&tt.give)
			if err != nil {
				t.Fatalf("Client(%+v) = %v", tt.give, err)
			}
			err = handshake(t, tt.server, cfg)
			switch {
			case tt.wantError == "" && err != nil:
				t.Errorf("handshake = %v; want success", err)
			case tt.wantError != "" && err == nil:
				t.Errorf("handshake succeeded; want an error mentioning %q", tt.wantError)
			case tt.wantError != "" && !strings.Contains(err.Error(), tt.wantError):
				t.Errorf("handshake = %v; want an error mentioning %q", err, tt.wantError)
			}
		})
	}
}

func TestTLSErrorsNameTheFileThatFailed(t *testing.T) {
	p := kafkaconntest.NewPKI(t, "127.0.0.1")
	other := kafkaconntest.NewPKI(t, "127.0.0.1")
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	notPEM := filepath.Join(dir, "not-pem.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		give     Config
		wantFile string
		wantText string
	}{
		{"missing ca_file", Config{CAFile: missing}, missing, "no such file"},
		{"ca_file without PEM", Config{CAFile: notPEM}, notPEM, "no PEM certificate"},
		{"missing cert_file", Config{CertFile: missing, KeyFile: p.ClientKeyFile}, missing, "no such file"},
		{"missing key_file", Config{CertFile: p.ClientCertFile, KeyFile: missing}, missing, "no such file"},
		{"cert_file without PEM", Config{CertFile: notPEM, KeyFile: p.ClientKeyFile}, notPEM, "PEM"},
		{"key_file without PEM", Config{CertFile: p.ClientCertFile, KeyFile: notPEM}, notPEM, "PEM"},
		{"key of another certificate", Config{CertFile: p.ClientCertFile, KeyFile: other.ClientKeyFile}, other.ClientKeyFile, "does not match"},
		{"cert_file without key_file", Config{CertFile: p.ClientCertFile}, p.ClientCertFile, "both or neither"},
		{"key_file without cert_file", Config{KeyFile: p.ClientKeyFile}, p.ClientKeyFile, "both or neither"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Client(&tt.give)
			if err == nil {
				t.Fatalf("Client(%+v) = %v, nil; want an error", tt.give, cfg)
			}
			if !strings.Contains(err.Error(), tt.wantFile) || !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("Client(%+v) = %v; want an error naming %s and saying %q", tt.give, err, tt.wantFile, tt.wantText)
			}
			if strings.Count(err.Error(), tt.wantFile) > 1 {
				t.Errorf("Client(%+v) = %v; want %s named once", tt.give, err, tt.wantFile)
			}
		})
	}
}

func TestMinVersionRefusesAnOlderServer(t *testing.T) {
	p := kafkaconntest.NewPKI(t, "127.0.0.1")
	only12 := p.ServerConfig(false)
	only12.MaxVersion = tls.VersionTLS12

	tests := []struct {
		give      string
		wantError string // "" for a completed handshake
	}{
		{"", ""},
		{Version12, ""},
		{Version13, "protocol version"},
	}
	for _, tt := range tests {
		t.Run("min_version "+tt.give, func(t *testing.T) {
			cfg, err := Client(&Config{CAFile: p.CAFile, MinVersion: tt.give})
			if err != nil {
				t.Fatalf("Client(min_version %q) = %v", tt.give, err)
			}
			err = handshake(t, only12, cfg)
			switch {
			case tt.wantError == "" && err != nil:
				t.Errorf("handshake with a TLS 1.2 server = %v; want success", err)
			case tt.wantError != "" && (err == nil || !strings.Contains(err.Error(), tt.wantError)):
				t.Errorf("handshake with a TLS 1.2 server = %v; want an error mentioning %q", err, tt.wantError)
			}
		})
	}
}

func TestVersionAcceptsOnlyTLS12And13(t *testing.T) {
	tests := []struct {
		give string
		want uint16
		ok   bool
	}{
		{"", tls.VersionTLS12, true},
		{"1.2", tls.VersionTLS12, true},
		{"1.3", tls.VersionTLS13, true},
		{"1.1", 0, false},
		{"1.0", 0, false},
		{"TLS1.3", 0, false},
		{"1.4", 0, false},
	}
	for _, tt := range tests {
		got, err := Version(tt.give)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("Version(%q) = %#x, %v; want %#x, ok %v", tt.give, got, err, tt.want, tt.ok)
		}
	}
}
