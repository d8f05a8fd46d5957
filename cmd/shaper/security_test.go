package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/kafkaconn"
	"github.com/shaper-dev/shaper/internal/kafkatest"
	"github.com/shaper-dev/shaper/internal/natstest"
	"github.com/shaper-dev/shaper/internal/redistest"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/internal/tuning"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/sinks"
	"github.com/shaper-dev/shaper/webhook"
)

// newSecret returns a value no test output would hold by chance: a name,
// a dash and 16 random hex digits.
func newSecret(t *testing.T, name string) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return name + "-" + hex.EncodeToString(b)
}

// echoSink is the HTTP receiver of the leak test. It verifies every
// request's signature and credentials, and answers by the payload's prefix:
// ok 204; reject 400; flaky 503 once, then 204; fail 500 always; slow
// answers only past the attempt timeout. Every error body echoes the request's
// credentials back, as careless receivers do.
type echoSink struct {
	secret, bearer, apiKey string
	badRequests            atomic.Int64 // requests that failed verification
	delivered              atomic.Int64
	mu                     sync.Mutex
	seen                   map[string]int // attempts by payload
	signatures             []string       // every v1 received
}

func (s *echoSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	verifier, err := webhook.New(webhook.Config{Secret: s.secret}) // signing.scheme defaults to standard
	if err != nil || verifier.Verify(r.Header, body, time.Minute, time.Now()) != nil ||
		r.Header.Get("Authorization") != "Bearer "+s.bearer || r.Header.Get("X-Api-Key") != s.apiKey {
		s.badRequests.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	v1, _ := strings.CutPrefix(r.Header.Get("Webhook-Signature"), "v1,")
	s.mu.Lock()
	s.seen[string(body)]++
	attempt := s.seen[string(body)]
	s.signatures = append(s.signatures, v1)
	s.mu.Unlock()
	echo := fmt.Sprintf("refused %s: authorization=%q api-key=%q signature=%q url=%q",
		body, r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), r.Header.Get("Webhook-Signature"), r.URL.String())
	kind, _, _ := strings.Cut(string(body), "-")
	switch {
	case kind == "reject":
		http.Error(w, echo, http.StatusBadRequest)
	case kind == "flaky" && attempt == 1:
		http.Error(w, echo, http.StatusServiceUnavailable)
	case kind == "fail":
		http.Error(w, echo, http.StatusInternalServerError)
	case kind == "slow":
		select { // past the client's timeout, or until it gives up
		case <-time.After(600 * time.Millisecond):
		case <-r.Context().Done():
		}
		http.Error(w, echo, http.StatusGatewayTimeout)
	default:
		s.delivered.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}
}

const leakConfig = `
admin:
  listen: 127.0.0.1:0
  token: ${SHAPER_ADMIN_TOKEN}
shutdown: {drain_timeout: 2s}
pipelines:
  - name: psp
    source:
      nats: {url: "nats://shaper:${NATS_PASSWORD}@%[1]s", subject: callbacks.psp, stream: CALLBACKS}
    bucket: {capacity: 100, max_queue_time: 1m}
    rate:
      limit: 100
      shared:
        redis: {addr: "%[2]s", password: "${REDIS_PASSWORD}"}
        fallback_limit: 50
        timeout: 200ms
    sink:
      http: &sink
        url: "%[3]s/hook/${SINK_PATH_TOKEN}?token=${SINK_QUERY_TOKEN}"
        headers: {Authorization: "Bearer ${PSP_TOKEN}", X-Api-Key: "${API_KEY}", Content-Type: text/plain}
        signing: {secret: "${SIGNING_SECRET}"}
        timeout: 300ms
        max_in_flight: 4
        retry: {max_attempts: 3, initial_backoff: 10ms, max_backoff: 50ms}
    dead_letter:
      nats: {url: "nats://shaper:${NATS_PASSWORD}@%[1]s", subject: dlq.psp}
  - name: kafka
    source:
      kafka:
        brokers: ["%[4]s"]
        topic: callbacks
        group: shaper-leak
        sasl: {mechanism: SCRAM-SHA-256, username: shaper, password: "${KAFKA_PASSWORD}"}
        session_timeout: 6s
        heartbeat_interval: 100ms
        rebalance_timeout: 2s
        max_wait: 200ms
    rate: {limit: 100}
    sink: {http: *sink}
    dead_letter:
      kafka:
        brokers: ["%[4]s"]
        topic: dlq
        sasl: {mechanism: SCRAM-SHA-256, username: shaper, password: "${KAFKA_PASSWORD}"}
  - name: kafka-wrong
    source:
      kafka:
        brokers: ["%[4]s"]
        topic: callbacks
        group: shaper-wrong
        sasl: {mechanism: SCRAM-SHA-256, username: shaper, password: "${KAFKA_WRONG_PASSWORD}"}
    rate:
      limit: 10
      shared:
        redis: {addr: "%[2]s", password: "${REDIS_WRONG_PASSWORD}"}
        fallback_limit: 5
    sink: {http: *sink}
  - name: nats-wrong
    source:
      nats: {url: "nats://shaper:${NATS_WRONG_PASSWORD}@%[1]s", subject: callbacks.core}
    rate: {limit: 10}
    sink: {http: *sink}
`

