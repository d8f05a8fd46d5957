package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A rate that cannot be held (too low for max_queue_time, too high, or a
// number that overflows the capacity) is refused with its key path and the
// reason, by validate and by the admin API alike (the same function;
// shaper's TestEffectiveCapacityNeverOverflows covers the capacity).
func TestValidateRefusesRatesThatBreakTheBucket(t *testing.T) {
	tests := []struct {
		name string
		rate string // the rate mapping
		mqt  string // bucket.max_queue_time
		want string // "" when valid
	}{
		{"the lowest rate max_queue_time allows", "{limit: 0.2}", "5s", ""},
		{"below one message per max_queue_time", "{limit: 0.1}", "5s", "pipelines[0].rate.limit: must be >= 0.2, got 0.1: at a lower rate not one message can leave within bucket.max_queue_time (5s)"},
		{"0.01 with a long max_queue_time", "{limit: 0.01}", "2m", ""},
		{"the smallest double", "{limit: 5e-324}", "5s", "pipelines[0].rate.limit: must be >= 0.2"},
		{"overflowing the capacity", "{limit: 1e308}", "5s", "pipelines[0].rate.limit: must be <= 1e+06 (one request per microsecond), got 1e+308"},
		{"above the maximum", "{limit: 1.6e17}", "5s", "pipelines[0].rate.limit: must be <= 1e+06"},
		{"the maximum", "{limit: 1000000}", "5s", ""},
		{"zero", "{limit: 0}", "5s", "pipelines[0].rate.limit: must be a number > 0, got 0"},
		{"negative", "{limit: -3}", "5s", "pipelines[0].rate.limit: must be a number > 0, got -3"},
		{"infinite", "{limit: .inf}", "5s", "pipelines[0].rate.limit: must be a number > 0, got +Inf"},
		{"burst in leaky mode", "{limit: 5, burst: 3}", "5s", "pipelines[0].rate.burst: leaky mode never bursts"},
		{"zero burst", "{mode: token, limit: 5, burst: 0}", "5s", "pipelines[0].rate.burst: must be >= 1, got 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(minimal, "rate: {limit: 50}", "rate: "+tt.rate+"\n    bucket: {max_queue_time: "+tt.mqt+"}", 1)
			cfg, err := Parse([]byte(src), env(nil))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Parse(rate %s, max_queue_time %s) = %v; want nil", tt.rate, tt.mqt, err)
			case tt.want == "":
				if got := cfg.Pipelines[0].Rate.Limit; got <= 0 {
					t.Errorf("Parse(rate %s) took limit %v", tt.rate, got)
				}
			case err == nil || !strings.Contains(err.Error(), tt.want):
				t.Errorf("Parse(rate %s, max_queue_time %s) = %v; want %q", tt.rate, tt.mqt, err, tt.want)
			}
		})
	}
}

// Zero means "left out" in the config types; a 0 written in the file used
// to become the default silently (capacity: 0 became 1000).
func TestParseRefusesAnExplicitZeroThatWouldBecomeTheDefault(t *testing.T) {
	tests := []struct {
		name, from, to, want string
	}{
		{"capacity", "rate: {limit: 50}", "rate: {limit: 50}\n    bucket: {capacity: 0}", "pipelines[0].bucket.capacity: must not be 0; leave the key out for the default (1000)"},
		{"max_queue_time", "rate: {limit: 50}", "rate: {limit: 50}\n    bucket: {max_queue_time: 0s}", "pipelines[0].bucket.max_queue_time: must not be 0; leave the key out for the default (5s)"},
		{"max_in_flight", `{url: "https://psp.example.com/notify"}`, `{url: "https://psp.example.com/notify", max_in_flight: 0}`, "pipelines[0].sink.http.max_in_flight: must not be 0; leave the key out for the default (8)"},
		{"retry.max_attempts", `{url: "https://psp.example.com/notify"}`, `{url: "https://psp.example.com/notify", retry: {max_attempts: 0}}`, "pipelines[0].sink.http.retry.max_attempts: must not be 0"},
		{"drain_timeout", "pipelines:", "shutdown: {drain_timeout: 0s}\npipelines:", "shutdown.drain_timeout: must not be 0; leave the key out for the default (30s)"},
		{"from the environment", "rate: {limit: 50}", "rate: {limit: 50}\n    bucket: {capacity: '${ZERO}'}", "pipelines[0].bucket.capacity: must not be 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(minimal, tt.from, tt.to, 1)
			if src == minimal {
				t.Fatalf("%q not in the minimal config", tt.from)
			}
			if got := problemsOf(t, src, map[string]string{"ZERO": "0"}); !strings.Contains(got, tt.want) {
				t.Errorf("Parse = %v; want %q", got, tt.want)
			}
		})
	}
	// Zeros that are values of their own stay valid.
	for _, ok := range []string{"rate: {limit: 50, warmup: 0s}", "rate: {limit: 50, shared: {redis: {addr: 'r:6379', db: 0}, fallback_limit: 5}}"} {
		if _, err := Parse([]byte(strings.Replace(minimal, "rate: {limit: 50}", ok, 1)), env(nil)); err != nil {
			t.Errorf("Parse(%s) = %v; want nil", ok, err)
		}
	}
}

