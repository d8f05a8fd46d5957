package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/shaper-dev/shaper/internal/childtest"
)

// TestMain doubles as the shaper binary: with SHAPER_TEST_MAIN=1 the test
// binary runs realMain on its arguments, so tests can start real `shaper run`
// child processes and signal them without a separate build. The variables
// that flags fall back to are cleared first, so that a developer's own
// settings do not change what the tests see; a test sets them itself.
func TestMain(m *testing.M) {
	if os.Getenv("SHAPER_TEST_MAIN") == "1" {
		os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	for _, e := range envFallbacks {
		os.Unsetenv(e.env)
	}
	goleak.VerifyTestMain(m)
}

func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = realMain(args, &out, &errb)
	return code, out.String(), errb.String()
}

// repoRoot is the repository root, seen from this package's directory (where
// go test runs).
const repoRoot = "../.."

const validConfig = `
pipelines:
  - name: psp
    source:
      nats: {url: "nats://127.0.0.1:4222", subject: callbacks.psp, stream: CALLBACKS}
    bucket: {capacity: 100, max_queue_time: 5s}
    rate: {limit: 50}
    sink:
      http: {url: "https://psp.example.com/notify", timeout: 2s}
`

func TestValidateAcceptsAValidConfig(t *testing.T) {
	code, out, errs := runMain(t, "validate", "--config", childtest.WriteConfig(t, validConfig))
	if code != exitOK || !strings.Contains(out, "ok (1 pipelines)") {
		t.Errorf("validate = %d, %q, %q; want 0 and ok", code, out, errs)
	}
}

