package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shaper-dev/shaper/shaper"
)

// proc is a child process of the harness: a `shaper run` daemon, or a
// program of the peers section. Its stdout goes to name.out and its stderr
// to name.log in the run's directory: the programs of bench/peers keep
// stdout for one line that says they are ready.
type proc struct {
	cmd      *exec.Cmd
	out, log string
	exited   chan struct{}
	// admin is a daemon's admin address; clock says its CPU is read from
	// its process CPU clock (processCPU) rather than /proc/<pid>/stat.
	admin string
	clock bool
}

// startProc starts bin with args, and env added to the harness's
// environment.
func startProc(dir, name, bin string, env []string, args ...string) (*proc, error) {
	p := &proc{out: filepath.Join(dir, name+".out"), log: filepath.Join(dir, name+".log"), exited: make(chan struct{}), clock: true}
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
func startReady(ctx context.Context, dir, name, bin string, args ...string) (*proc, string, error) {
	p, err := startProc(dir, name, bin, nil, args...)
	if err != nil {
		return nil, "", err
	}
	var line string
	err = p.wait(ctx, 2*time.Minute, func() bool {
		b, _ := os.ReadFile(p.out) // not there yet reads as empty
		l, _, ok := bytes.Cut(b, []byte("\n"))
		line = string(l)
		return ok
	})
	if err != nil {
		p.stop(time.Second)
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	return p, line, nil
}

// startShaper writes a `shaper run` config of pipelines (with admin.listen
// and shutdown filled in) and starts the daemon on it, with env added to
// its environment.
func (b *bench) startShaper(name, pipelines string, env ...string) (*proc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	admin := "127.0.0.1:" + strconv.Itoa(port)
	config := fmt.Sprintf("admin: {listen: %q}\nshutdown: {drain_timeout: 1s}\npipelines:%s\n", admin, pipelines)
	path := filepath.Join(b.o.tmp, name+".yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return nil, err
	}
	p, err := startProc(b.o.tmp, name, b.bin, env, "--log-level", "warn", "run", "--config", path)
	if err != nil {
		return nil, err
	}
	p.admin, p.clock = admin, false
	return p, nil
}

// pipelineYAML is one pipeline of a `shaper run` config: its name, its
// source block (kafkaYAML, natsYAML) and the rest of its keys, one a line.
func pipelineYAML(name, source string, keys ...string) string {
	return fmt.Sprintf("\n  - name: %s\n    source:%s\n    %s\n", name, source, strings.Join(keys, "\n    "))
}

// daemons is `shaper run` children side by side.
type daemons []*proc

// startDaemons starts one child per config, named name-0, name-1 and so
// on, and waits up to two minutes for each one's /readyz. On an error none
// is left running.
func (b *bench) startDaemons(ctx context.Context, name string, configs []string) (daemons, error) {
	var ds daemons
	for i, config := range configs {
		p, err := b.startShaper(fmt.Sprintf("%s-%d", name, i), config)
		if err != nil {
			ds.kill()
			return nil, err
		}
		ds = append(ds, p)
	}
	for _, p := range ds {
		if err := p.wait(ctx, 2*time.Minute, p.ready); err != nil {
			ds.kill()
			return nil, err
		}
	}
	return ds, nil
}

// kill ends every child at once.
func (ds daemons) kill() {
	for _, p := range ds {
		p.kill()
	}
}

// stop drains every child, one after the other.
func (ds daemons) stop() {
	for _, p := range ds {
		p.stop(10 * time.Second)
	}
}

// wait polls cond until it holds, and fails when the process exits first
// or timeout passes.
func (p *proc) wait(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		select {
		case <-p.exited:
			return fmt.Errorf("exited before it was ready; its output:\n%s", p.tail())
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not ready after %v; its output:\n%s", timeout, p.tail())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// ready reports whether a daemon's /readyz answers 200.
func (p *proc) ready() bool {
	resp, err := http.Get("http://" + p.admin + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// cpu returns the CPU time the process has used, from its process CPU
// clock where it has one and that can be read, else from /proc/<pid>/stat;
// 0 once it has exited.
func (p *proc) cpu() time.Duration {
	if p.clock {
		if d, err := processCPU(p.pid()); err == nil {
			return d
		}
	}
	d, _ := procCPU(p.pid())
	return d
}

// stop sends SIGTERM (a daemon drains, bounded by its 1s drain timeout)
// and waits; after timeout it kills the process.
func (p *proc) stop(timeout time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.kill()
	}
}

// kill ends the process at once.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// tail returns the end of the process's stdout and stderr, for error
// messages.
func (p *proc) tail() string {
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

// scrape reads the named gauges and counters from a daemon's /metrics,
// each summed over its labels.
func (p *proc) scrape(names ...string) (map[string]float64, error) {
	resp, err := http.Get("http://" + p.admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	want, out := map[string]bool{}, map[string]float64{}
	for _, n := range names {
		want[n] = true
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
		}
		if ok && want[name] {
			v, _ := strconv.ParseFloat(value, 64)
			out[name] += v
		}
	}
	return out, sc.Err()
}

// keys returns a daemon's top deepest lanes of pipeline name (GET
// /v1/pipelines/{name}/keys).
func (p *proc) keys(name string, top int) ([]shaper.KeyStatus, error) {
	resp, err := http.Get(fmt.Sprintf("http://%s/v1/pipelines/%s/keys?top=%d", p.admin, name, top))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/pipelines/%s/keys: %s", name, resp.Status)
	}
	var out []shaper.KeyStatus
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

// Window is what a daemon delivered over a window of steady delivery, and
// what it cost.
type Window struct {
	Seconds   float64 `json:"seconds"`
	Delivered int64   `json:"delivered"`
	Rate      float64 `json:"rate"`
	ChildCost
	// m0 and m1 are the daemon's metrics at the window's start and end.
	m0, m1 map[string]float64
}

// Allocation counters of a daemon's /metrics.
const mallocs, allocBytes = "go_memstats_mallocs_total", "go_memstats_alloc_bytes_total"

// measure samples each daemon's CPU and metrics (with gauges), this
// process's CPU and each daemon's deliveries (counts), waits window, and
// samples them again. This process's CPU is the brokers' and the sinks' of
// all of them: each daemon's HarnessUs is it over every message delivered
// in the window.
func (ds daemons) measure(counts []func() int64, window time.Duration, gauges ...string) []Window {
	names := append([]string{mallocs, allocBytes}, gauges...)
	out := make([]Window, len(ds))
	cpu0, n0 := make([]time.Duration, len(ds)), make([]int64, len(ds))
	for i, p := range ds {
		out[i].m0, _ = p.scrape(names...) // a failed scrape leaves the allocations at 0
	}
	t0, self0 := time.Now(), selfCPU()
	for i, p := range ds {
		cpu0[i], n0[i] = p.cpu(), counts[i]()
	}
	time.Sleep(window)
	t1, self1 := time.Now(), selfCPU()
	var total int64
	for i, p := range ds {
		w := &out[i]
		w.Seconds, w.Delivered = t1.Sub(t0).Seconds(), counts[i]()-n0[i]
		w.Rate = float64(w.Delivered) / w.Seconds
		cpu := p.cpu() - cpu0[i]
		w.ShaperPct = 100 * cpu.Seconds() / w.Seconds
		total += w.Delivered
		w.ShaperUs = perMessage(cpu, w.Delivered)
	}
	for i, p := range ds {
		w := &out[i]
		w.m1, _ = p.scrape(names...)
		if w.Delivered > 0 && w.m0 != nil && w.m1 != nil {
			w.Allocs = (w.m1[mallocs] - w.m0[mallocs]) / float64(w.Delivered)
			w.AllocBytes = (w.m1[allocBytes] - w.m0[allocBytes]) / float64(w.Delivered)
		}
		w.HarnessUs = perMessage(self1-self0, total)
	}
	return out
}
