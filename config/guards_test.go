package config

import (
	"slices"
	"strings"
	"testing"
)

// admin.allowed_hosts takes names and addresses with or without a port,
// and refuses anything else with its key path and the value; key.max_length
// has bounds.
func TestValidateChecksAllowedHostsAndKeyMaxLength(t *testing.T) {
	tests := []struct {
		name string
		add  string // YAML put before pipelines:
		key  string // the pipeline's key mapping ("": none)
		want string // "" when valid
	}{
		{"names and addresses", "admin: {allowed_hosts: [shaper, 'shaper-1:9090', shaper.monitoring.svc, '10.0.0.5', '[fd00::1]:9090']}\n", "", ""},
		{"a URL", "admin: {allowed_hosts: [shaper, 'http://shaper:9090/']}\n", "", `admin.allowed_hosts[1]: want a host name or address, with or without :port (such as shaper.monitoring.svc or shaper:9090), got "http://shaper:9090/"`},
		{"a wildcard", "admin: {allowed_hosts: ['*.svc']}\n", "", `admin.allowed_hosts[0]: want a host name or address`},
		{"an empty entry", "admin: {allowed_hosts: ['']}\n", "", `admin.allowed_hosts[0]: want a host name or address`},
		{"key.max_length default", "", "{from: 'header:Merchant-Id'}", ""},
		{"key.max_length too short", "", "{from: 'header:Merchant-Id', max_length: 16}", "pipelines[0].key.max_length: must be from 71 to 4096 bytes, got 16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := tt.add + minimal
			if tt.key != "" {
				src = strings.Replace(src, "rate: {limit: 50}", "rate: {limit: 50}\n    key: "+tt.key, 1)
			}
			cfg, err := Parse([]byte(src), env(nil))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("%v; want valid", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("%v; want %q", err, tt.want)
			case tt.want == "" && tt.key != "" && cfg.Pipelines[0].Key.MaxLength != 256:
				t.Errorf("key.max_length = %d; want the default 256", cfg.Pipelines[0].Key.MaxLength)
			case tt.want == "" && tt.add != "" && !slices.Contains(cfg.Admin.AllowedHosts, "shaper-1:9090"):
				t.Errorf("admin.allowed_hosts = %q; want them as written", cfg.Admin.AllowedHosts)
			}
		})
	}
}
