package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/bench/peers/backlog"
)

// peerPrograms are what the peers section runs besides shaper: the
// programs of bench/peers, and Benthos, built from its own module in
// bench/peers/benthos.
var peerPrograms = []string{"sink", "broker", "loop", "benthos"}

// benthosVersion is the Benthos core that bench/peers/benthos/go.mod asks
// for.
const benthosVersion = "v4.60.0"

// buildPeers builds the named programs of peerPrograms into dir, the ones
// of bench/peers with one go build and Benthos with another in its module.
func buildPeers(ctx context.Context, root, dir string, programs ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	benthos := false
	for _, p := range programs {
		if p == "benthos" {
			benthos = true
			continue
		}
		args = append(args, "./bench/peers/"+p)
	}
	build := func(dir string, args ...string) error {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, out)
		}
		return nil
	}
	if len(args) > 3 {
		if err := build(root, args...); err != nil {
			return err
		}
	}
	if benthos {
		return build(filepath.Join(root, "bench", "peers", "benthos"), "build", "-o", filepath.Join(dir, "benthos"), ".")
	}
	return nil
}

// process is a program of the peers section running as a child of the
// harness. Its stdout goes to name.out beside its stderr in name.log: the
// programs of bench/peers keep stdout for one line that says they are
// ready (Benthos logs there).
type process struct {
	cmd      *exec.Cmd
	out, log string
	exited   chan struct{}
}

// startProcess starts bin with args in dir's files for name.
func startProcess(dir, name, bin string, args ...string) (*process, error) {
	return startProcessEnv(dir, name, bin, nil, args...)
}

// startProcessEnv is startProcess with env added to the harness's
// environment.
func startProcessEnv(dir, name, bin string, env []string, args ...string) (*process, error) {
	p := &process{out: filepath.Join(dir, name+".out"), log: filepath.Join(dir, name+".log"), exited: make(chan struct{})}
	out, err := os.Create(p.out)
	if err != nil {
		return nil, err
	}
	defer out.Close() // the child has its own descriptors
	log, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	p.cmd = exec.Command(bin, args...)
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = out, log
	// It outlives nothing: if the harness dies, so does it, rather than go
	// on using the CPU of the next run.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }() // how it ended is in its log
	return p, nil
}

// startReady starts a program that prints one line on stdout once it is
// ready, and returns the process and that line.
func startReady(ctx context.Context, dir, name, bin string, args ...string) (*process, string, error) {
	p, err := startProcess(dir, name, bin, args...)
	if err != nil {
		return nil, "", err
	}
	line, err := p.ready(ctx, 2*time.Minute)
	if err != nil {
		p.stop(time.Second)
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	return p, line, nil
}

// ready waits up to timeout for the first line of the process's stdout and
// returns it.
func (p *process) ready(ctx context.Context, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(p.out) // not there yet reads as empty
		if line, _, ok := bytes.Cut(b, []byte("\n")); ok {
			return string(line), nil
		}
		select {
		case <-p.exited:
			return "", fmt.Errorf("exited before it was ready; its output:\n%s", p.tail())
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", fmt.Errorf("not ready after %v; its output:\n%s", timeout, p.tail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cpu returns the CPU time the process has used, from its process CPU
// clock (processCPU), or where that cannot be read from /proc/<pid>/stat
// (see PeersSection.CPUClock); 0 once it has exited.
func (p *process) cpu() time.Duration {
	d, err := processCPU(p.cmd.Process.Pid)
	if err != nil {
		d, err = procCPU(p.cmd.Process.Pid)
	}
	if err != nil {
		return 0
	}
	return d
}

// stop sends SIGTERM and waits; after timeout it kills the process.
func (p *process) stop(timeout time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// tail returns the end of the process's stdout and stderr, for error
// messages.
func (p *process) tail() string {
	var b strings.Builder
	for _, f := range []string{p.out, p.log} {
		data, _ := os.ReadFile(f) // a file it never wrote reads as empty
		if len(data) > 2000 {
			data = data[len(data)-2000:]
		}
		if len(data) > 0 {
			fmt.Fprintf(&b, "%s:\n%s\n", filepath.Base(f), data)
		}
	}
	return b.String()
}

// peerSink is the sink program (bench/peers/sink) running as a child, and
// the client that reads and clears its record of arrivals.
type peerSink struct {
	*process
	url    string // its base URL
	client *http.Client
}

func startPeerSink(ctx context.Context, dir, bin string) (*peerSink, error) {
	p, url, err := startReady(ctx, dir, "peers-sink", bin)
	if err != nil {
		return nil, err
	}
	// Its own transport, so that closing it leaves no connection behind.
	return &peerSink{process: p, url: url, client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}}, nil
}

// callbackURL is where the parties send their requests.
func (s *peerSink) callbackURL() string { return s.url + "/callback" }

// call sends a request to one of the sink's record endpoints and returns
// the body of its 2xx answer.
func (s *peerSink) call(method, path string) ([]byte, error) {
	req, err := http.NewRequest(method, s.url+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("sink %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("sink %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("sink %s %s: %s", method, path, resp.Status)
	}
	return body, nil
}

// reset forgets every arrival.
func (s *peerSink) reset() error {
	_, err := s.call(http.MethodPost, "/reset")
	return err
}

// count returns how many arrivals the sink holds.
func (s *peerSink) count() (int, error) {
	body, err := s.call(http.MethodGet, "/count")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(body)))
	if err != nil {
		return 0, fmt.Errorf("sink /count: %w", err)
	}
	return n, nil
}

// arrivals returns the arrivals the sink holds, in order: their handler
// times, and their wire times (nil unless the sink had one for every
// arrival; see bench/peers/sink).
func (s *peerSink) arrivals() (handler, wire []time.Time, err error) {
	body, err := s.call(http.MethodGet, "/arrivals")
	if err != nil {
		return nil, nil, err
	}
	stamped := true
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		at, w, _ := strings.Cut(sc.Text(), " ")
		ns, err := strconv.ParseInt(at, 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("sink /arrivals: %w", err)
		}
		wns, err := strconv.ParseInt(w, 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("sink /arrivals: %w", err)
		}
		handler = append(handler, time.Unix(0, ns))
		wire = append(wire, time.Unix(0, wns))
		stamped = stamped && wns != 0
	}
	if !stamped {
		wire = nil
	}
	sortTimes(handler) // the handlers record concurrently
	sortTimes(wire)
	return handler, wire, nil
}

// waitCount waits until the sink holds n arrivals, for at most timeout.
func (s *peerSink) waitCount(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		got, err := s.count()
		if err != nil {
			return err
		}
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d requests at the sink after %v", got, n, timeout)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *peerSink) close() {
	s.client.CloseIdleConnections()
	s.stop(10 * time.Second)
}

// natsFeed publishes backlog bodies to a core NATS subject at a steady
// rate from the harness, whose CPU is no party's: core NATS keeps nothing,
// so the core NATS case's parties read a live feed.
type natsFeed struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // the publish that failed, if one did; read after done
}

