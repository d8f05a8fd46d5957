package tlsconf

import (
	"errors"
	"os"

	"github.com/shaper-dev/shaper/internal/check"
)

// Config configures TLS to a server: a Kafka broker, Redis or an HTTP
// sink. Certificates are always verified; there is no way to turn that off.
type Config struct {
	// CAFile is a PEM bundle of CAs to trust instead of the system's.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// mutual TLS. Both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName overrides the name checked in the server's certificate.
	ServerName string `yaml:"server_name"`
	// MinVersion is the oldest TLS version accepted: "1.2" (default) or
	// "1.3".
	MinVersion string `yaml:"min_version"`
}

// Values of Config.MinVersion.
const (
	Version12 = "1.2"
	Version13 = "1.3"
	// DefaultMinVersion is Config.MinVersion's default.
	DefaultMinVersion = Version12
)

// SetDefaults fills a config left partly out; nil (TLS off) stays nil.
func (c *Config) SetDefaults() {
	if c != nil && c.MinVersion == "" {
		c.MinVersion = DefaultMinVersion
	}
}

// Validate reports every problem of c at key path path; nil (TLS off) is
// valid. The files must be readable now.
func (c *Config) Validate(path string) error {
	if c == nil {
		return nil
	}
	var ps check.Problems
	if (c.CertFile == "") != (c.KeyFile == "") {
		ps.Add(path, "cert_file and key_file go together: set both or neither")
	}
	switch c.MinVersion {
	case "", Version12, Version13:
	default:
		ps.Add(path+".min_version", "want %q or %q, got %q", Version12, Version13, c.MinVersion)
	}
	for _, f := range []struct{ key, file string }{{"ca_file", c.CAFile}, {"cert_file", c.CertFile}, {"key_file", c.KeyFile}} {
		if f.file == "" {
			continue
		}
		if _, err := os.Stat(f.file); err != nil {
			ps.Add(path+"."+f.key, "cannot read %q: %v", f.file, errors.Unwrap(err))
		}
	}
	return ps.Err()
}
