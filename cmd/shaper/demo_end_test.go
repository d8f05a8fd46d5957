//go:build !nodemo

package main

import (
	"strings"
	"testing"
)

// The demo says why it stops: its --duration passed, or every message
// was delivered; never "signal received" when no signal came.
func TestDemoLogsWhyItEndsNotASignal(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want string
	}{
		{"duration", []string{"--messages", "30", "--rate", "10", "--duration", "1s"}, "demo duration passed: draining"},
		{"all delivered", []string{"--messages", "5", "--rate", "50"}, "every message delivered: draining"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runMain(t, append([]string{"demo", "--log-level", "info"}, tt.give...)...)
			if code != exitOK {
				t.Fatalf("demo = %d; want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("stderr lacks %q:\n%s", tt.want, stderr)
			}
			if strings.Contains(stderr, "signal") {
				t.Errorf("stderr speaks of a signal, and none came:\n%s", stderr)
			}
		})
	}
}
