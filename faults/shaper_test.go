package faults_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is an io.Writer safe to read while a child process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// shaperProc is a real `shaper run --config FILE` child process.
type shaperProc struct {
	t      testing.TB
	name   string
	cmd    *exec.Cmd
	stderr *syncBuffer
	exited chan struct{}
	state  *os.ProcessState
	addr   string // the admin address, once known
}

var adminRE = regexp.MustCompile(`msg="shaper started".* admin=(\S+)`)

// startShaper starts `shaper run` on config. The process is killed, if it
// still runs, when the test ends; its log is shown if the test failed, and a
// data race it reported fails the test.
func startShaper(t testing.TB, name, config string) *shaperProc {
	t.Helper()
	cmd := exec.Command(shaperBin, "run", "--config", config)
	p := &shaperProc{t: t, name: name, cmd: cmd, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	cmd.Env = append(os.Environ(), "GORACE=halt_on_error=0")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start shaper: %v", err)
	}
	go func() {
		_ = cmd.Wait() // the exit status is read from ProcessState
		p.state = cmd.ProcessState
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		log := p.stderr.String()
		if strings.Contains(log, "WARNING: DATA RACE") {
			t.Errorf("shaper %s reported a data race:\n%s", name, tail(log, 20000))
		} else if t.Failed() {
			t.Logf("shaper %s log (tail):\n%s", name, tail(log, 6000))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// admin waits for the "shaper started" log line and returns the admin address.
func (p *shaperProc) admin() string {
	p.t.Helper()
	if p.addr != "" {
		return p.addr
	}
	var addr string
	waitFor(p.t, 60*time.Second, "shaper "+p.name+" to start its admin server", func() bool {
		if m := adminRE.FindStringSubmatch(p.stderr.String()); m != nil {
			addr = m[1]
			return true
		}
		if p.hasExited() {
			p.t.Fatalf("shaper %s exited before starting: %v\n%s", p.name, p.state, tail(p.stderr.String(), 4000))
		}
		return false
	})
	p.addr = addr
	return addr
}

func (p *shaperProc) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *shaperProc) kill() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	p.wait(30 * time.Second)
}

// signal sends sig (SIGTERM, SIGINT) without waiting.
func (p *shaperProc) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v to shaper %s: %v", sig, p.name, err)
	}
}

// wait waits for the process to exit and returns its exit code (-1 when a
// signal ended it).
func (p *shaperProc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.state.ExitCode()
	case <-time.After(timeout):
		p.t.Fatalf("shaper %s did not exit within %v; log:\n%s", p.name, timeout, tail(p.stderr.String(), 6000))
		return -2
	}
}

// stop drains the process with SIGTERM and requires exit code 0.
func (p *shaperProc) stop() {
	p.t.Helper()
	if p.hasExited() {
		p.t.Errorf("shaper %s had exited already: %v", p.name, p.state)
		return
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(60 * time.Second); code != 0 {
		p.t.Errorf("shaper %s exit code after SIGTERM = %d; want 0", p.name, code)
	}
}

var adminClient = &http.Client{Timeout: 5 * time.Second}

// get fetches path from the admin server.
func get(addr, path string) (int, string, error) {
	resp, err := adminClient.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// metrics is one scrape of /metrics: series ("name{labels}") to value.
type metrics map[string]float64

func scrape(addr string) (metrics, error) {
	resp, err := adminClient.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	m := metrics{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	return m, sc.Err()
}

// sum adds the series of metric name whose labels contain every one of
// labels (such as `outcome="delivered"`).
func (m metrics) sum(name string, labels ...string) float64 {
	var total float64
	for series, v := range m {
		n, rest, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(rest, l)
		}
		if ok {
			total += v
		}
	}
	return total
}

// waitFor polls cond every 20 ms until it holds, or fails the test after
// timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writeConfig writes a shaper config file and returns its path.
func writeConfig(t testing.TB, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "shaper.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// pipeline is the variable part of a one-pipeline config, each a YAML flow
// mapping body or block.
type pipeline struct {
	drain      time.Duration // shutdown.drain_timeout; 0: 5s
	source     string        // the value of source:, e.g. `{nats: {...}}`
	bucket     string        // the value of bucket:; "": {capacity: 1000, max_queue_time: 1m}
	rate       string        // the value of rate:
	sink       string        // the value of sink:
	deadLetter string        // the value of dead_letter:, or "" for none
}

func (p pipeline) yaml() string {
	if p.drain == 0 {
		p.drain = 5 * time.Second
	}
	if p.bucket == "" {
		p.bucket = "{capacity: 1000, max_queue_time: 1m}"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "admin: {listen: \"127.0.0.1:0\"}\nshutdown: {drain_timeout: %s}\npipelines:\n  - name: faults\n", p.drain)
	fmt.Fprintf(&b, "    source: %s\n    bucket: %s\n    rate: %s\n    sink: %s\n", p.source, p.bucket, p.rate, p.sink)
	if p.deadLetter != "" {
		fmt.Fprintf(&b, "    dead_letter: %s\n", p.deadLetter)
	}
	return b.String()
}

// jitter returns a random duration in [lo, hi).
func jitter(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rand.Int64N(int64(hi-lo)))
}
