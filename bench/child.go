package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// shaperBinary builds cmd/shaper once into dir and returns its path. The
// children are the real daemon, `shaper run`, so what they use is what a
// deployment would.
func shaperBinary(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "shaper")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/shaper")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/shaper: %w\n%s", err, out)
	}
	return bin, nil
}

// child is a `shaper run` process with its admin API on a known address.
type child struct {
	cmd    *exec.Cmd
	admin  string
	log    string
	exited chan struct{}
}

// startChild writes config (with admin.listen and shutdown filled in) and
// starts `shaper run` on it; its log goes to a file beside the config.
func startChild(bin, dir, name, pipelines string) (*child, error) {
	return startChildEnv(bin, dir, name, pipelines, nil)
}

// startChildEnv is startChild with env added to the child's environment.
func startChildEnv(bin, dir, name, pipelines string, env []string) (*child, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	admin := "127.0.0.1:" + strconv.Itoa(port)
	config := fmt.Sprintf("admin: {listen: %q}\nshutdown: {drain_timeout: 1s}\npipelines:%s\n", admin, pipelines)
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own descriptor
	c := &child{admin: admin, log: logPath, exited: make(chan struct{})}
	c.cmd = exec.Command(bin, "--log-level", "warn", "run", "--config", path)
	if env != nil {
		c.cmd.Env = append(os.Environ(), env...)
	}
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	// A child outlives nothing: if the harness dies, so does it, rather
	// than go on using the CPU of the next run.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start shaper: %w", err)
	}
	go func() { _ = c.cmd.Wait(); close(c.exited) }() // the exit status is read by stop's callers through the log
	return c, nil
}

// startChildren starts one child per config, named name-0, name-1 and so
// on, and waits up to ready for each to be ready. The caller ends them
// (killAll); on an error none is left running.
func startChildren(ctx context.Context, bin, dir, name string, configs []string, ready time.Duration) ([]*child, error) {
	var children []*child
	for i, config := range configs {
		ch, err := startChild(bin, dir, fmt.Sprintf("%s-%d", name, i), config)
		if err != nil {
			killAll(children)
			return nil, err
		}
		children = append(children, ch)
	}
	for _, ch := range children {
		if err := ch.waitReady(ctx, ready); err != nil {
			killAll(children)
			return nil, err
		}
	}
	return children, nil
}

// killAll ends every child at once; a child that has exited already is
// left as it is.
func killAll(children []*child) {
	for _, ch := range children {
		ch.kill()
	}
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// cpu returns the CPU time the child has used, from /proc/<pid>/stat.
func (c *child) cpu() time.Duration {
	d, err := procCPU(c.pid())
	if err != nil {
		return 0
	}
	return d
}

// waitReady waits until the child's /readyz answers 200.
func (c *child) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-c.exited:
			return fmt.Errorf("shaper exited before it was ready; log:\n%s", c.tail())
		default:
		}
		resp, err := http.Get("http://" + c.admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("shaper not ready after %v; log:\n%s", timeout, c.tail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scrape reads the named gauges and counters from the child's /metrics.
func (c *child) scrape(names ...string) (map[string]float64, error) {
	resp, err := http.Get("http://" + c.admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
		}
		if want[name] {
			v, _ := strconv.ParseFloat(value, 64)
			out[name] += v
		}
	}
	return out, sc.Err()
}

// stop sends SIGTERM (a graceful drain, bounded by the config's 1s drain
// timeout) and waits; after timeout it kills the child.
func (c *child) stop(timeout time.Duration) {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// kill ends the child at once.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// tail returns the end of the child's log, for error messages.
func (c *child) tail() string {
	b, _ := os.ReadFile(c.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
