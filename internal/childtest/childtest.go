// Package childtest runs a shaper binary as a child process for tests: it
// builds the binary, writes its config, starts it, keeps its output, finds its admin address in
// its log, signals it, waits for it, and scrapes its /metrics. A test drives
// the real daemon the way an operator would, signals and all.
package childtest

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/logtest"
	"github.com/shaper-dev/shaper/internal/testwait"
)

// Config says which binary to run, how, and under what name.
type Config struct {
	// Name tells processes apart in failure messages, such as "a" or
	// "replica 2"; "" is "shaper".
	Name string
	// Bin is the shaper binary (a test binary that runs realMain when Env
	// asks it to will do).
	Bin string
	// Args are its arguments, such as "run", "--config", path.
	Args []string
	// Env is added to the test's environment.
	Env []string
}

// Process is a running (or exited) shaper child process. Its Stdout and
// Stderr keep everything it wrote.
type Process struct {
	Cmd            *exec.Cmd
	Stdout, Stderr *logtest.Buffer

	t      testing.TB
	name   string
	exited chan struct{}
	state  *os.ProcessState
	addr   string // the admin address, once known
}

// Start starts the child. When the test ends it is killed if it still
// runs; its log is shown if the test failed, and a data race it reported
// (a -race build) fails the test.
func Start(t testing.TB, c Config) *Process {
	t.Helper()
	if c.Name == "" {
		c.Name = "shaper"
	}
	cmd := exec.Command(c.Bin, c.Args...)
	cmd.Env = append(os.Environ(), c.Env...)
	p := &Process{Cmd: cmd, Stdout: &logtest.Buffer{}, Stderr: &logtest.Buffer{}, t: t, name: c.Name, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.Stdout, p.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("childtest: start %s: %v", c.Name, err)
	}
	go func() {
		_ = cmd.Wait() // the exit status is read from ProcessState
		p.state = cmd.ProcessState
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		if strings.Contains(p.Stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("%s reported a data race:\n%s", p.name, p.Stderr.Tail(20000))
		} else if t.Failed() {
			t.Logf("%s log (tail):\n%s", p.name, p.Stderr.Tail(6000))
		}
	})
	return p
}

var adminRE = regexp.MustCompile(`msg="shaper started".* admin=(\S+)`)

// Admin waits up to a minute for the "shaper started" log line and returns
// the admin address it names. It fails the test if the process exits first.
func (p *Process) Admin() string {
	p.t.Helper()
	if p.addr != "" {
		return p.addr
	}
	var addr string
	testwait.For(p.t, time.Minute, p.name+" to start its admin server", func() bool {
		if m := adminRE.FindStringSubmatch(p.Stderr.String()); m != nil {
			addr = m[1]
			return true
		}
		if p.Exited() {
			p.t.Fatalf("%s exited before starting: %v\n%s", p.name, p.state, p.Stderr.Tail(4000))
		}
		return false
	})
	p.addr = addr
	return addr
}

// WaitMetrics scrapes the process's /metrics until cond holds of a scrape,
// and returns that scrape. It fails the test after timeout, naming what it
// waited for.
func (p *Process) WaitMetrics(timeout time.Duration, what string, cond func(Metrics) bool) Metrics {
	p.t.Helper()
	addr := p.Admin()
	var m Metrics
	testwait.For(p.t, timeout, what, func() bool {
		var err error
		m, err = Scrape(addr)
		return err == nil && cond(m)
	})
	return m
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// Signal sends sig (SIGTERM, SIGHUP) without waiting.
func (p *Process) Signal(sig os.Signal) {
	p.t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v to %s: %v", sig, p.name, err)
	}
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Process) Kill() {
	p.t.Helper()
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	p.Wait(30 * time.Second)
}

// Wait waits for the process to exit and returns its exit code (-1 when a
// signal ended it). It fails the test after timeout.
func (p *Process) Wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.state.ExitCode()
	case <-time.After(timeout):
		p.t.Fatalf("%s did not exit within %v; log:\n%s", p.name, timeout, p.Stderr.Tail(6000))
		return -2
	}
}

// Stop drains the process with SIGTERM and requires exit code 0 within a
// minute.
func (p *Process) Stop() {
	p.t.Helper()
	p.StopWithin(time.Minute)
}

// StopWithin is Stop with its own bound on the drain: the test fails if
// the process has not exited timeout after the SIGTERM.
func (p *Process) StopWithin(timeout time.Duration) {
	p.t.Helper()
	if p.Exited() {
		p.t.Errorf("%s had exited already: %v", p.name, p.state)
		return
	}
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(timeout); code != 0 {
		p.t.Errorf("%s exit code after SIGTERM = %d; want 0", p.name, code)
	}
}

// WriteConfig writes a shaper config file into the test's temporary
// directory and returns its path.
func WriteConfig(t testing.TB, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "shaper.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Pipeline is a config with one pipeline: the parts a test varies, each the
// value of its key as a YAML flow mapping, such as `{limit: 50}` for Rate.
// The admin server listens on a free loopback port (Process.Admin finds it).
type Pipeline struct {
	Name       string        // the pipeline's name; "": psp
	Drain      time.Duration // shutdown.drain_timeout; 0: 5s
	Source     string        // the value of source:, such as `{nats: {...}}`
	Bucket     string        // the value of bucket:; "": {capacity: 1000, max_queue_time: 1m}
	Rate       string        // the value of rate:
	Key        string        // the value of key:; "": none
	Sink       string        // the value of sink:
	DeadLetter string        // the value of dead_letter:; "": none
}

// YAML returns the config text, one key a line, so that a test may rewrite
// a line of it with strings.Replace.
func (p Pipeline) YAML() string {
	if p.Name == "" {
		p.Name = "psp"
	}
	if p.Drain == 0 {
		p.Drain = 5 * time.Second
	}
	if p.Bucket == "" {
		p.Bucket = "{capacity: 1000, max_queue_time: 1m}"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "admin: {listen: \"127.0.0.1:0\"}\nshutdown: {drain_timeout: %s}\npipelines:\n  - name: %s\n", p.Drain, p.Name)
	fmt.Fprintf(&b, "    source: %s\n    bucket: %s\n    rate: %s\n    sink: %s\n", p.Source, p.Bucket, p.Rate, p.Sink)
	if p.Key != "" {
		fmt.Fprintf(&b, "    key: %s\n", p.Key)
	}
	if p.DeadLetter != "" {
		fmt.Fprintf(&b, "    dead_letter: %s\n", p.DeadLetter)
	}
	return b.String()
}

var client = &http.Client{Timeout: 5 * time.Second}

// Get fetches path from the admin server at addr, and returns the status
// code and body.
func Get(addr, path string) (int, string, error) {
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Metrics is one scrape of /metrics: each series ("name{labels}") to its
// value.
type Metrics map[string]float64

// Scrape reads /metrics from the admin server at addr.
func Scrape(addr string) (Metrics, error) {
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	m := Metrics{}
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

// Sum adds the series of metric name whose labels contain every one of
// labels (such as `outcome="delivered"`).
func (m Metrics) Sum(name string, labels ...string) float64 {
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
