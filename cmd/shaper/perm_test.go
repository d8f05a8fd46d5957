package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shaper-dev/shaper/config"
)

func TestAConfigWithCredentialsWritableByOthersIsWarnedAbout(t *testing.T) {
	withToken := &config.File{Admin: config.AdminConfig{Token: "0123456789abcdef-token"}}
	tests := []struct {
		name string
		mode os.FileMode
		cfg  *config.File
		warn bool
	}{
		{"owner only", 0o600, withToken, false},
		{"group and others may read", 0o644, withToken, false},
		{"group may write", 0o660, withToken, true},
		{"anyone may write", 0o606, withToken, true},
		{"anyone may write, no credentials", 0o666, &config.File{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "shaper.yaml")
			if err := os.WriteFile(path, []byte("{}"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tt.mode); err != nil { // WriteFile's mode passes through the umask
				t.Fatal(err)
			}
			var out bytes.Buffer
			warnIfWritableByOthers(path, tt.cfg, slog.New(slog.NewTextHandler(&out, nil)))
			if got := strings.Contains(out.String(), "writable by its group or by anyone"); got != tt.warn {
				t.Errorf("mode %v: warned = %v; want %v (log %q)", tt.mode, got, tt.warn, out.String())
			}
			if strings.Contains(out.String(), "0123456789abcdef") {
				t.Errorf("the warning shows the token: %q", out.String())
			}
		})
	}
}
