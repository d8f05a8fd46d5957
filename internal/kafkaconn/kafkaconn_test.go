package kafkaconn

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/kafkaconn/kafkaconntest"
	"github.com/shaper-dev/shaper/shaper"
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
	got, err := TLS(nil)
	if got != nil || err != nil {
		t.Errorf("TLS(nil) = %v, %v; want nil, nil", got, err)
	}
}

func TestTLSEmptyConfigUsesSystemCAsAndTLS12(t *testing.T) {
	got, err := TLS(&shaper.TLSConfig{})
	if err != nil {
		t.Fatalf("TLS({}) = %v", err)
	}
	if got.RootCAs != nil || len(got.Certificates) != 0 || got.ServerName != "" || got.InsecureSkipVerify {
		t.Errorf("TLS({}) = RootCAs %v, %d certificates, ServerName %q, InsecureSkipVerify %v; want the system's CAs, none, \"\", false",
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
		give      shaper.TLSConfig
		wantError string // "" for a completed handshake
	}{
		{"ca_file trusts the server", ip.ServerConfig(false),
			shaper.TLSConfig{CAFile: ip.CAFile}, ""},
		{"another CA is not trusted", ip.ServerConfig(false),
			shaper.TLSConfig{CAFile: other.CAFile}, "unknown authority"},
		{"server_name checks the name in the certificate", named.ServerConfig(false),
			shaper.TLSConfig{CAFile: named.CAFile, ServerName: "kafka-0.test"}, ""},
		{"without server_name the dialed address is checked", named.ServerConfig(false),
			shaper.TLSConfig{CAFile: named.CAFile}, "127.0.0.1"},
		{"a wrong server_name fails", named.ServerConfig(false),
			shaper.TLSConfig{CAFile: named.CAFile, ServerName: "kafka-1.test"}, "kafka-1.test"},
		{"client certificate passes mutual TLS", ip.ServerConfig(true),
			shaper.TLSConfig{CAFile: ip.CAFile, CertFile: ip.ClientCertFile, KeyFile: ip.ClientKeyFile}, ""},
		{"mutual TLS without a client certificate fails", ip.ServerConfig(true),
			shaper.TLSConfig{CAFile: ip.CAFile}, "certificate"},
		{"a client certificate of another CA fails mutual TLS", ip.ServerConfig(true),
			shaper.TLSConfig{CAFile: ip.CAFile, CertFile: other.ClientCertFile, KeyFile: other.ClientKeyFile}, "certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := TLS(&tt.give)
			if err != nil {
				t.Fatalf("TLS(%+v) = %v", tt.give, err)
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
		give     shaper.TLSConfig
		wantFile string
		wantText string
	}{
		{"missing ca_file", shaper.TLSConfig{CAFile: missing}, missing, "no such file"},
		{"ca_file without PEM", shaper.TLSConfig{CAFile: notPEM}, notPEM, "no PEM certificate"},
		{"missing cert_file", shaper.TLSConfig{CertFile: missing, KeyFile: p.ClientKeyFile}, missing, "no such file"},
		{"missing key_file", shaper.TLSConfig{CertFile: p.ClientCertFile, KeyFile: missing}, missing, "no such file"},
		{"cert_file without PEM", shaper.TLSConfig{CertFile: notPEM, KeyFile: p.ClientKeyFile}, notPEM, "PEM"},
		{"key_file without PEM", shaper.TLSConfig{CertFile: p.ClientCertFile, KeyFile: notPEM}, notPEM, "PEM"},
		{"key of another certificate", shaper.TLSConfig{CertFile: p.ClientCertFile, KeyFile: other.ClientKeyFile}, other.ClientKeyFile, "does not match"},
		{"cert_file without key_file", shaper.TLSConfig{CertFile: p.ClientCertFile}, p.ClientCertFile, "both or neither"},
		{"key_file without cert_file", shaper.TLSConfig{KeyFile: p.ClientKeyFile}, p.ClientKeyFile, "both or neither"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := TLS(&tt.give)
			if err == nil {
				t.Fatalf("TLS(%+v) = %v, nil; want an error", tt.give, cfg)
			}
			if !strings.Contains(err.Error(), tt.wantFile) || !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("TLS(%+v) = %v; want an error naming %s and saying %q", tt.give, err, tt.wantFile, tt.wantText)
			}
			if strings.Count(err.Error(), tt.wantFile) > 1 {
				t.Errorf("TLS(%+v) = %v; want %s named once", tt.give, err, tt.wantFile)
			}
		})
	}
}

func TestSASLIsOffWithoutConfig(t *testing.T) {
	got, err := SASL(nil)
	if got != nil || err != nil {
		t.Errorf("SASL(nil) = %v, %v; want nil, nil", got, err)
	}
}

func TestSASLBuildsEachMechanismWithTheCredentials(t *testing.T) {
	tests := []struct {
		mechanism string
		wantFirst string // the start of the client's first message
	}{
		{shaper.SASLPlain, "\x00shaper\x00s3cret-pw"},
		{shaper.SASLScramSHA256, "n,,n=shaper,r="},
		{shaper.SASLScramSHA512, "n,,n=shaper,r="},
	}
	for _, tt := range tests {
		t.Run(tt.mechanism, func(t *testing.T) {
			m, err := SASL(&shaper.SASLConfig{Mechanism: tt.mechanism, Username: "shaper", Password: "s3cret-pw"})
			if err != nil {
				t.Fatalf("SASL(%s) = %v", tt.mechanism, err)
			}
			if m.Name() != tt.mechanism {
				t.Errorf("Name() = %q; want %q", m.Name(), tt.mechanism)
			}
			_, first, err := m.Start(context.Background())
			if err != nil {
				t.Fatalf("Start() = %v", err)
			}
			if !strings.HasPrefix(string(first), tt.wantFirst) {
				t.Errorf("first message = %q; want it to start with %q", first, tt.wantFirst)
			}
		})
	}
}

func TestSASLErrorsNeverContainThePassword(t *testing.T) {
	const secret = "hunter2-secret"
	tests := []struct {
		name     string
		give     shaper.SASLConfig
		wantText string
	}{
		{"unknown mechanism", shaper.SASLConfig{Mechanism: "GSSAPI", Username: "u", Password: secret}, `"GSSAPI"`},
		{"mechanism in lower case", shaper.SASLConfig{Mechanism: "plain", Username: "u", Password: secret}, `"plain"`},
		{"PLAIN password with NUL", shaper.SASLConfig{Mechanism: shaper.SASLPlain, Username: "u", Password: secret + "\x00"}, "PLAIN password"},
		{"PLAIN username with NUL", shaper.SASLConfig{Mechanism: shaper.SASLPlain, Username: "u\x00v", Password: secret}, "PLAIN username"},
		{"SCRAM-SHA-256 password SASLprep refuses", shaper.SASLConfig{Mechanism: shaper.SASLScramSHA256, Username: "u", Password: secret + "\a"}, "SCRAM-SHA-256 password"},
		{"SCRAM-SHA-512 password SASLprep refuses", shaper.SASLConfig{Mechanism: shaper.SASLScramSHA512, Username: "u", Password: secret + "\a"}, "SCRAM-SHA-512 password"},
		{"SCRAM username SASLprep refuses", shaper.SASLConfig{Mechanism: shaper.SASLScramSHA256, Username: "u\a", Password: secret}, "SCRAM-SHA-256 username"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := SASL(&tt.give)
			if err == nil {
				t.Fatalf("SASL(%s) = %v, nil; want an error", tt.give.Mechanism, m)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("SASL(%s) error %q contains the password", tt.give.Mechanism, err)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("SASL(%s) = %v; want it to say %q", tt.give.Mechanism, err, tt.wantText)
			}
		})
	}
}

