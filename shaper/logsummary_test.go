package shaper_test

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/logtest"
	"github.com/shaper-dev/shaper/shaper"
)

// logLine is one JSON log line, the fields the summary tests read.
type logLine struct {
	Level  string `json:"level"`
	Msg    string `json:"msg"`
	ID     string `json:"id"`
	Reason string `json:"reason"`
	Count  int    `json:"count"`
	LastID string `json:"last_id"`
	Last   string `json:"last_err"`
}

// refuseAll runs a pipeline in a synctest bubble whose sink refuses every
// one of n messages (400: undeliverable, reason "rejected", at once) at
// limit per second, and returns its log at level, one JSON line each, once
// Run has returned. With withTarget the messages go to a dead-letter
// target that takes them all; without, each is nacked.
func refuseAll(t *testing.T, n int, limit float64, withTarget bool, level slog.Level) []logLine {
	t.Helper()
	var buf logtest.Buffer
	synctest.Test(t, func(t *testing.T) {
		f := newFakes(n)
		f.respond = func(*shaper.Message, int) (time.Duration, error) {
			return 0, &shaper.StatusError{Code: 400, Body: "no such merchant"}
		}
		dead := newFakes(0)
		pc, lim := fakeConfig(t, func(pc *config.Pipeline) {
			pc.Name = "psp"
			pc.Bucket = shaper.BucketConfig{Capacity: n, MaxQueueTime: time.Hour}
			pc.Rate.Limit = limit
		})
		log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level}))
		parts := shaper.Parts{Source: f, Sink: fakeSink{f}, Limiter: lim,
			Clock: bubbleClock{}, Logger: log, Metrics: shaper.NewMetrics(prometheus.NewRegistry()), DrainTimeout: time.Second}
		finished := func() int { return len(f.of("nack")) }
		if withTarget {
			parts.DeadLetter = fakeSink{dead}
			finished = func() int { return len(f.of("ack")) }
		}
		p := shaper.New(pc.Core(), parts)
		done := make(chan error, 1)
		go func() { done <- p.Run(context.Background()) }()
		for finished() < n {
			elapse(time.Second)
		}
		p.Drain()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	var lines []logLine
	sc := bufio.NewScanner(strings.NewReader(buf.String()))
	for sc.Scan() {
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return lines
}

// An outage that makes every message undeliverable writes one WARN line
// per 10 s, whose counts add up to every message, not one line per
// message; at debug level every message still has its own line. So with a
// dead-letter target (each message dead-lettered) and without one (each
// nacked for redelivery).
func TestUndeliverableBurstLogsAFewCountedLinesAndEachMessageAtDebug(t *testing.T) {
	const n, limit = 1000, 40 // 25 s of departures: three windows and a rest
	tests := []struct {
		name       string
		withTarget bool
		msg        string
	}{
		{"dead-lettered", true, "message dead-lettered"},
		{"no target", false, "undeliverable message nacked for redelivery: no dead_letter target is configured"},
	}
	for _, tt := range tests {
		for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
			t.Run(tt.name+"/"+level.String(), func(t *testing.T) {
				checkCounted(t, refuseAll(t, n, limit, tt.withTarget, level), tt.msg, n, level)
			})
		}
	}
}

// checkCounted checks lines for msg: WARN summaries whose counts add up to
// n, a handful of them, and at debug level one DEBUG line per message.
func checkCounted(t *testing.T, lines []logLine, msg string, n int, level slog.Level) {
	t.Helper()
	var warns, debugs, counted int
	ids := map[string]bool{}
	for _, l := range lines {
		if l.Msg != msg {
			continue
		}
		switch l.Level {
		case "WARN":
			warns++
			counted += l.Count
			if l.Reason != "rejected" || l.LastID == "" || !strings.Contains(l.Last, "400") {
				t.Errorf("summary line %+v; want reason rejected, the last id and its error (400)", l)
			}
		case "DEBUG":
			debugs++
			ids[l.ID] = true
		}
	}
	t.Logf("%d messages: %d WARN lines counting %d, %d DEBUG lines", n, warns, counted, debugs)
	if counted != n {
		t.Errorf("WARN counts add up to %d; want %d", counted, n)
	}
	if warns < 2 || warns > 6 {
		t.Errorf("%d WARN lines for %d messages over 25 s; want a handful (one per 10 s window, and the last)", warns, n)
	}
	want := 0
	if level == slog.LevelDebug {
		want = n
	}
	if debugs != want || len(ids) != want {
		t.Errorf("at %v: %d DEBUG lines for %d ids; want %d, one per message", level, debugs, len(ids), want)
	}
}