// validate takes several files at once, checks each and reports every
// problem of every one with its place: CI checks a directory of configs in
// one call.
func TestValidateChecksSeveralFilesAndReportsEachOne(t *testing.T) {
	good := childtest.WriteConfig(t, validConfig)
	bad := childtest.WriteConfig(t, strings.Replace(validConfig, "rate: {limit: 50}", "rate: {limt: 50}", 1))
	code, out, errs := runMain(t, "validate", "--config", good, "--config", bad, "--config", good)
	if code != exitUsage {
		t.Errorf("validate good bad good = %d; want %d", code, exitUsage)
	}
	if strings.Count(out, good+": ok (1 pipelines)") != 2 {
		t.Errorf("stdout = %q; want the good file ok twice", out)
	}
	for _, want := range []string{bad + ":7:", "pipelines[0].rate.limt: unknown key", "pipelines[0].rate.limit: must be a number > 0"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
}

func TestValidateRejectsInvalidConfigsWithTheirKeyPaths(t *testing.T) {
	replace := func(old, new string) string {
		if !strings.Contains(validConfig, old) {
			t.Fatalf("validConfig lacks %q", old)
		}
		return strings.Replace(validConfig, old, new, 1)
	}
	tests := []struct {
		name string
		give string
		want []string
	}{
		{"no pipelines", "pipelines: []\n", []string{"pipelines: at least one pipeline is required"}},
		{"unknown key", replace("rate: {limit: 50}", "rate: {limit: 50, limt: 5}"), []string{"pipelines[0].rate.limt: unknown key"}},
		{"zero limit", replace("limit: 50", "limit: 0"), []string{"pipelines[0].rate.limit: must be a number > 0"}},
		{"negative limit", replace("limit: 50", "limit: -3"), []string{"pipelines[0].rate.limit: must be a number > 0"}},
		{"limit not a number", replace("limit: 50", "limit: fast"), []string{"pipelines[0].rate.limit: want a number"}},
		{"explicit zero burst", replace("{limit: 50}", "{limit: 50, mode: token, burst: 0}"), []string{"pipelines[0].rate.burst: must be >= 1"}},
		{"burst in leaky mode", replace("{limit: 50}", "{limit: 50, burst: 5}"), []string{"pipelines[0].rate.burst: leaky mode never bursts"}},
		{"unknown mode", replace("{limit: 50}", "{limit: 50, mode: sliding}"), []string{"pipelines[0].rate.mode: want leaky or token"}},
		{"bad duration", replace("max_queue_time: 5s", "max_queue_time: 5"), []string{"pipelines[0].bucket.max_queue_time: want a duration"}},
		{"negative capacity", replace("capacity: 100", "capacity: -1"), []string{"pipelines[0].bucket.capacity: must be >= 1"}},
		{"bad on_expire", replace("max_queue_time: 5s", "max_queue_time: 5s, on_expire: later"), []string{"pipelines[0].bucket.on_expire: want dead_letter, drop or deliver"}},
		{"no source", replace(`nats: {url: "nats://127.0.0.1:4222", subject: callbacks.psp, stream: CALLBACKS}`, "{}"), []string{"pipelines[0].source: exactly one of"}},
		{"bad nats url", replace("nats://127.0.0.1:4222", "http://127.0.0.1:4222"), []string{"pipelines[0].source.nats.url: want scheme nats"}},
		{"no sink", replace(`http: {url: "https://psp.example.com/notify", timeout: 2s}`, "{}"), []string{"pipelines[0].sink: exactly one of http, kafka or nats"}},
		{"sink url not http", replace("https://psp.example.com/notify", "psp.example.com/notify"), []string{"pipelines[0].sink.http.url: want an absolute http"}},
		{"negative timeout", replace("timeout: 2s", "timeout: -2s"), []string{"pipelines[0].sink.http.timeout: must be > 0"}},
		{"header injection", replace("timeout: 2s", `timeout: 2s, headers: {X-Evil: "a\r\nHost: b"}`), []string{"pipelines[0].sink.http.headers.X-Evil: value must not contain control characters (CR, LF, NUL...)"}},
		{"unset variable", replace("limit: 50", "limit: '${SHAPER_TEST_UNSET}'"), []string{"pipelines[0].rate.limit: environment variable SHAPER_TEST_UNSET is not set"}},
		{"duplicate names", validConfig + strings.TrimPrefix(validConfig, "\npipelines:\n"), []string{`pipelines[1].name: "psp" is already the name of pipelines[0]`}},
		{"dead letter without target", validConfig + "    dead_letter: {}\n", []string{"pipelines[0].dead_letter: exactly one of kafka or nats"}},
		{"bad admin listen", validConfig + "admin: {listen: 9090}\n", []string{"admin.listen: want host:port"}},
		{"admin on every interface without a token", validConfig + "admin: {listen: \"0.0.0.0:9090\"}\n", []string{"admin.token: required: admin.listen \"0.0.0.0:9090\" listens on every interface"}},
		{"admin on another host without a token", validConfig + "admin: {listen: \"10.0.0.5:9090\"}\n", []string{"admin.token: required: admin.listen host \"10.0.0.5\" is not a loopback address"}},
		{"sink url credentials not echoed", replace("https://psp.example.com/notify", "ftp://user:hunter2@psp.example.com/notify?token=hunter2"), []string{"pipelines[0].sink.http.url: want an absolute http:// or https:// URL, got scheme \"ftp\""}},
		{"signing secret too short", replace("timeout: 2s", "timeout: 2s, signing: {secret: hunter2}"), []string{"pipelines[0].sink.http.signing.secret: must be at least 16 bytes, got 7"}},
		{"signing header taken", replace("timeout: 2s", "timeout: 2s, headers: {X-Sig: v}, signing: {scheme: shaper, secret: 0123456789abcdef, header: x-sig}"), []string{"pipelines[0].sink.http.signing.header: \"x-sig\" is also set in headers"}},
		{"sink tls on http", replace(`"https://psp.example.com/notify", timeout: 2s`, `"http://psp.example.com/notify", timeout: 2s, tls: {}`), []string{"pipelines[0].sink.http.tls: needs an https:// url"}},
		{"tls min_version 1.1", replace("timeout: 2s", "timeout: 2s, tls: {min_version: \"1.1\"}"), []string{"pipelines[0].sink.http.tls.min_version: want \"1.2\" or \"1.3\", got \"1.1\""}},
		{"kafka and nats at once", replace("    source:\n", "    source:\n      kafka: {brokers: [\"127.0.0.1:9092\"], topic: t, group: g}\n"), []string{"pipelines[0].source: exactly one of kafka or nats"}},
		{"kafka without brokers", kafkaSource(t, "brokers: [], topic: t, group: g"), []string{"pipelines[0].source.kafka.brokers: at least one host:port"}},
		{"kafka bad broker", kafkaSource(t, `brokers: ["localhost"], topic: t, group: g`), []string{"pipelines[0].source.kafka.brokers[0]: want host:port"}},
		{"kafka without group", kafkaSource(t, `brokers: ["127.0.0.1:9092"], topic: t`), []string{"pipelines[0].source.kafka.group: required"}},
		{"kafka bad topic", kafkaSource(t, `brokers: ["127.0.0.1:9092"], topic: "a/b", group: g`), []string{"pipelines[0].source.kafka.topic: want 1 to 249"}},
		{"kafka bad start", kafkaSource(t, `brokers: ["127.0.0.1:9092"], topic: t, group: g, start: middle`), []string{"pipelines[0].source.kafka.start: want earliest or latest"}},
		{"sasl without mechanism", kafkaSource(t, `brokers: ["127.0.0.1:9092"], topic: t, group: g, sasl: {username: u, password: p}`), []string{"pipelines[0].source.kafka.sasl.mechanism: required"}},
		{"sasl unknown mechanism", kafkaSource(t, `brokers: ["127.0.0.1:9092"], topic: t, group: g, sasl: {mechanism: GSSAPI, username: u, password: p}`), []string{"pipelines[0].source.kafka.sasl.mechanism: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"}},
		{"sasl without password", kafkaSource(t, `brokers: ["127.0.0.1:9092"], topic: t, group: g, sasl: {mechanism: PLAIN, username: u}`), []string{"pipelines[0].source.kafka.sasl.password: required"}},
		{"tls cert without key", kafkaSource(t, `brokers: ["127.0.0.1:9092"], topic: t, group: g, tls: {cert_file: /etc/hostname}`), []string{"pipelines[0].source.kafka.tls: cert_file and key_file go together"}},
		{"tls missing ca file", kafkaSource(t, `brokers: ["127.0.0.1:9092"], topic: t, group: g, tls: {ca_file: /nonexistent/ca.pem}`), []string{"pipelines[0].source.kafka.tls.ca_file: cannot read"}},
		{"kafka dead letter without topic", validConfig + "    dead_letter: {kafka: {brokers: [\"127.0.0.1:9092\"]}}\n", []string{"pipelines[0].dead_letter.kafka.topic: required"}},
		{"shared without redis address", replace("{limit: 50}", "{limit: 50, shared: {fallback_limit: 10}}"), []string{"pipelines[0].rate.shared.redis: exactly one of addr or addrs is required"}},
		{"shared without fallback", replace("{limit: 50}", `{limit: 50, shared: {redis: {addr: "127.0.0.1:6379"}}}`), []string{"pipelines[0].rate.shared.fallback_limit: must be > 0"}},
		{"shared fallback above limit", replace("{limit: 50}", `{limit: 50, shared: {redis: {addr: "127.0.0.1:6379"}, fallback_limit: 80}}`), []string{"pipelines[0].rate.shared.fallback_limit: must be <= rate.limit"}},
		{"shared bad redis addr", replace("{limit: 50}", `{limit: 50, shared: {redis: {addr: "redis"}, fallback_limit: 10}}`), []string{"pipelines[0].rate.shared.redis.addr: want host:port"}},
		{"shared addr and addrs", replace("{limit: 50}", `{limit: 50, shared: {redis: {addr: "a:1", addrs: ["b:1"]}, fallback_limit: 10}}`), []string{"pipelines[0].rate.shared.redis: exactly one of addr or addrs is allowed"}},
		{"shared cluster with db", replace("{limit: 50}", `{limit: 50, shared: {redis: {addrs: ["a:1", "b:1"], db: 2}, fallback_limit: 10}}`), []string{"pipelines[0].rate.shared.redis.db: must be 0 with a Cluster"}},
		{"shared master without sentinels", replace("{limit: 50}", `{limit: 50, shared: {redis: {addr: "a:1", master_name: m}, fallback_limit: 10}}`), []string{"pipelines[0].rate.shared.redis.master_name: needs addrs"}},
		{"shared negative timeout", replace("{limit: 50}", `{limit: 50, shared: {redis: {addr: "a:1"}, fallback_limit: 10, timeout: -1s}}`), []string{"pipelines[0].rate.shared.timeout: must be > 0"}},
		{"every problem at once", strings.NewReplacer("capacity: 100", "capacity: -1", "limit: 50", "limit: 0", "timeout: 2s", "timeout: -1s").Replace(validConfig),
			[]string{"pipelines[0].bucket.capacity", "pipelines[0].rate.limit", "pipelines[0].sink.http.timeout"}},
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := runMain(t, "validate", "--config", childtest.WriteConfig(t, tt.give))
			if code != exitUsage {
				t.Errorf("validate exit = %d; want %d (stderr %q)", code, exitUsage, errs)
			}
			if strings.Contains(errs, "hunter2") {
				t.Errorf("stderr shows a credential:\n%s", errs)
			}
			for _, w := range tt.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errs)
				}
			}
		})
	}
}

