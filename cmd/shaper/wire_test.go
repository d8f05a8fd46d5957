package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/tuning"
	"github.com/shaper-dev/shaper/sinks"
)

// TestBuildSinkLogsItsProxyWithoutCredentials: each HTTP sink says at
// startup whether its requests go through a proxy, and which, never with
// the proxy's user information. Nothing is dialled.
func TestBuildSinkLogsItsProxyWithoutCredentials(t *testing.T) {
	const user, password = "proxy-user-name", "proxy-password-1618"
	tests := []struct {
		name  string
		proxy string
		env   string // HTTPS_PROXY
		want  string
	}{
		{"no proxy key, HTTPS_PROXY set", "", "http://" + user + ":" + password + "@127.0.0.1:3129", `proxy=none`},
		{"proxy URL with credentials", "http://" + user + ":" + password + "@127.0.0.1:3128", "", `proxy=http://127.0.0.1:3128`},
		{"environment", sinks.ProxyEnvironment, "http://" + user + ":" + password + "@127.0.0.1:3129", `proxy="environment: http://127.0.0.1:3129"`},
		{"environment, nothing set", sinks.ProxyEnvironment, "", `proxy="environment: none for this url"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, name := range []string{"HTTP_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy", "REQUEST_METHOD"} {
				t.Setenv(name, "")
			}
			t.Setenv("HTTPS_PROXY", tt.env)
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			s, err := buildSink(config.Sink{HTTP: &sinks.HTTPConfig{URL: "https://psp.example.com/notify", MaxBodyBytes: 1, Proxy: tt.proxy}}, tuning.All, "test", log)
			if err != nil {
				t.Fatalf("buildSink = %v", err)
			}
			_ = s.Close(context.Background())
			if !strings.Contains(logs.String(), "level=INFO") || !strings.Contains(logs.String(), `msg="sink.http proxy" `+tt.want) {
				t.Errorf("buildSink logged %q; want an INFO line with %s", logs.String(), tt.want)
			}
			if strings.Contains(logs.String(), password) || strings.Contains(logs.String(), user) {
				t.Errorf("the log %q shows the proxy's credentials", logs.String())
			}
		})
	}
}