// badConfig holds secrets where validation looks: in URLs, addresses,
// names and a signing secret too short, with an admin port on every
// interface and an empty token.
const badConfig = `
admin: {listen: "0.0.0.0:9090", token: "${EMPTY}"}
pipelines:
  - name: "bad ${API_KEY}"
    source:
      nats: {url: "nats://shaper:${NATS_PASSWORD}@", subject: callbacks.psp, stream: CALLBACKS}
    rate:
      limit: 10
      shared:
        redis: {addr: "redis://:${REDIS_PASSWORD}@127.0.0.1:6379", password: "${REDIS_PASSWORD}"}
        fallback_limit: 5
    sink:
      http:
        url: "ftp://user:${PSP_TOKEN}@psp.example.com/hook/${SINK_PATH_TOKEN}?token=${SINK_QUERY_TOKEN}"
        headers: {Authorization: "Bearer ${PSP_TOKEN}\r\n", X-Api-Key: "${API_KEY}"}
        signing: {secret: "${SHORT_SECRET}"}
    dead_letter:
      kafka:
        brokers: ["${KAFKA_PASSWORD}"]
        topic: "${KAFKA_PASSWORD}/dlq"
        sasl: {mechanism: SCRAM-SHA-1, username: shaper, password: "${KAFKA_PASSWORD}"}
`

