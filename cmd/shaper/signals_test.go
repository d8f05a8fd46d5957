package main

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/sinktest"
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

// rewrite replaces the config file's content, as an operator would.
func rewrite(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// reload rewrites the config file of c to body, sends c SIGHUP and waits
// for c to log logged.
func reload(t *testing.T, c *childtest.Process, config, body, logged string) {
	t.Helper()
	rewrite(t, config, body)
	c.Signal(syscall.SIGHUP)
	testwait.For(t, 10*time.Second, "the reload ("+logged+") in the log", func() bool {
		return strings.Contains(c.Stderr.String(), logged)
	})
}

func TestSIGHUPReloadUnderLoadAppliesTheNewRateAndLosesNothing(t *testing.T) {
	const n = 300
	natsURL := startJetStream(t, n)
	sink := sinktest.Start(t, sinktest.OK)
	text := runConfig(natsURL, sink.URL, 20, time.Second)
	config := childtest.WriteConfig(t, text)

	c := startChild(t, config)
	testwait.For(t, 30*time.Second, "deliveries at 20/s", func() bool { u, _ := sink.Counts(); return u >= 30 })
	before := rateOf(t, sink, 20) // about 1s

	// Applied in place: the log says so once the new rate is in force.
	reload(t, c, config, strings.Replace(text, "rate: {limit: 20}", "rate: {limit: 100}", 1), "pipeline changed in place")
	after := rateOf(t, sink, 100) // about 1s
	t.Logf("sink rate before the reload %.0f/s, after %.0f/s", before, after)
	if before > 25 || after < 80 {
		t.Errorf("sink rate %.0f/s before and %.0f/s after a reload from 20/s to 100/s", before, after)
	}

	testwait.For(t, 30*time.Second, "every message delivered", func() bool { u, _ := sink.Counts(); return u == n })
	waitAcked(t, natsURL) // nothing can come again
	c.StopWithin(15 * time.Second)
	if unique, total := sink.Counts(); unique != n || total != n {
		t.Errorf("delivered %d unique in %d requests; want %d once each", unique, total, n)
	}
}

func TestAnInvalidReloadIsRefusedAndTheRunningConfigStays(t *testing.T) {
	sink, config, good := natsRun(t, 200, 20, time.Second)

	c := startChild(t, config)
	testwait.For(t, 30*time.Second, "deliveries", func() bool { u, _ := sink.Counts(); return u >= 20 })
	reload(t, c, config, strings.Replace(good, "rate: {limit: 20}", "rate: {limit: -5, burst: 0}", 1), "reload refused")
	for _, want := range []string{"pipelines[0].rate.limit: must be a number > 0", "pipelines[0].rate.burst: must be >= 1"} {
		if !strings.Contains(c.Stderr.String(), want) {
			t.Errorf("the refusal does not list %q; stderr:\n%s", want, c.Stderr)
		}
	}
	if got := rateOf(t, sink, 20); got < 15 || got > 25 {
		t.Errorf("sink rate after a refused reload = %.0f/s; want the old 20/s", got)
	}
	c.StopWithin(15 * time.Second)
}

func TestReloadAddsAndRemovesPipelinesAndWatchFollowsTheFile(t *testing.T) {
	sink, config, one := natsRun(t, 100, 200, time.Second)
	// A second pipeline on the same stream with its own durable consumer:
	// it delivers every message again, under its own name.
	two := one + strings.NewReplacer("name: psp", "name: psp-copy", "durable: shaper-psp", "durable: shaper-copy").
		Replace(one[strings.Index(one, "  - name: psp"):])

	c := startShaper(t, nil, "run", "--config", config, "--watch")
	testwait.For(t, 30*time.Second, "the first pipeline's deliveries", func() bool { u, _ := sink.Counts(); return u == 100 })

	// --watch looks every second for a new size or modification time:
	// each rewrite changes the size.
	rewrite(t, config, two)
	testwait.For(t, 30*time.Second, "the added pipeline's deliveries", func() bool { _, total := sink.Counts(); return total == 200 })

	rewrite(t, config, strings.Replace(two, "  - name: psp\n", "  - name: psp-gone\n", 1))
	testwait.For(t, 30*time.Second, "the removed pipeline's drain", func() bool {
		return strings.Contains(c.Stderr.String(), "pipeline removed: draining")
	})
	c.StopWithin(15 * time.Second)
	for _, want := range []string{"trigger=\"file changed\"", "pipeline added", "pipeline removed: draining"} {
		if !strings.Contains(c.Stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, c.Stderr)
		}
	}
}

func TestReloadChangesHTTPSinkHeadersInPlace(t *testing.T) {
	sink, config, old := natsRun(t, 300, 50, time.Second)
	c := startChild(t, config)
	testwait.For(t, 30*time.Second, "deliveries", func() bool { u, _ := sink.Counts(); return u >= 20 })

	reload(t, c, config, strings.Replace(old, "max_in_flight: 4}", "max_in_flight: 4, headers: {X-Psp: acme}, timeout: 5s}", 1), "pipeline changed in place")
	testwait.For(t, 30*time.Second, "every message delivered", func() bool { u, _ := sink.Counts(); return u == 300 })
	_ = c.Cmd.Process.Signal(syscall.SIGTERM)
	c.Wait(15 * time.Second)
	if unique, total := sink.Counts(); total != unique {
		t.Errorf("%d requests for %d messages across an in-place reload; want no duplicates", total, unique)
	}
	if sink.LastHeader("X-Psp") != "acme" {
		t.Errorf("the last request carried X-Psp %q; want the reloaded header", sink.LastHeader("X-Psp"))
	}
}
