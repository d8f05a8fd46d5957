package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/natstest"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
)

// startJetStream starts an embedded nats-server with a stream holding n messages.
func startJetStream(t *testing.T, n int) string {
	url := natstest.Start(t).ClientURL()
	natstest.Stream(t, url, "CALLBACKS", "callbacks.>")
	natstest.Publish(t, url, "callbacks.psp", n)
	return url
}

// waitAcked waits until the durable consumer shaper-psp of startJetStream's
// stream at natsURL has every message acked: from then on nothing can be
// delivered again, so a duplicate has shown.
func waitAcked(t *testing.T, natsURL string) {
	t.Helper()
	testwait.For(t, 30*time.Second, "every message acked", func() bool {
		return natstest.Acked(t, natsURL, "CALLBACKS", "shaper-psp")
	})
}

// startChild runs `shaper run --config config` as a child process.
func startChild(t testing.TB, config string) *childtest.Process {
	t.Helper()
	return startShaper(t, nil, "run", "--config", config)
}

// startShaper runs the shaper binary, which is this test binary (see
// TestMain), with args and env added to the test's environment.
func startShaper(t testing.TB, env []string, args ...string) *childtest.Process {
	t.Helper()
	return childtest.Start(t, childtest.Config{Bin: os.Args[0], Args: args, Env: append([]string{"SHAPER_TEST_MAIN=1"}, env...)})
}

// putRate sets pipeline psp's rate.limit to limit through the admin API
// at admin, which token guards.
func putRate(t *testing.T, admin, token string, limit int) {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPut, "http://"+admin+"/v1/pipelines/psp/rate",
		strings.NewReader(fmt.Sprintf(`{"limit": %d}`, limit)))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT rate %d = %d; want 200", limit, resp.StatusCode)
	}
}

// natsRun is startJetStream's stream of n messages, a sink that answers
// 200, and the config file of runConfig between them; it returns the
// config's text too, for a test that rewrites it.
func natsRun(t *testing.T, n, limit int, drain time.Duration) (sink *sinktest.Sink, config, text string) {
	t.Helper()
	natsURL := startJetStream(t, n)
	sink = sinktest.Start(t, sinktest.OK)
	text = runConfig(natsURL, sink.URL, limit, drain)
	return sink, childtest.WriteConfig(t, text), text
}

// runConfig is pipeline psp from startJetStream's stream to the sink at
// sinkURL at limit/s.
func runConfig(natsURL, sinkURL string, limit int, drain time.Duration) string {
	return childtest.Pipeline{
		Drain:  drain,
		Source: natsSource(natsURL),
		Rate:   fmt.Sprintf("{limit: %d}", limit),
		Sink:   httpSink(sinkURL, 4),
	}.YAML()
}

// natsSource is the source block for startJetStream's stream, as durable
// shaper-psp.
func natsSource(natsURL string) string {
	return fmt.Sprintf(`{nats: {url: "%s", subject: callbacks.psp, stream: CALLBACKS, durable: shaper-psp}}`, natsURL)
}

// httpSink is the sink block for the HTTP sink at url.
func httpSink(url string, inFlight int) string {
	return fmt.Sprintf(`{http: {url: "%s", max_in_flight: %d}}`, url, inFlight)
}

func TestSIGTERMDrainLosesNothingAndARestartDeliversExactlyTheRest(t *testing.T) {
	const n = 150
	natsURL := startJetStream(t, n)
	sink := sinktest.Start(t, sinktest.OK)
	config := childtest.WriteConfig(t, runConfig(natsURL, sink.URL, 50, time.Second))

	first := startChild(t, config)
	testwait.For(t, 30*time.Second, "30 deliveries", func() bool { u, _ := sink.Counts(); return u >= 30 })
	first.Signal(syscall.SIGTERM)
	signalled := time.Now()
	if code := first.Wait(15 * time.Second); code != exitOK {
		t.Fatalf("exit code after SIGTERM = %d; want 0; stderr:\n%s", code, first.Stderr)
	}
	// drain_timeout 1s, plus closing; generous for a loaded machine.
	if took := time.Since(signalled); took > 5*time.Second {
		t.Errorf("drain took %v; want about drain_timeout (1s)", took)
	}
	delivered, _ := sink.Counts()
	if delivered >= n {
		t.Fatalf("the first run delivered all %d; the test needs a remainder", n)
	}
	if !strings.Contains(first.Stderr.String(), "nacked unfinished messages") {
		t.Errorf("stderr does not report nacking the unfinished messages:\n%s", first.Stderr)
	}

	second := startChild(t, config)
	testwait.For(t, 30*time.Second, "every message delivered", func() bool { u, _ := sink.Counts(); return u == n })
	waitAcked(t, natsURL)
	second.StopWithin(15 * time.Second)
	unique, total := sink.Counts()
	if unique != n || total != n {
		t.Errorf("delivered %d unique in %d requests (first run %d); want exactly %d, no duplicates: %v",
			unique, total, delivered, n, sink.Duplicates())
	}
}

// A second SIGTERM 1.5 s after the first, during a drain that would take
// ten seconds, stops at once (exit 1), and a restart delivers the rest.
func TestASecondSignalForcesExitAndLosesNothing(t *testing.T) {
	const n = 100
	sink, config, _ := natsRun(t, n, 10, time.Minute)

	first := startChild(t, config)
	testwait.For(t, 30*time.Second, "5 deliveries", func() bool { u, _ := sink.Counts(); return u >= 5 })
	first.Signal(syscall.SIGTERM)
	time.Sleep(1500 * time.Millisecond) // past forceGap
	if first.Exited() {
		t.Fatalf("shaper exited 1.5s into a drain of about 10s")
	}
	first.Signal(syscall.SIGTERM)
	forced := time.Now()
	code := first.Wait(15 * time.Second)
	if took := time.Since(forced); took > 5*time.Second {
		t.Errorf("forced exit took %v; want well under drain_timeout (1m)", took)
	}
	if code != exitRuntime {
		t.Errorf("exit code after a second signal = %d; want %d (not a graceful drain)", code, exitRuntime)
	}

	startChild(t, config)
	testwait.For(t, 60*time.Second, "every message delivered after the restart", func() bool { u, _ := sink.Counts(); return u == n })
}
