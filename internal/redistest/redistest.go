// Package redistest runs a real redis-server process on loopback for tests.
// A test that needs Redis fails, never skips, when redis-server is missing:
// `make test` installs it.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/internal/freeport"
	"github.com/shaper-dev/shaper/internal/testwait"
)

// Server is a redis-server child process on 127.0.0.1.
type Server struct {
	t    testing.TB
	Addr string
	args []string
	dir  string // its working directory and log file
	cmd  *exec.Cmd
}

// Start runs redis-server on a free port with persistence off, plus any
// extra arguments (such as "--requirepass", "secret"), and returns once it
// answers a PING. It is stopped when the test ends.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redistest: redis-server is not installed (make test installs it): %v", err)
	}
	s := &Server{t: t, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(freeport.Get(t))), args: extra, dir: t.TempDir()}
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// Stop kills the server (SIGKILL, like a crash); Restart brings it back.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait() // the kill is the expected end
	s.cmd = nil
}

// Restart starts the server again on the same address, empty, and returns
// once it answers a PING: a TCP accept alone comes before Redis serves
// commands.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	_, port, _ := net.SplitHostPort(s.Addr)
	args := append([]string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no", "--dir", s.dir}, s.args...)
	// Output goes to a file, never to a pipe the test would have to drain.
	logPath := filepath.Join(s.dir, "redis.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		s.t.Fatalf("redistest: open redis log: %v", err)
	}
	defer logf.Close()
	cmd := exec.Command("redis-server", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start redis-server: %v", err)
	}
	s.cmd = cmd
	const within = 10 * time.Second
	if _, ok := testwait.Every(5*time.Millisecond, within, func() bool { err = ping(s.Addr); return err == nil }); !ok {
		s.Stop()
		out, _ := os.ReadFile(logPath)
		s.t.Fatalf("redistest: redis-server on %s not answering PING after %v: %v\n%s", s.Addr, within, err, out)
	}
}

// ping sends PING on a fresh connection and accepts PONG, or NOAUTH from a
// server that wants a password.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") && !strings.HasPrefix(line, "-NOAUTH") {
		return errors.New("PING answered " + strings.TrimSpace(line))
	}
	return nil
}

// ScriptCalls returns how many EVALSHA and EVAL calls the server behind
// admin has run since it started (or since CONFIG RESETSTAT), from INFO
// commandstats.
func ScriptCalls(t testing.TB, admin *redis.Client) int {
	t.Helper()
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	total := 0
	for line := range strings.Lines(info) {
		for _, name := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			rest, ok := strings.CutPrefix(line, name)
			if !ok {
				continue
			}
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			if err != nil {
				t.Fatalf("parse %q: %v", line, err)
			}
			total += n
		}
	}
	return total
}
