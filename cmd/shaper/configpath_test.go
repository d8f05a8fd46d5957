package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/testwait"
)

// A --config that is not a regular file is refused at once with exit 2,
// naming what it is. Reading a named pipe would block validate and run for
// good, a signal included, and so would a link to one. Each runs as a
// child process, so that one that blocks fails the test instead of hanging
// it.
func TestConfigThatIsNotARegularFileIsRefusedAtOnce(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "f.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.yaml")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"validate, a named pipe", []string{"validate", "--config", fifo}, "--config " + fifo + ": not a regular file (a named pipe)"},
		{"run, a named pipe", []string{"run", "--config", fifo}, "--config " + fifo + ": not a regular file (a named pipe)"},
		{"validate, a link to a named pipe", []string{"validate", "--config", link}, "--config " + link + ": not a regular file (a named pipe)"},
		{"validate, a directory", []string{"validate", "--config", dir}, "--config " + dir + ": not a regular file (a directory)"},
		{"validate, a device", []string{"validate", "--config", os.DevNull}, "--config /dev/null: not a regular file (a character device)"},
		{"validate, a socket", []string{"validate", "--config", sock}, "--config " + sock + ": not a regular file (a socket)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startShaper(t, nil, tt.args...)
			if code := c.Wait(30 * time.Second); code != exitUsage {
				t.Errorf("shaper %s = exit %d; want %d", strings.Join(tt.args, " "), code, exitUsage)
			}
			if got := c.Stderr.String(); !strings.Contains(got, tt.want) {
				t.Errorf("stderr = %q; want it to say %q", got, tt.want)
			}
		})
	}
}

// A signal while validate loads its configs ends it, with exit 1 and a
// line that says so, and checks none of the files after. validate loads
// thirty copies of a config of 7000 pipelines (half a second of CPU each);
// the signal comes once the first is checked, so it lands while the
// others load.
func TestSignalWhileValidateLoadsEndsIt(t *testing.T) {
	var b strings.Builder
	b.WriteString("pipelines:\n")
	for i := range 7000 {
		fmt.Fprintf(&b, "  - {name: p%d, source: {nats: {url: \"nats://127.0.0.1:4222\", subject: s%d}}, rate: {limit: 50}, sink: {http: {url: \"https://x.example/n\"}}}\n", i, i)
	}
	config := childtest.WriteConfig(t, b.String())
	const files = 30
	args := []string{"validate"}
	for range files {
		args = append(args, "--config", config)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			c := startShaper(t, nil, args...)
			testwait.For(t, time.Minute, "the first file checked", func() bool {
				return strings.Contains(c.Stdout.String(), "ok (7000 pipelines)")
			})
			c.Signal(sig)
			if code := c.Wait(30 * time.Second); code != exitRuntime {
				t.Errorf("validate after %v = exit %d; want %d", sig, code, exitRuntime)
			}
			if n := strings.Count(c.Stdout.String(), "ok (7000 pipelines)"); n == files {
				t.Errorf("validate checked all %d files after %v; want it to stop", n, sig)
			}
			if got := c.Stderr.String(); !strings.Contains(got, "interrupted while loading") {
				t.Errorf("stderr = %q; want it to say it was interrupted while loading", got)
			}
		})
	}
}
