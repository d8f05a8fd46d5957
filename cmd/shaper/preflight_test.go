package main

import (
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/freeport"
	"github.com/shaper-dev/shaper/internal/kafkatest"
	"github.com/shaper-dev/shaper/internal/natstest"
	"github.com/shaper-dev/shaper/internal/redistest"
)

// preflightServers are real servers for run --dry-run to reach: Kafka
// (kfake, topics callbacks, smooth and dlq; it would create a topic a
// metadata request asks it to), NATS with streams CALLBACKS (3 messages)
// and DLQ, Redis, and an HTTPS sink whose CA is in caFile and which counts
// the requests it gets.
type preflightServers struct {
	kafka, nats, redis string
	https              *httptest.Server
	caFile             string
	requests           atomic.Int64
}

func startPreflightServers(t *testing.T) *preflightServers {
	t.Helper()
	s := &preflightServers{}
	k := kafkatest.Start(t, kfake.SeedTopics(4, "callbacks"), kfake.SeedTopics(2, "smooth"), kfake.SeedTopics(1, "dlq"), kfake.AllowAutoTopicCreation())
	s.kafka = k.Addr
	s.nats = natstest.Start(t).ClientURL()
	natstest.Stream(t, s.nats, "CALLBACKS", "callbacks.>")
	natstest.Stream(t, s.nats, "DLQ", "dlq.>")
	natstest.Publish(t, s.nats, "callbacks.psp", 3)
	s.redis = redistest.Start(t).Addr
	s.https = httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { s.requests.Add(1) }))
	s.https.Config.ErrorLog = log.New(io.Discard, "", 0) // a refused handshake is what one test wants
	s.https.StartTLS()
	t.Cleanup(s.https.Close)
	s.caFile = filepath.Join(t.TempDir(), "ca.pem")
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.https.Certificate().Raw})
	if err := os.WriteFile(s.caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// pipelineYAML is one entry of pipelines: with source, sink and, when not
// "", rate.shared and dead_letter (each a YAML flow mapping).
func pipelineYAML(name, source, shared, sink, deadLetter string) string {
	rate := "{limit: 50}"
	if shared != "" {
		rate = fmt.Sprintf("{limit: 50, shared: %s}", shared)
	}
	y := fmt.Sprintf("  - name: %s\n    source: %s\n    rate: %s\n    sink: %s\n", name, source, rate, sink)
	if deadLetter != "" {
		y += "    dead_letter: " + deadLetter + "\n"
	}
	return y
}

// hostOf is the host:port of a URL.
func hostOf(rawURL string) string { return hostPort(rawURL, "") }

// Every broker, Redis and sink host of a config that reaches them all is
// reported ok, one line each in config order, and the exit code is 0;
// url_from has no host to reach and says so; behind a proxy the proxy is
// what is reached; the HTTPS sink is reached with its tls.ca_file and
// gets no request.
func TestDryRunReportsEachReachablePartAndExitsZero(t *testing.T) {
	s := startPreflightServers(t)
	proxy := httptest.NewServer(http.NotFoundHandler()) // a real listener; only its TCP handshake is made
	defer proxy.Close()
	kafkaSrc := func(topic string) string {
		return fmt.Sprintf(`{kafka: {brokers: ["%s"], topic: %s, group: g}}`, s.kafka, topic)
	}
	kafkaPub := func(topic string) string { return fmt.Sprintf(`{kafka: {brokers: ["%s"], topic: %s}}`, s.kafka, topic) }
	config := "admin: {listen: \"127.0.0.1:0\"}\npipelines:\n" +
		pipelineYAML("psp", kafkaSrc("callbacks"), fmt.Sprintf(`{redis: {addr: "%s"}, fallback_limit: 10}`, s.redis),
			fmt.Sprintf(`{http: {url: "%s/notify?token=secret", tls: {ca_file: "%s"}}}`, s.https.URL, s.caFile),
			fmt.Sprintf(`{nats: {url: "%s", subject: dlq.psp}}`, s.nats)) +
		pipelineYAML("js", fmt.Sprintf(`{nats: {url: "%s", subject: callbacks.psp, stream: CALLBACKS}}`, s.nats), "",
			kafkaPub("smooth"), kafkaPub("dlq")) +
		pipelineYAML("proxied", fmt.Sprintf(`{nats: {url: "%s", subject: core.psp}}`, s.nats), "",
			fmt.Sprintf(`{http: {url: "https://psp.invalid/notify", proxy: "%s"}}`, proxy.URL), "") +
		pipelineYAML("merchants", fmt.Sprintf(`{nats: {url: "%s", subject: core.merchants}}`, s.nats), "",
			`{http: {url_from: "header:Notify-Url", allowed_hosts: [merchant.example]}}`, "")

	code, stdout, stderr := runMain(t, "run", "--dry-run", "--config", childtest.WriteConfig(t, config))
	if code != exitOK {
		t.Errorf("run --dry-run = %d; want 0\nstderr:\n%s", code, stderr)
	}
	nats, https := hostOf(s.nats), hostOf(s.https.URL)
	want := []string{
		"ok   kafka " + s.kafka + " (source of psp, topic callbacks: 4 partitions)",
		"ok   redis " + s.redis + " (rate.shared of psp, PING answered)",
		"ok   https " + https + " (sink of psp, TCP and TLS handshake (TLS 1.3); no request sent)",
		"ok   nats " + nats + " (dead_letter of psp, subject dlq.psp: stored by stream DLQ)",
		"ok   nats " + nats + " (source of js, stream CALLBACKS: 3 messages)",
		"ok   kafka " + s.kafka + " (sink of js, topic smooth: 2 partitions)",
		"ok   kafka " + s.kafka + " (dead_letter of js, topic dlq: 1 partition)",
		"ok   nats " + nats + " (source of proxied, core NATS subject core.psp)",
		"ok   proxy " + hostOf(proxy.URL) + " (sink of proxied, http proxy for https://psp.invalid:443: TCP handshake with the proxy; the sink behind it is not reached)",
		"ok   nats " + nats + " (source of merchants, core NATS subject core.merchants)",
		"skip http url_from header:Notify-Url (sink of merchants): no fixed host to reach: each message names its own, among allowed_hosts",
		"all 10 checks ok, 1 skipped",
	}
	if got := strings.Split(strings.TrimSpace(stdout), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("stdout:\n%s\nwant:\n%s", stdout, strings.Join(want, "\n"))
	}
	if n := s.requests.Load(); n != 0 {
		t.Errorf("the HTTPS sink got %d requests; want none (a handshake only)", n)
	}
	if strings.Contains(stdout, "secret") {
		t.Errorf("stdout shows the URL's query:\n%s", stdout)
	}
}

// Each part that cannot be reached, or lacks what the config names, is a
// FAIL line saying why, the others are still checked, and the exit code
// is 1. A metadata request for a missing topic does not create it, even
// on a broker that would.
func TestDryRunReportsEachFailureAndExitsOne(t *testing.T) {
	s := startPreflightServers(t)
	closed := freeport.Addr(t) // nothing listens there
	config := "admin: {listen: \"127.0.0.1:0\"}\npipelines:\n" +
		pipelineYAML("psp", fmt.Sprintf(`{kafka: {brokers: ["%s", "%s"], topic: nope, group: g}}`, closed, s.kafka),
			fmt.Sprintf(`{redis: {addr: "%s"}, fallback_limit: 10}`, closed),
			fmt.Sprintf(`{http: {url: "%s/notify"}}`, s.https.URL), // no ca_file: the test CA is not trusted
			fmt.Sprintf(`{nats: {url: "nats://%s", subject: dlq.psp}}`, closed)) +
		pipelineYAML("js", fmt.Sprintf(`{nats: {url: "%s", subject: callbacks.psp, stream: NOPE}}`, s.nats), "",
			fmt.Sprintf(`{http: {url: "https://%s/notify", tls: {ca_file: "%s"}}}`, closed, s.caFile), "")

	code, stdout, stderr := runMain(t, "run", "--dry-run", "--config", childtest.WriteConfig(t, config))
	if code != exitRuntime {
		t.Errorf("run --dry-run = %d; want %d", code, exitRuntime)
	}
	refused := regexp.QuoteMeta(closed) + `: connect: connection refused`
	want := []string{
		`FAIL kafka ` + regexp.QuoteMeta(closed) + ` \(source of psp\): dial tcp ` + refused,
		`FAIL kafka ` + regexp.QuoteMeta(s.kafka) + ` \(source of psp\): topic nope: .*Unknown Topic Or Partition.*`,
		`FAIL redis ` + regexp.QuoteMeta(closed) + ` \(rate.shared of psp\): dial tcp ` + refused,
		`FAIL https ` + regexp.QuoteMeta(hostOf(s.https.URL)) + ` \(sink of psp\): tls: failed to verify certificate: x509: certificate signed by unknown authority`,
		`FAIL nats ` + regexp.QuoteMeta(closed) + ` \(dead_letter of psp\): dial tcp ` + refused,
		`FAIL nats ` + regexp.QuoteMeta(hostOf(s.nats)) + ` \(source of js\): stream NOPE not found.*`,
		`FAIL https ` + regexp.QuoteMeta(closed) + ` \(sink of js\): dial tcp ` + refused,
	}
	got := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(got) != len(want) {
		t.Errorf("stdout has %d lines; want %d:\n%s", len(got), len(want), stdout)
	}
	for i := range min(len(got), len(want)) {
		if !regexp.MustCompile("^" + want[i] + "$").MatchString(got[i]) {
			t.Errorf("line %d = %q; want it to match %q", i+1, got[i], want[i])
		}
	}
	if !strings.Contains(stderr, "run --dry-run: 7 of 7 checks failed") {
		t.Errorf("stderr lacks the count of failures:\n%s", stderr)
	}

	// The broker was asked about topic nope and did not create it.
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.kafka))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	topic := kmsg.NewMetadataRequestTopic()
	topic.Topic = kmsg.StringPtr("nope")
	req.Topics = append(req.Topics, topic)
	req.AllowAutoTopicCreation = false
	resp, err := req.RequestWith(t.Context(), cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode == 0 {
		t.Errorf("topic nope exists after the dry run (%+v): the metadata request created it", resp.Topics)
	}
}
