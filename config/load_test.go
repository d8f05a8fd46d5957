package config

import (
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/shaper"
)

const minimal = `
pipelines:
  - name: psp
    source:
      nats: {url: nats://127.0.0.1:4222, subject: callbacks.psp, stream: CALLBACKS}
    rate: {limit: 50}
    sink:
      http: {url: "https://psp.example.com/notify"}
`

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func TestParseAppliesDefaults(t *testing.T) {
	cfg, err := Parse([]byte(minimal), env(nil))
	if err != nil {
		t.Fatalf("Parse(minimal) = %v", err)
	}
	p := cfg.Pipelines[0]
	h := p.Sink.HTTP
	checks := []struct {
		name      string
		got, want any
	}{
		{"admin.listen", cfg.Admin.Listen, DefaultAdminListen},
		{"shutdown.drain_timeout", cfg.Shutdown.DrainTimeout, DefaultDrainTimeout},
		{"bucket.capacity", p.Bucket.Capacity, shaper.DefaultCapacity},
		{"bucket.max_queue_time", p.Bucket.MaxQueueTime, shaper.DefaultMaxQueueTime},
		{"bucket.on_expire", p.Bucket.OnExpire, shaper.OnExpireDeadLetter},
		{"rate.mode", p.Rate.Mode, shaper.ModeLeaky},
		{"rate.burst", *p.Rate.Burst, 1},
		{"source.nats.durable", p.Source.NATS.Durable, "shaper-psp"},
		{"sink.http.method", h.Method, "POST"},
		{"sink.http.timeout", h.Timeout, shaper.DefaultTimeout},
		{"sink.http.max_in_flight", h.MaxInFlight, shaper.DefaultMaxInFlight},
		{"sink.http.retry.max_attempts", h.Retry.MaxAttempts, shaper.DefaultMaxAttempts},
		{"sink.http.retry.max_elapsed", h.Retry.MaxElapsed, shaper.DefaultMaxElapsed},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v; want %v", c.name, c.got, c.want)
		}
	}
}

func TestTokenModeBurstDefaultsToOneSecondOfRate(t *testing.T) {
	cfg, err := Parse([]byte(strings.Replace(minimal, "{limit: 50}", "{limit: 50, mode: token}", 1)), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := *cfg.Pipelines[0].Rate.Burst; got != 50 {
		t.Errorf("token burst = %d; want 50", got)
	}
}

func TestParseExpandsEnvironmentVariables(t *testing.T) {
	src := strings.Replace(minimal, "{limit: 50}", "{limit: '${LIMIT}', warmup: '${WARM}'}", 1) +
		"admin: {token: 'Bearer-${TOKEN}-x'}\n"
	cfg, err := Parse([]byte(src), env(map[string]string{"LIMIT": "12.5", "WARM": "3s", "TOKEN": "s3cret-0123456789"}))
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	if got := cfg.Pipelines[0].Rate.Limit; got != 12.5 {
		t.Errorf("rate.limit = %v; want 12.5", got)
	}
	if got := cfg.Pipelines[0].Rate.Warmup; got != 3*time.Second {
		t.Errorf("rate.warmup = %v; want 3s", got)
	}
	if got := cfg.Admin.Token; got != "Bearer-s3cret-0123456789-x" {
		t.Errorf("admin.token = %q; want Bearer-s3cret-0123456789-x", got)
	}
}

func TestParseReportsEveryProblemWithItsKeyPath(t *testing.T) {
	src := `
admin: {listen: nowhere, tokn: x}
pipelines:
  - name: a
    source: {nats: {url: nats://x:1, subject: s}}
    bucket: {capacity: -1, max_queue_time: soon}
    rate: {limit: '${UNSET_FOR_TEST}', mode: wavy}
    sink: {http: {url: "ftp://x", retry: {max_attempts: -1}}}
`
	_, err := Parse([]byte(src), env(nil))
	if err == nil {
		t.Fatal("Parse = nil; want errors")
	}
	// Decoding problems are reported first, all together.
	for _, want := range []string{
		"admin.tokn: unknown key",
		"pipelines[0].bucket.max_queue_time: want a duration",
		"pipelines[0].rate.limit: environment variable UNSET_FOR_TEST is not set",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	// Once it decodes, validation reports every remaining problem together.
	src = strings.NewReplacer("tokn: x", "token: x", "max_queue_time: soon", "max_queue_time: 1s", "'${UNSET_FOR_TEST}'", "0").Replace(src)
	_, err = Parse([]byte(src), env(nil))
	for _, want := range []string{
		"admin.listen: want host:port",
		"pipelines[0].bucket.capacity: must be >= 1",
		"pipelines[0].rate.limit: must be a number > 0",
		"pipelines[0].rate.mode: want leaky or token",
		"pipelines[0].sink.http.url: want an absolute http:// or https:// URL",
		"pipelines[0].sink.http.retry.max_attempts: must be >= 1",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestParseNeverEchoesAnEnvironmentValue(t *testing.T) {
	src := strings.Replace(minimal, "{limit: 50}", "{limit: '${SECRET}'}", 1)
	_, err := Parse([]byte(src), env(map[string]string{"SECRET": "hunter2"}))
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Parse = %v; want an error that does not show the value", err)
	}
}

func TestParseBoundsTheWorkOfAliasesUsedManyTimes(t *testing.T) {
	// 6 KB of YAML: a thousand pipelines, each with a thousand brokers
	// that are lists.
	src := "x: &l [a]\np: &p {name: a, source: {kafka: {brokers: [" + strings.Repeat("*l,", 1000) +
		"]}}}\npipelines: [" + strings.Repeat("*p,", 1000) + "]\n"
	_, err := Parse([]byte(src), env(nil))
	if err == nil || !strings.Contains(err.Error(), "config: more than 100000 values once aliases are expanded") {
		t.Fatalf("Parse = %.200v; want it to stop at 100000 values", err)
	}
	if len(err.Error()) > 10<<20 {
		t.Errorf("error of %d bytes; want it bounded", len(err.Error()))
	}
}
