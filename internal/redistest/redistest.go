// Package redistest runs a real redis-server process on loopback for tests.
// A test that needs Redis fails, never skips, when redis-server is missing:
// `make test` installs it.
package redistest

import (
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Server is a redis-server child process on 127.0.0.1.
type Server struct {
	t    testing.TB
	Addr string
	args []string
	cmd  *exec.Cmd
}

// Start runs redis-server on a free port with persistence off, plus any
// extra arguments (such as "--requirepass", "secret"). It is stopped when
// the test ends.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redistest: redis-server is not installed (make test installs it): %v", err)
	}
	s := &Server{t: t, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))), args: extra}
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

// Restart starts the server again on the same address, empty.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	_, port, _ := net.SplitHostPort(s.Addr)
	args := append([]string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no"}, s.args...)
	cmd := exec.Command("redis-server", args...)
	// Output goes nowhere: a pipe nobody reads would block the server.
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start redis-server: %v", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: redis-server not listening on %s after 10s: %v", s.Addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