// kafkaSource returns validConfig with a Kafka source of the given flow
// mapping body instead of the NATS one.
func kafkaSource(t *testing.T, body string) string {
	t.Helper()
	old := `nats: {url: "nats://127.0.0.1:4222", subject: callbacks.psp, stream: CALLBACKS}`
	if !strings.Contains(validConfig, old) {
		t.Fatal("validConfig has no NATS source")
	}
	return strings.Replace(validConfig, old, "kafka: {"+body+"}", 1)
}

func TestExampleConfigsPassValidate(t *testing.T) {
	t.Setenv("SHAPER_ADMIN_TOKEN", "example-admin-token-0123")
	t.Setenv("PSP_API_TOKEN", "example-psp-token")
	t.Setenv("KAFKA_PASSWORD", "example-kafka-password")
	paths, err := filepath.Glob("../../configs/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no example configs found: %v", err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			if code, _, errs := runMain(t, "validate", "--config", path); code != exitOK {
				t.Errorf("validate %s = %d; want 0:\n%s", path, code, errs)
			}
		})
	}
}

func TestCommandLineUsageErrorsExitTwo(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "Usage:"},
		{"unknown command", []string{"launch"}, `unknown command "launch"`},
		{"missing config", []string{"run"}, "--config is required"},
		{"missing file", []string{"validate", "--config", "/nonexistent/shaper.yaml"}, "no such file"},
		{"bad log level", []string{"--log-level", "loud", "run", "--config", "x"}, "--log-level"},
		{"bad flag", []string{"demo", "--rate"}, "flag needs an argument"},
		{"bad demo messages", []string{"demo", "--messages", "0"}, "--messages must be >= 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := runMain(t, tt.args...)
			if code != exitUsage || !strings.Contains(errs, tt.want) {
				t.Errorf("shaper %v = %d, %q; want %d and %q", tt.args, code, errs, exitUsage, tt.want)
			}
		})
	}
}