func TestDialerAndTransportCarryTLSAndSASL(t *testing.T) {
	p := kafkaconntest.NewPKI(t, "127.0.0.1")
	cfg := shaper.KafkaConnConfig{
		Brokers: []string{"127.0.0.1:9092"},
		TLS:     &shaper.TLSConfig{CAFile: p.CAFile, ServerName: "kafka.test"},
		SASL:    &shaper.SASLConfig{Mechanism: shaper.SASLScramSHA512, Username: "u", Password: "p"},
	}
	d, err := Dialer(cfg, "shaper-test")
	if err != nil {
		t.Fatalf("Dialer = %v", err)
	}
	if d.ClientID != "shaper-test" || d.TLS == nil || d.TLS.ServerName != "kafka.test" || d.TLS.RootCAs == nil ||
		d.SASLMechanism == nil || d.SASLMechanism.Name() != shaper.SASLScramSHA512 || d.Timeout != dialTimeout {
		t.Errorf("Dialer = %+v; want client id, TLS with the CA and server name, SCRAM-SHA-512 and a dial timeout", d)
	}
	tr, err := Transport(cfg, "shaper-test")
	if err != nil {
		t.Fatalf("Transport = %v", err)
	}
	if tr.ClientID != "shaper-test" || tr.TLS == nil || tr.TLS.ServerName != "kafka.test" || tr.TLS.RootCAs == nil ||
		tr.SASL == nil || tr.SASL.Name() != shaper.SASLScramSHA512 || tr.DialTimeout != dialTimeout {
		t.Errorf("Transport = %+v; want client id, TLS with the CA and server name, SCRAM-SHA-512 and a dial timeout", tr)
	}

	plain, err := Transport(shaper.KafkaConnConfig{Brokers: cfg.Brokers}, "shaper-test")
	if err != nil || plain.TLS != nil || plain.SASL != nil {
		t.Errorf("Transport(no tls, no sasl) = TLS %v, SASL %v, %v; want nil, nil, nil", plain.TLS, plain.SASL, err)
	}
}

func TestDialerAndTransportReportTLSAndSASLProblemsTogether(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "ca.pem")
	cfg := shaper.KafkaConnConfig{
		Brokers: []string{"127.0.0.1:9092"},
		TLS:     &shaper.TLSConfig{CAFile: missing},
		SASL:    &shaper.SASLConfig{Mechanism: "NOPE", Username: "u", Password: "hunter2"},
	}
	_, derr := Dialer(cfg, "shaper-test")
	_, terr := Transport(cfg, "shaper-test")
	for name, err := range map[string]error{"Dialer": derr, "Transport": terr} {
		if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), `"NOPE"`) {
			t.Errorf("%s = %v; want both the ca_file and the mechanism problem", name, err)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s error %q contains the password", name, err)
		}
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s = %v; want errors.Is(err, os.ErrNotExist)", name, err)
		}
	}
}