func TestLoadRefusesAFileLargerThanFourMiB(t *testing.T) {
	path := filepath.Join(t.TempDir(), "huge.yaml")
	big := minimal + "# " + strings.Repeat("x", MaxConfigBytes) + "\n"
	if err := os.WriteFile(path, []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), "larger than 4194304 bytes") {
		t.Errorf("Load(%d bytes) = %v; want it refused as too large", len(big), err)
	}
	t.Logf("refused in %v", time.Since(start))
}

func TestParseStopsListingAfterAHundredProblems(t *testing.T) {
	var b strings.Builder
	b.WriteString("pipelines:\n")
	for i := range 150 {
		fmt.Fprintf(&b, "  - {name: p%d, nope: 1}\n", i)
	}
	_, err := Parse([]byte(b.String()), env(nil))
	if err == nil {
		t.Fatal("Parse = nil; want 150 unknown keys")
	}
	// 150 unknown keys and, in the same pass, each pipeline's missing
	// source, rate and sink: 600 problems.
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 101 || lines[100] != "config: 500 more problems not shown" {
		t.Errorf("Parse gave %d lines ending %q; want 100 problems and a line saying 500 more", len(lines), lines[len(lines)-1])
	}
}

func TestSecretKeysNamesEveryCredentialByItsKeyPath(t *testing.T) {
	src := `
admin: {token: '${TOKEN}'}
pipelines:
  - name: psp
    source:
      kafka: {brokers: [k:9092], topic: t, group: g, sasl: {mechanism: PLAIN, username: u, password: '${TOKEN}'}}
    rate: {limit: 50, shared: {redis: {addr: 'r:6379', password: '${TOKEN}'}, fallback_limit: 5}}
    sink:
      http: {url: "https://psp.example.com/notify?key=x", headers: {Authorization: '${TOKEN}', Content-Type: json}}
    dead_letter:
      nats: {url: "nats://u:p@n:4222", subject: dlq}
`
	cfg, err := Parse([]byte(src), env(map[string]string{"TOKEN": "0123456789abcdef-secret"}))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(cfg.SecretKeys(), " ")
	want := "admin.token pipelines[0].source.kafka.sasl.password pipelines[0].rate.shared.redis.password " +
		"pipelines[0].sink.http.url pipelines[0].sink.http.headers.Authorization pipelines[0].dead_letter.nats.url"
	if got != want {
		t.Errorf("SecretKeys() = %s; want %s", got, want)
	}
}

// A capacity above ten million, or a max_queue_time, retry.max_elapsed or
// retry.max_backoff above seven days, is refused with its key path, every
// one in the same pass; the bounds themselves are valid. (Unbounded, a
// capacity of 9.2e18 and a max_queue_time of 2562047h ran.)
func TestValidateRefusesACapacityAboveTenMillionAndWaitsAboveSevenDays(t *testing.T) {
	const url = `{url: "https://psp.example.com/notify"}`
	tests := []struct {
		name     string
		from, to string
		want     []string // nil when valid
	}{
		{"the issue's bucket", "rate: {limit: 50}", "rate: {limit: 50}\n    bucket: {capacity: 9223372036854775807, max_queue_time: 2562047h}", []string{
			"pipelines[0].bucket.capacity: must be at most 10000000, got 9223372036854775807",
			"pipelines[0].bucket.max_queue_time: must be at most 168h0m0s (7 days), got 2562047h0m0s",
		}},
		{"one above", "rate: {limit: 50}", "rate: {limit: 50}\n    bucket: {capacity: 10000001, max_queue_time: 168h0m0.000000001s}", []string{
			"pipelines[0].bucket.capacity: must be at most 10000000, got 10000001",
			"pipelines[0].bucket.max_queue_time: must be at most 168h0m0s (7 days), got 168h0m0.000000001s",
		}},
		{"the bounds", "rate: {limit: 50}", "rate: {limit: 50}\n    bucket: {capacity: 10000000, max_queue_time: 168h}", nil},
		{"retry", url, `{url: "https://psp.example.com/notify", retry: {max_backoff: 2562047h, max_elapsed: 8760h}}`, []string{
			"pipelines[0].sink.http.retry.max_backoff: must be at most 168h0m0s (7 days), got 2562047h0m0s",
			"pipelines[0].sink.http.retry.max_elapsed: must be at most 168h0m0s (7 days), got 8760h0m0s",
		}},
		{"retry at the bounds", url, `{url: "https://psp.example.com/notify", retry: {max_backoff: 168h, max_elapsed: 10080m}}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(minimal, tt.from, tt.to, 1)
			if src == minimal {
				t.Fatalf("%q not in the minimal config", tt.from)
			}
			_, err := Parse([]byte(src), env(nil))
			if tt.want == nil {
				if err != nil {
					t.Errorf("Parse(%s) = %v; want nil", tt.to, err)
				}
				return
			}
			got := fmt.Sprint(err)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("Parse(%s) = %v; want %q among the problems", tt.to, got, w)
				}
			}
		})
	}
}