func TestSecretsNeverAppearInLogsErrorsAdminResponsesOrDeadLetters(t *testing.T) {
	names := []string{"SHAPER_ADMIN_TOKEN", "PSP_TOKEN", "API_KEY", "SIGNING_SECRET", "SHORT_SECRET", "REDIS_PASSWORD",
		"REDIS_WRONG_PASSWORD", "NATS_PASSWORD", "NATS_WRONG_PASSWORD", "KAFKA_PASSWORD", "KAFKA_WRONG_PASSWORD",
		"SINK_PATH_TOKEN", "SINK_QUERY_TOKEN"}
	secrets := map[string]string{}
	env := []string{"EMPTY="}
	for _, n := range names {
		secrets[n] = newSecret(t, strings.ToLower(n))
		env = append(env, n+"="+secrets[n])
	}
	secrets["SHORT_SECRET"] = secrets["SHORT_SECRET"][len(secrets["SHORT_SECRET"])-12:] // 12 bytes: too short to sign with
	env = append(env, "SHORT_SECRET="+secrets["SHORT_SECRET"])

	// Real servers, each behind its password.
	ns := natstest.StartWithPassword(t, "shaper", secrets["NATS_PASSWORD"])
	natsAddr := strings.TrimPrefix(ns.ClientURL(), "nats://")
	nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo("shaper", secrets["NATS_PASSWORD"]))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "CALLBACKS", Subjects: []string{"callbacks.psp"}}); err != nil {
		t.Fatal(err)
	}
	natsDead, err := nc.SubscribeSync("dlq.>")
	if err != nil {
		t.Fatal(err)
	}
	rds := redistest.Start(t, "--requirepass", secrets["REDIS_PASSWORD"])
	kc := kafkatest.Start(t, kfake.SeedTopics(1, "callbacks", "dlq"),
		kfake.EnableSASL(), kfake.Superuser(kafkaconn.SASLScramSHA256, "shaper", secrets["KAFKA_PASSWORD"]))
	broker := kc.Addr
	sink := &echoSink{secret: secrets["SIGNING_SECRET"], bearer: secrets["PSP_TOKEN"], apiKey: secrets["API_KEY"], seen: map[string]int{}}
	srv := httptest.NewServer(sink)
	defer srv.Close()

	config := childtest.WriteConfig(t, fmt.Sprintf(leakConfig, natsAddr, rds.Addr, srv.URL, broker))
	d := startShaper(t, env, "--log-level", "debug", "run", "--config", config)
	admin := "http://" + d.Admin()

	// Deliveries, rejections, retries, exhaustion and timeouts, from both
	// brokers.
	var payloads []string
	for i := range 10 {
		payloads = append(payloads, fmt.Sprintf("ok-%d", i))
	}
	payloads = append(payloads, "reject-1", "reject-2", "flaky-1", "flaky-2", "fail-1", "slow-1")
	for _, p := range payloads {
		if _, err := js.Publish(ctx, "callbacks.psp", []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Publish("callbacks.core", []byte("ok-core")); err != nil { // nobody authorized hears it
		t.Fatal(err)
	}
	produceWithSASL(t, ctx, broker, secrets["KAFKA_PASSWORD"], "ok-k1", "ok-k2", "reject-k1")

	var responses []string
	var get func(method, path, token, body string) string
	status := func() map[string]shaper.Status {
		var list []shaper.Status
		if err := json.Unmarshal([]byte(get("GET", "/v1/pipelines", "", "")), &list); err != nil {
			t.Fatalf("GET /v1/pipelines: %v", err)
		}
		byName := map[string]shaper.Status{}
		for _, st := range list {
			byName[st.Name] = st
		}
		return byName
	}
	get = func(method, path, token, body string) string {
		req, _ := http.NewRequestWithContext(ctx, method, admin+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		responses = append(responses, fmt.Sprintf("%s %s: %d %s\n%s", method, path, resp.StatusCode, resp.Header, b))
		return string(b)
	}
	// psp: 10 ok + 2 flaky delivered, 2 rejected + 1 exhausted + 1 timed
	// out dead-lettered; kafka: 2 delivered, 1 dead-lettered.
	testwait.For(t, 60*time.Second, "every outcome", func() bool {
		st := status()
		psp, k := st["psp"].Outcomes, st["kafka"].Outcomes
		return psp[shaper.OutcomeDelivered] == 12 && psp[shaper.OutcomeDeadLettered] == 4 &&
			k[shaper.OutcomeDelivered] == 2 && k[shaper.OutcomeDeadLettered] == 1
	})
	testwait.For(t, 30*time.Second, "kafka-wrong and nats-wrong not ready", func() bool {
		st := status()
		return strings.Contains(st["kafka-wrong"].NotReady, "SASL authentication failed") && st["nats-wrong"].NotReady != ""
	})

	// Redis goes away and comes back: the fallback and the recovery are
	// logged, and the client logs in again with its password.
	if st := status()["psp"]; st.Limiter != "shared" {
		t.Fatalf("psp limiter = %q; want shared", st.Limiter)
	}
	rds.Stop()
	for i := range 5 { // the limiter calls Redis when there is something to send
		if _, err := js.Publish(ctx, "callbacks.psp", []byte(fmt.Sprintf("ok-redis-down-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	testwait.For(t, 10*time.Second, "the fallback", func() bool { return status()["psp"].Limiter == "fallback" })
	rds.Restart()
	testwait.For(t, 20*time.Second, "the shared limit again", func() bool { return status()["psp"].Limiter == "shared" })

	for _, call := range []struct{ method, path, token, body string }{
		{"GET", "/readyz", "", ""},
		{"GET", "/healthz", "", ""},
		{"GET", "/metrics", "", ""},
		{"PUT", "/v1/pipelines/psp/rate", "", `{"limit": 80}`},
		{"PUT", "/v1/pipelines/psp/rate", "guess", `{"limit": 80}`},
		{"PUT", "/v1/pipelines/psp/rate", secrets["SHAPER_ADMIN_TOKEN"], `{"limit": 80, "token": "x"}`},
		{"PUT", "/v1/pipelines/psp/rate", secrets["SHAPER_ADMIN_TOKEN"], `{"limit": 80}`},
		{"GET", "/v1/pipelines", "", ""},
	} {
		get(call.method, call.path, call.token, call.body)
	}

	// A reload to a config full of secrets is refused, and says why.
	if err := os.WriteFile(config, []byte(badConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = d.Cmd.Process.Signal(syscall.SIGHUP)
	testwait.For(t, 10*time.Second, "the reload refused", func() bool { return strings.Contains(d.Stderr.String(), "reload refused") })
	d.StopWithin(30 * time.Second)

	// validate and run refuse the same config, printing every problem.
	bad := childtest.WriteConfig(t, badConfig)
	v := startShaper(t, env, "--log-level", "debug", "validate", "--config", bad)
	r := startShaper(t, env, "--log-level", "debug", "run", "--config", bad)
	for name, c := range map[string]*childtest.Process{"validate": v, "run": r} {
		if code := c.Wait(30 * time.Second); code != exitUsage {
			t.Errorf("%s of the bad config = %d; want %d", name, code, exitUsage)
		}
	}

	// The dead letters, with their Shaper-Error headers.
	var deadLetters []string
	for {
		m, err := natsDead.NextMsg(100 * time.Millisecond)
		if err != nil {
			break
		}
		deadLetters = append(deadLetters, fmt.Sprintf("nats %s: %v %s", m.Subject, m.Header, m.Data))
	}
	deadLetters = append(deadLetters, consumeWithSASL(t, kc, secrets["KAFKA_PASSWORD"], "dlq", 1)...)

	outputs := map[string]string{
		"run stderr": d.Stderr.String(), "run stdout": d.Stdout.String(),
		"validate stderr": v.Stderr.String(), "validate stdout": v.Stdout.String(),
		"run (bad config) stderr": r.Stderr.String(), "run (bad config) stdout": r.Stdout.String(),
		"admin responses": strings.Join(responses, "\n"), "dead letters": strings.Join(deadLetters, "\n"),
	}
	sink.mu.Lock()
	for i, v1 := range sink.signatures {
		secrets[fmt.Sprintf("signature %d", i)] = v1 // not a key, but replayable within the tolerance
	}
	sink.mu.Unlock()
	for where, text := range outputs {
		for name, secret := range secrets {
			// The random part alone: a secret cut short or quoted still shows.
			if mark := secret[len(secret)-12:]; strings.Contains(text, mark) {
				i := strings.Index(text, mark)
				t.Errorf("%s shows %s: ...%s...", where, name, text[max(0, i-200):min(len(text), i+100)])
			}
		}
	}

	// The test saw what it meant to: every path above was taken.
	for where, wants := range map[string][]string{
		"run stderr": {"attempt failed; retrying", "message dead-lettered", "reason=rejected", "reason=exhausted",
			"pipeline=psp key=shaper:psp redis=" + rds.Addr + " fallback_limit=50", "redis answers again", "WRONGPASS",
			"SASL", "nats: server not reachable", "reload refused", "[redacted]", "level=DEBUG"},
		"validate stderr": {"admin.token: required", "pipelines[0].sink.http.url: want an absolute http:// or https:// URL, got scheme \"ftp\"",
			"pipelines[0].sink.http.signing.secret: must be at least 16 bytes", "pipelines[0].name:",
			"pipelines[0].source.nats.url:", "pipelines[0].rate.shared.redis.addr:", "pipelines[0].dead_letter.kafka.topic:",
			"pipelines[0].sink.http.headers.Authorization: value must not contain control characters (CR, LF, NUL...)"},
		"admin responses": {"PUT /v1/pipelines/psp/rate: 401", "PUT /v1/pipelines/psp/rate: 200", "shaper_requests_total"},
		"dead letters":    {"Shaper-Error", "[redacted]"},
	} {
		for _, want := range wants {
			if !strings.Contains(outputs[where], want) {
				t.Errorf("%s lacks %q: the test did not exercise what it checks", where, want)
			}
		}
	}
	if n := sink.badRequests.Load(); n != 0 {
		t.Errorf("the receiver refused %d requests whose signature or credentials did not verify", n)
	}
	if t.Failed() || os.Getenv("LEAK_DEBUG") != "" {
		t.Logf("run stderr:\n%s\nvalidate stderr:\n%s", outputs["run stderr"], outputs["validate stderr"])
	}
}

// produceWithSASL writes payloads to topic callbacks, authenticating as
// shaper with SCRAM-SHA-256.
func produceWithSASL(t *testing.T, ctx context.Context, broker, password string, payloads ...string) {
	t.Helper()
	tr, err := kafkaconn.Transport(kafkaconn.Config{Brokers: []string{broker},
		SASL: &kafkaconn.SASLConfig{Mechanism: kafkaconn.SASLScramSHA256, Username: "shaper", Password: password}}, "leak-test")
	if err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(broker), Topic: "callbacks", Transport: tr, RequiredAcks: kafka.RequireAll, BatchTimeout: 5 * time.Millisecond}
	msgs := make([]kafka.Message, len(payloads))
	for i, p := range payloads {
		msgs[i] = kafka.Message{Value: []byte(p)}
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// consumeWithSASL reads n records of topic from the start, and returns
// their headers and values as text.
func consumeWithSASL(t *testing.T, kc *kafkatest.Cluster, password, topic string, n int) []string {
	t.Helper()
	cl := kc.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SASL(scram.Auth{User: "shaper", Pass: password}.AsSha256Mechanism()))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var out []string
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records from %s", len(out), n, topic)
		}
		fs.EachRecord(func(r *kgo.Record) {
			var hs []string
			for _, h := range r.Headers {
				hs = append(hs, h.Key+"="+string(h.Value))
			}
			out = append(out, fmt.Sprintf("kafka %s: %v %s", topic, hs, r.Value))
		})
	}
	return out
}

func TestPlainHTTPSinkToAnotherHostLogsAWarningAtStartup(t *testing.T) {
	tests := []struct {
		url  string
		warn bool
	}{
		{"http://psp.example.com/hook/path-token?token=query-token", true},
		{"http://10.0.0.7:8080/hook", true},
		{"http://[2001:db8::1]/hook", true},
		{"http://127.0.0.1:8080/hook", false},
		{"http://localhost/hook", false},
		{"http://[::1]:8080/hook", false},
		{"https://psp.example.com/hook", false},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			s, err := buildSink(config.Sink{HTTP: &sinks.HTTPConfig{URL: tt.url, MaxBodyBytes: 1}}, tuning.All, "test", log)
			if err != nil {
				t.Fatalf("buildSink(%s) = %v", tt.url, err)
			}
			_ = s.Close(context.Background())
			warned := strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "plain http://")
			if warned != tt.warn {
				t.Errorf("buildSink(%s) logged %q; want a warning: %v", tt.url, logs.String(), tt.warn)
			}
			if strings.Contains(logs.String(), "token") {
				t.Errorf("the warning %q shows the URL's path or query", logs.String())
			}
		})
	}
}
