package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/testwait"
)

// A duration is written as its Go string by both handlers, at the top
// level and inside a group.
func TestLogAttrWritesDurationsAsGoStrings(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		g := globals{logLevel: "info", logFormat: format}
		log, err := g.logger(&buf)
		if err != nil {
			t.Fatal(err)
		}
		log.With(slog.Group("bound", "wait", 1500*time.Microsecond)).
			Info("x", "timeout", 30*time.Second, slog.Group("retry", "max_backoff", time.Minute), "count", 7)
		for _, want := range map[string][]string{
			"json": {`"timeout":"30s"`, `"retry":{"max_backoff":"1m0s"}`, `"bound":{"wait":"1.5ms"}`, `"count":7`},
			"text": {"timeout=30s", "retry.max_backoff=1m0s", "bound.wait=1.5ms", "count=7"},
		}[format] {
			if !strings.Contains(buf.String(), want) {
				t.Errorf("%s log %q lacks %s", format, buf.String(), want)
			}
		}
	}
}

// Every attribute that the text log shows as a duration is, in the JSON
// log of the same run, a string time.ParseDuration reads, equal to it:
// never a count of nanoseconds. The run is a real `shaper run`, from
// start to drain.
func TestJSONLogWritesEveryDurationAsAGoDurationString(t *testing.T) {
	_, config, _ := natsRun(t, 0, 50, time.Second)
	logs := map[string][]map[string]string{}
	for _, format := range []string{"text", "json"} {
		c := startShaper(t, nil, "--log-format", format, "run", "--config", config)
		running := map[string]string{"text": `msg="pipeline running"`, "json": `"msg":"pipeline running"`}[format]
		testwait.For(t, time.Minute, "pipeline running in the "+format+" log", func() bool { return strings.Contains(c.Stderr.String(), running) })
		c.StopWithin(30 * time.Second)
		for _, line := range strings.Split(strings.TrimSpace(c.Stderr.String()), "\n") {
			if format == "json" {
				logs[format] = append(logs[format], jsonAttrs(t, line))
			} else {
				logs[format] = append(logs[format], textAttrs(line))
			}
		}
	}
	byMsg := map[string]map[string]string{}
	for _, l := range logs["json"] {
		byMsg[l["msg"]] = l
	}
	checked := map[string]bool{}
	for _, text := range logs["text"] {
		js, ok := byMsg[text["msg"]]
		if !ok {
			continue // a line of one run only, such as a reconnect
		}
		for key, v := range text {
			if key == "time" || !isDuration(v) {
				continue
			}
			checked[key] = true
			if got, ok := js[key]; !ok || got != strconv.Quote(v) {
				t.Errorf("%q: JSON %s = %s; want %q, as the text log has it", text["msg"], key, got, v)
			} else if _, err := time.ParseDuration(v); err != nil {
				t.Errorf("%q: %s = %s: %v", text["msg"], key, got, err)
			}
		}
	}
	if !checked["max_queue_time"] || !checked["timeout"] {
		t.Errorf("checked %v; want at least max_queue_time (pipeline running) and timeout (draining)", slices.Sorted(maps.Keys(checked)))
	}
}

// isDuration reports whether a text log value is a duration with a unit
// (a bare "0" or "50" is a number).
func isDuration(v string) bool {
	_, err := time.ParseDuration(v)
	return err == nil && strings.ContainsAny(v, "nuµmsh")
}

// jsonAttrs returns a JSON log line's attributes, each as its JSON text,
// groups flattened to "group.key" as the text handler writes them; "msg"
// is the message itself.
func jsonAttrs(t *testing.T, line string) map[string]string {
	t.Helper()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(line), &raw); err != nil {
		t.Fatalf("log line %q is not JSON: %v", line, err)
	}
	out := map[string]string{}
	var flatten func(prefix string, m map[string]json.RawMessage)
	flatten = func(prefix string, m map[string]json.RawMessage) {
		for k, v := range m {
			var group map[string]json.RawMessage
			if json.Unmarshal(v, &group) == nil {
				flatten(prefix+k+".", group)
				continue
			}
			out[prefix+k] = string(v)
		}
	}
	flatten("", raw)
	var msg string
	_ = json.Unmarshal(raw["msg"], &msg)
	out["msg"] = msg
	return out
}

var logfmtPair = regexp.MustCompile(`([^\s=]+)=("(?:[^"\\]|\\.)*"|\S*)`)

// textAttrs returns a text log line's attributes, unquoted.
func textAttrs(line string) map[string]string {
	out := map[string]string{}
	for _, m := range logfmtPair.FindAllStringSubmatch(line, -1) {
		v := m[2]
		if u, err := strconv.Unquote(v); err == nil {
			v = u
		}
		out[m[1]] = v
	}
	return out
}

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
