package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/logtest"
	"github.com/shaper-dev/shaper/internal/natstest"
	"github.com/shaper-dev/shaper/internal/testwait"
)

// sinkLog is a real HTTP sink that counts requests per Idempotency-Key and
// keeps their arrival times.
type sinkLog struct {
	mu    sync.Mutex
	byKey map[string]int
	total int
	times []time.Time
	last  http.Header // the headers of the latest request
}

func newSinkLog(t testing.TB) (*sinkLog, *httptest.Server) {
	s := &sinkLog{byKey: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.byKey[r.Header.Get("Idempotency-Key")]++
		s.total++
		s.times = append(s.times, time.Now())
		s.last = r.Header.Clone()
		s.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return s, srv
}

func (s *sinkLog) counts() (unique, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byKey), s.total
}

// header returns a header of the latest request.
func (s *sinkLog) header(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last.Get(name)
}

// between counts the requests that arrived in [from, to).
func (s *sinkLog) between(from, to time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, at := range s.times {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return n
}

func (s *sinkLog) duplicates() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, n := range s.byKey {
		if n > 1 {
			out = append(out, fmt.Sprintf("%s×%d", k, n))
		}
	}
	return out
}

// startJetStream starts an embedded nats-server with a stream holding n messages.
func startJetStream(t *testing.T, n int) string {
	url := natstest.Start(t).ClientURL()
	natstest.Stream(t, url, "CALLBACKS", "callbacks.>")
	natstest.Publish(t, url, "callbacks.psp", n)
	return url
}

// child is a real `shaper` child process: the test binary re-executed (see
// TestMain). cmd and stderr are its command and its log.
type child struct {
	*childtest.Process
	cmd    *exec.Cmd
	stderr *logtest.Buffer
}

func startChild(t testing.TB, config string) *child {
	t.Helper()
	return startChildArgs(t, "run", "--config", config)
}

// startChildArgs starts the shaper binary with args.
func startChildArgs(t testing.TB, args ...string) *child {
	t.Helper()
	p := childtest.Start(t, childtest.Config{Bin: os.Args[0], Args: args, Env: []string{"SHAPER_TEST_MAIN=1"}})
	return &child{Process: p, cmd: p.Cmd, stderr: p.Stderr}
}

// wait waits for the child to exit and returns its exit code.
func (c *child) wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	return c.Wait(timeout)
}

func runConfig(natsURL, sinkURL string, limit int, drain time.Duration) string {
	return fmt.Sprintf(`
admin: {listen: "127.0.0.1:0"}
shutdown: {drain_timeout: %s}
pipelines:
  - name: psp
    source:
      nats: {url: "%s", subject: callbacks.psp, stream: CALLBACKS, durable: shaper-psp}
    bucket: {capacity: 1000, max_queue_time: 1m}
    rate: {limit: %d}
    sink:
      http: {url: "%s", max_in_flight: 4}
`, drain, natsURL, limit, sinkURL)
}

// waitUntil polls cond until it holds, failing the test after timeout.
var waitUntil = testwait.For

func TestSIGTERMDrainLosesNothingAndARestartDeliversExactlyTheRest(t *testing.T) {
	const n = 150
	natsURL := startJetStream(t, n)
	sink, srv := newSinkLog(t)
	config := writeConfig(t, runConfig(natsURL, srv.URL, 50, time.Second))

	first := startChild(t, config)
	waitUntil(t, 30*time.Second, "30 deliveries", func() bool { u, _ := sink.counts(); return u >= 30 })
	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	if code := first.wait(t, 15*time.Second); code != exitOK {
		t.Fatalf("exit code after SIGTERM = %d; want 0; stderr:\n%s", code, first.stderr)
	}
	// drain_timeout 1s, plus closing; generous for a loaded machine.
	if took := time.Since(signalled); took > 5*time.Second {
		t.Errorf("drain took %v; want about drain_timeout (1s)", took)
	}
	delivered, _ := sink.counts()
	if delivered >= n {
		t.Fatalf("the first run delivered all %d; the test needs a remainder", n)
	}
	if !strings.Contains(first.stderr.String(), "nacked unfinished messages") {
		t.Errorf("stderr does not report nacking the unfinished messages:\n%s", first.stderr)
	}

	second := startChild(t, config)
	waitUntil(t, 30*time.Second, "every message delivered", func() bool { u, _ := sink.counts(); return u == n })
	time.Sleep(300 * time.Millisecond) // room for a duplicate to show
	_ = second.cmd.Process.Signal(syscall.SIGTERM)
	if code := second.wait(t, 15*time.Second); code != exitOK {
		t.Errorf("second run exit code = %d; want 0; stderr:\n%s", code, second.stderr)
	}
	unique, total := sink.counts()
	if unique != n || total != n {
		t.Errorf("delivered %d unique in %d requests (first run %d); want exactly %d, no duplicates: %v",
			unique, total, delivered, n, sink.duplicates())
	}
}

func TestASecondSignalForcesExitAndLosesNothing(t *testing.T) {
	const n = 100
	natsURL := startJetStream(t, n)
	sink, srv := newSinkLog(t)
	config := writeConfig(t, runConfig(natsURL, srv.URL, 10, time.Minute))

	first := startChild(t, config)
	waitUntil(t, 30*time.Second, "5 deliveries", func() bool { u, _ := sink.counts(); return u >= 5 })
	_ = first.cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(200 * time.Millisecond)
	_ = first.cmd.Process.Signal(syscall.SIGTERM)
	forced := time.Now()
	code := first.wait(t, 15*time.Second)
	if took := time.Since(forced); took > 5*time.Second {
		t.Errorf("forced exit took %v; want well under drain_timeout (1m)", took)
	}
	if code != exitRuntime {
		t.Errorf("exit code after a second signal = %d; want %d (not a graceful drain)", code, exitRuntime)
	}

	startChild(t, config)
	waitUntil(t, 60*time.Second, "every message delivered after the restart", func() bool { u, _ := sink.counts(); return u == n })
}
