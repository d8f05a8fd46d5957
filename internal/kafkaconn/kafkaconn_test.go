package kafkaconn

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go/sasl"

	"github.com/shaper-dev/shaper/internal/kafkaconn/kafkaconntest"
	"github.com/shaper-dev/shaper/internal/tlsconf"
)

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
		{SASLPlain, "\x00shaper\x00s3cret-pw"},
		{SASLScramSHA256, "n,,n=shaper,r="},
		{SASLScramSHA512, "n,,n=shaper,r="},
	}
	for _, tt := range tests {
		t.Run(tt.mechanism, func(t *testing.T) {
			m, err := SASL(&SASLConfig{Mechanism: tt.mechanism, Username: "shaper", Password: "s3cret-pw"})
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
		give     SASLConfig
		wantText string
	}{
		{"unknown mechanism", SASLConfig{Mechanism: "GSSAPI", Username: "u", Password: secret}, `"GSSAPI"`},
		{"mechanism in lower case", SASLConfig{Mechanism: "plain", Username: "u", Password: secret}, `"plain"`},
		{"PLAIN password with NUL", SASLConfig{Mechanism: SASLPlain, Username: "u", Password: secret + "\x00"}, "PLAIN password"},
		{"PLAIN username with NUL", SASLConfig{Mechanism: SASLPlain, Username: "u\x00v", Password: secret}, "PLAIN username"},
		{"SCRAM-SHA-256 password SASLprep refuses", SASLConfig{Mechanism: SASLScramSHA256, Username: "u", Password: secret + "\a"}, "SCRAM-SHA-256 password"},
		{"SCRAM-SHA-512 password SASLprep refuses", SASLConfig{Mechanism: SASLScramSHA512, Username: "u", Password: secret + "\a"}, "SCRAM-SHA-512 password"},
		{"SCRAM username SASLprep refuses", SASLConfig{Mechanism: SASLScramSHA256, Username: "u\a", Password: secret}, "SCRAM-SHA-256 username"},
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
	cfg := Config{
		Brokers: []string{"127.0.0.1:9092"},
		TLS:     &tlsconf.Config{CAFile: p.CAFile, ServerName: "kafka.test"},
		SASL:    &SASLConfig{Mechanism: SASLScramSHA512, Username: "u", Password: "p"},
	}
	d, err := Dialer(cfg, "shaper-test")
	if err != nil {
		t.Fatalf("Dialer = %v", err)
	}
	tr, err := Transport(cfg, "shaper-test")
	if err != nil {
		t.Fatalf("Transport = %v", err)
	}
	// The two name their fields differently; what they carry must be the same.
	tests := []struct {
		name     string
		v        any
		clientID string
		tls      *tls.Config
		sasl     sasl.Mechanism
		timeout  time.Duration
	}{
		{"Dialer", d, d.ClientID, d.TLS, d.SASLMechanism, d.Timeout},
		{"Transport", tr, tr.ClientID, tr.TLS, tr.SASL, tr.DialTimeout},
	}
	for _, tt := range tests {
		if tt.clientID != "shaper-test" || tt.tls == nil || tt.tls.ServerName != "kafka.test" || tt.tls.RootCAs == nil ||
			tt.sasl == nil || tt.sasl.Name() != SASLScramSHA512 || tt.timeout != dialTimeout {
			t.Errorf("%s = %+v; want client id, TLS with the CA and server name, SCRAM-SHA-512 and a dial timeout", tt.name, tt.v)
		}
	}

	plain, err := Transport(Config{Brokers: cfg.Brokers}, "shaper-test")
	if err != nil || plain.TLS != nil || plain.SASL != nil {
		t.Errorf("Transport(no tls, no sasl) = TLS %v, SASL %v, %v; want nil, nil, nil", plain.TLS, plain.SASL, err)
	}
}

func TestDialerAndTransportReportTLSAndSASLProblemsTogether(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "ca.pem")
	cfg := Config{
		Brokers: []string{"127.0.0.1:9092"},
		TLS:     &tlsconf.Config{CAFile: missing},
		SASL:    &SASLConfig{Mechanism: "NOPE", Username: "u", Password: "hunter2"},
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
