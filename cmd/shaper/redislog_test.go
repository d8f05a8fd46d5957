package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/testwait"
)

func TestRedisLogLinesBecomeRecordsAtTheirLevel(t *testing.T) {
	tests := []struct {
		name   string
		format string
		args   []any
		want   string // level
		msg    string
	}{
		{
			name:   "pool dial failure",
			format: "redis: connection pool: failed to dial after %d attempts: %v",
			args:   []any{5, "dial tcp 127.0.0.1:6379: connect: connection refused"},
			want:   "DEBUG",
			msg:    "connection pool: failed to dial after 5 attempts: dial tcp 127.0.0.1:6379: connect: connection refused",
		},
		{
			name:   "no usable connection",
			format: "redis: connection pool: failed to get a usable connection after %d attempts",
			args:   []any{3},
			want:   "DEBUG",
			msg:    "connection pool: failed to get a usable connection after 3 attempts",
		},
		{
			name:   "sentinel failure",
			format: "sentinel: GetMasterAddrByName name=%q failed: %s",
			args:   []any{"mymaster", "i/o timeout"},
			want:   "DEBUG",
			msg:    `sentinel: GetMasterAddrByName name="mymaster" failed: i/o timeout`,
		},
		{
			name:   "sentinel news",
			format: "sentinel: new master=%q addr=%q",
			args:   []any{"mymaster", "10.0.0.2:6379"},
			want:   "INFO",
			msg:    `sentinel: new master="mymaster" addr="10.0.0.2:6379"`,
		},
		{
			name:   "anything else",
			format: "Conn has unread data (not push notification), removing it",
			want:   "WARN",
			msg:    "Conn has unread data (not push notification), removing it",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := redisLog{slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})).With("component", "redis")}
			l.Printf(context.Background(), tt.format, tt.args...)
			var rec map[string]any
			if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
				t.Fatalf("Printf(%q) wrote %q; want one JSON record: %v", tt.format, buf.String(), err)
			}
			if rec["level"] != tt.want || rec["msg"] != tt.msg || rec["component"] != "redis" {
				t.Errorf("Printf(%q) = level %v, msg %q, component %v; want %s, %q, redis", tt.format, rec["level"], rec["msg"], rec["component"], tt.want, tt.msg)
			}
		})
	}

	var buf bytes.Buffer
	quiet := redisLog{slog.New(slog.NewJSONHandler(&buf, nil))} // Info
	quiet.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v", 5, "refused")
	if buf.Len() > 0 {
		t.Errorf("a dial failure at log level info wrote %q; want nothing", buf.String())
	}
}

// TestRedisOutageLogsOnceAsStructuredRecordsOfTheDaemon runs `shaper run`
// with JSON logs while Redis is down, then brings Redis up: every line the
// daemon writes is a JSON record (go-redis's own pool lines included, as
// component=redis), and the outage is one fallback warning and one info
// on the return.
func TestRedisOutageLogsOnceAsStructuredRecordsOfTheDaemon(t *testing.T) {
	_, redis, config := sharedRun(t, 100, 20, 5)
	redis.Stop()
	c := startShaper(t, nil, "run", "--config", config, "--log-format", "json", "--log-level", "debug")

	testwait.For(t, 30*time.Second, "a fallback and go-redis's dial failure in the log", func() bool {
		out := c.Stderr.String()
		return strings.Contains(out, "falling back") && strings.Contains(out, "failed to dial")
	})
	restarted := time.Now()
	redis.Restart()
	testwait.For(t, 5*time.Second, "the return to the shared limit in the log", func() bool {
		return strings.Contains(c.Stderr.String(), "back to the shared limit")
	})
	t.Logf("back on the shared limit within %v of the restart", time.Since(restarted).Round(time.Millisecond))
	c.StopWithin(15 * time.Second)

	var fallbacks, returns, dials int
	for line := range strings.Lines(c.Stderr.String()) {
		var rec struct {
			Level, Msg, Component string
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("stderr line %q is not a JSON record: %v", strings.TrimSpace(line), err)
			continue
		}
		switch {
		case strings.Contains(rec.Msg, "falling back"):
			fallbacks++
			if rec.Level != "WARN" {
				t.Errorf("fallback logged at %s; want WARN: %s", rec.Level, line)
			}
		case strings.Contains(rec.Msg, "back to the shared limit"):
			returns++
			if rec.Level != "INFO" {
				t.Errorf("return logged at %s; want INFO: %s", rec.Level, line)
			}
		case rec.Component == "redis" && strings.Contains(rec.Msg, "failed to dial"):
			dials++
			if rec.Level != "DEBUG" {
				t.Errorf("go-redis dial failure logged at %s; want DEBUG: %s", rec.Level, line)
			}
		}
	}
	if fallbacks != 1 || returns != 1 || dials == 0 {
		t.Errorf("log holds %d fallbacks, %d returns, %d go-redis dial failures; want 1, 1, at least 1:\n%s", fallbacks, returns, dials, c.Stderr)
	}
}
