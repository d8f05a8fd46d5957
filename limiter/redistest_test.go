package limiter_test

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startRedis starts a redis-server process on a free loopback port for the
// test, with extra command-line arguments appended, and kills it when the
// test ends. stop kills it now; restart starts it again on the same port,
// empty (nothing is saved). A missing redis-server fails the test: CI
// installs it (apt-get install -y redis-server), so a skip would hide a
// broken setup.
func startRedis(t testing.TB, extra ...string) (addr string, stop func(), restart func()) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found: %v (apt-get install -y redis-server)", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	addr = l.Addr().String()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()

	dir := t.TempDir()
	logPath := filepath.Join(dir, "redis.log")
	args := append([]string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no", "--dir", dir}, extra...)

	var mu sync.Mutex
	var cmd *exec.Cmd
	stop = func() {
		mu.Lock()
		defer mu.Unlock()
		if cmd == nil {
			return
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		cmd = nil
	}
	start := func() {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if cmd != nil {
			return
		}
		// The server's output goes to a file, never to a pipe the test
		// would have to drain.
		logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatalf("open redis log: %v", err)
		}
		defer logf.Close()
		c := exec.Command(bin, args...)
		c.Stdout, c.Stderr = logf, logf
		if err := c.Start(); err != nil {
			t.Fatalf("start redis-server: %v", err)
		}
		cmd = c
		if err := waitRedis(addr, 5*time.Second); err != nil {
			_ = c.Process.Kill()
			_ = c.Wait()
			cmd = nil
			out, _ := os.ReadFile(logPath)
			t.Fatalf("redis-server on %s not ready: %v\n%s", addr, err, out)
		}
	}
	start()
	t.Cleanup(stop)
	return addr, stop, start
}

// waitRedis waits until the server at addr answers a PING (with PONG, or
// NOAUTH when it wants a password).
func waitRedis(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		err := pingRaw(addr)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func pingRaw(addr string) error {
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
		return &net.OpError{Op: "ping", Err: os.ErrInvalid}
	}
	return nil
}

// newClient returns a go-redis client for addr with default options (so
// ContextTimeoutEnabled is off: the limiter must bound its waits itself),
// closed when the test ends.
func newClient(t testing.TB, opt *redis.Options) *redis.Client {
	t.Helper()
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// scriptCalls returns how many EVALSHA and EVAL calls the server at addr
// has run since it started (or since CONFIG RESETSTAT).
func scriptCalls(t testing.TB, admin *redis.Client) int {
	t.Helper()
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	total := 0
	for line := range strings.Lines(info) {
		for _, name := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			rest, ok := strings.CutPrefix(line, name)
			if !ok {
				continue
			}
			rest, _ = strings.CutPrefix(rest, "calls=")
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			if err != nil {
				t.Fatalf("parse %q: %v", line, err)
			}
			total += n
		}
	}
	return total
}
