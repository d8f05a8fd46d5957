package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/testwait"
)

// A supervisor that forwards one SIGTERM twice (GNU timeout signals the
// child and then its process group) does not force a stop: the second
// signal, right after the first was taken, is logged and ignored, and the
// drain delivers every message the bucket holds before exiting 0.
func TestTwoSIGTERMsTogetherStillDrainEveryHeldMessage(t *testing.T) {
	const n = 30 // at 10/s, a drain of about 3 s
	sink, config, _ := natsRun(t, n, 10, time.Minute)

	c := startChild(t, config)
	c.WaitMetrics(30*time.Second, "every message in the bucket", func(m childtest.Metrics) bool {
		return m.Sum("shaper_messages_received_total") == n
	})
	if delivered, _ := sink.Counts(); delivered >= n {
		t.Fatalf("all %d delivered before the signal; the test needs a drain", n)
	}
	c.Signal(syscall.SIGTERM)
	// Once the first is taken, so that the two are not one pending signal.
	testwait.For(t, 10*time.Second, "the first SIGTERM taken", func() bool {
		return strings.Contains(c.Stderr.String(), "signal received: draining")
	})
	c.Signal(syscall.SIGTERM)
	if code := c.Wait(time.Minute); code != exitOK {
		t.Errorf("exit code after a second SIGTERM right after the first = %d; want 0 (a graceful drain)", code)
	}
	if delivered, total := sink.Counts(); delivered != n || total != n {
		t.Errorf("the drain delivered %d unique in %d requests; want all %d held, once each", delivered, total, n)
	}
	stderr := c.Stderr.String()
	if !strings.Contains(stderr, "second signal too soon after the first: ignored") {
		t.Errorf("stderr does not say the second signal was ignored:\n%s", stderr)
	}
	if strings.Contains(stderr, "forcing exit") {
		t.Errorf("stderr reports a forced exit:\n%s", stderr)
	}
}

// SIGQUIT stops at once, even as the first signal: exit 1, unfinished
// messages nacked, and no goroutine dump (Go's own SIGQUIT handler would
// dump and exit 2).
func TestSIGQUITForcesAnImmediateStopWithoutAGoroutineDump(t *testing.T) {
	const n = 100 // at 10/s, a drain would take about 10 s
	sink, config, _ := natsRun(t, n, 10, time.Minute)

	c := startChild(t, config)
	testwait.For(t, 30*time.Second, "5 deliveries", func() bool { u, _ := sink.Counts(); return u >= 5 })
	c.Signal(syscall.SIGQUIT)
	if code := c.Wait(30 * time.Second); code != exitRuntime {
		t.Errorf("exit code after SIGQUIT = %d; want %d (forced)", code, exitRuntime)
	}
	if delivered, _ := sink.Counts(); delivered >= n {
		t.Errorf("all %d delivered: SIGQUIT drained instead of stopping", n)
	}
	stderr := c.Stderr.String()
	for _, want := range []string{"SIGQUIT: forcing exit", "nacked unfinished messages", "forced to stop before the drain finished"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "goroutine 1 [") {
		t.Errorf("SIGQUIT dumped the goroutines:\n%s", c.Stderr.Tail(2000))
	}
}
