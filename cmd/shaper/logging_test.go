package main

import (
	"bytes"
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