// feedTick is how often the feed publishes what has come due.
const feedTick = 5 * time.Millisecond

func startNATSFeed(nc *nats.Conn, subject string, rate float64) *natsFeed {
	ctx, cancel := context.WithCancel(context.Background())
	f := &natsFeed{cancel: cancel, done: make(chan struct{})}
	go f.run(ctx, nc, subject, rate)
	return f
}

// run publishes, every feedTick, the messages due by then at rate since
// it started.
func (f *natsFeed) run(ctx context.Context, nc *nats.Conn, subject string, rate float64) {
	defer close(f.done)
	start := time.Now()
	timer := time.NewTimer(feedTick)
	defer timer.Stop()
	for sent, tick := 0, 1; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		for due := int(rate * time.Since(start).Seconds()); sent < due; sent++ {
			if err := nc.Publish(subject, backlog.Body(sent)); err != nil {
				f.err = fmt.Errorf("publish to %s: %w", subject, err)
				return
			}
		}
		timer.Reset(time.Until(start.Add(time.Duration(tick+1) * feedTick)))
	}
}

// stop ends the feed and returns its error, if it had one.
func (f *natsFeed) stop() error {
	f.cancel()
	<-f.done
	return f.err
}

// peerInterval is one request's share of a second at limit: the interval
// of a local rate limit of count 1.
func peerInterval(limit float64) time.Duration {
	return time.Duration(float64(time.Second) / limit)
}

// writeBenthosConfig writes the config of the Benthos party of run id to
// dir and returns its path: the generate input producing backlog.Body(0)
// as fast as the output takes it, a local rate_limit resource of one
// request per 1/limit, and the http_client output with 8 requests in
// flight. Its HTTP server (which would listen on 0.0.0.0:4195) is off.
func writeBenthosConfig(dir, id string, limit float64, url string) (string, error) {
	config := fmt.Sprintf(`http:
  enabled: false
logger:
  level: WARN
shutdown_timeout: 2s
input:
  generate:
    interval: ""
    mapping: 'root = %s'
rate_limit_resources:
  - label: sink
    local:
      count: 1
      interval: %v
output:
  http_client:
    url: %q
    verb: POST
    headers:
      Content-Type: application/json
    rate_limit: sink
    max_in_flight: %d
`, strconv.Quote(string(backlog.Body(0))), peerInterval(limit), url, peerWorkers)
	path := filepath.Join(dir, id+".yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return "", err
	}
	return path, nil
}
