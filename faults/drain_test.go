package faults_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
)

func TestGracefulDrainUnderLoadExitsZeroInTimeAndARestartDeliversTheRestOnce(t *testing.T) {
	const n, limit, inFlight = 600, 200, 8
	const drain, timeout = time.Second, 2 * time.Second
	eachBroker(t, n, func(t *testing.T, f fixture) {
		sink := sinktest.Start(t, func(*http.Request, int) sinktest.Action { return sinktest.Action{Delay: 20 * time.Millisecond} })
		config := childtest.WriteConfig(t, childtest.Pipeline{
			Drain:  drain,
			Source: f.source,
			Rate:   fmt.Sprintf("{limit: %d}", limit),
			Sink:   fmt.Sprintf(`{http: {url: "%s", max_in_flight: %d, timeout: %s}}`, sink.URL, inFlight, timeout),
		}.YAML())

		first := startShaper(t, "first", config)
		admin := first.Admin()
		testwait.For(t, time.Minute, "100 deliveries", func() bool { return sink.DeliveredCount() >= 100 })
		first.Signal(syscall.SIGTERM)
		signalled := time.Now()
		atSignal := sink.DeliveredCount()
		// Readiness turns false at once, saying why.
		var body string
		if !testwait.Until(2*time.Second, func() bool {
			code, b, err := childtest.Get(admin, "/readyz")
			body = b
			return err == nil && code == http.StatusServiceUnavailable
		}) && !first.Exited() {
			t.Errorf("/readyz did not turn 503 while draining; last body %q", body)
		} else if body != "" && !strings.Contains(body, "draining") {
			t.Errorf("/readyz while draining = %q; want it to say draining", body)
		}
		code := first.Wait(drain + timeout + 10*time.Second)
		took := time.Since(signalled)
		if code != 0 {
			t.Errorf("exit code after SIGTERM = %d; want 0", code)
		}
		// drain_timeout, then the requests in flight finish (each
		// within timeout), then the parts close: 3s covers closing on
		// a loaded machine.
		if bound := drain + timeout + 3*time.Second; took > bound {
			t.Errorf("drain took %v; want at most drain_timeout + timeout + 3s = %v", took, bound)
		}
		drained := sink.DeliveredCount() - atSignal
		if drained == 0 {
			t.Errorf("nothing was delivered during the drain; the bucket should keep draining at the rate")
		}
		if sink.DeliveredCount() >= n {
			t.Fatalf("the first run delivered all %d; the test needs a remainder", n)
		}
		checkFinishedWereDelivered(t, f, sink, nil, "after the drain")
		t.Logf("SIGTERM after %d delivered; %d more during the %v drain; exit %d after %v",
			atSignal, drained, drain, code, took.Round(time.Millisecond))

		delivered, answers := f.restart(t, sink, config, n)
		t.Logf("%d messages: %d lost, %d duplicates across the restart", n, n-len(delivered), answers-len(delivered))
		if len(delivered) != n || answers != n {
			t.Errorf("delivered %d unique in %d 2xx answers; want %d, each once", len(delivered), answers, n)
		}
	})
}

func TestSecondSignalForcesExitOneAndNeverAcksAnUnfinishedMessage(t *testing.T) {
	const n, limit, inFlight, okFirst = 200, 100, 4, 20
	eachBroker(t, n, func(t *testing.T, f fixture) {
		// The first okFirst messages are answered; then the sink hangs,
		// so requests are in flight when the second signal comes.
		var answered atomic.Int64
		var healthy atomic.Bool
		sink := sinktest.Start(t, func(*http.Request, int) sinktest.Action {
			if healthy.Load() || answered.Add(1) <= okFirst {
				return sinktest.Action{}
			}
			return sinktest.Action{Hang: true}
		})
		config := childtest.WriteConfig(t, childtest.Pipeline{
			Drain:  time.Minute,
			Source: f.source,
			Rate:   fmt.Sprintf("{limit: %d}", limit),
			Sink:   fmt.Sprintf(`{http: {url: "%s", max_in_flight: %d, timeout: 1m}}`, sink.URL, inFlight),
		}.YAML())

		first := startShaper(t, "first", config)
		testwait.For(t, time.Minute, "the sink to hang with max_in_flight requests", func() bool {
			return sink.DeliveredCount() >= okFirst && sink.Hanging() == inFlight
		})
		first.Signal(syscall.SIGTERM)
		time.Sleep(1500 * time.Millisecond) // a second signal within 1 s of the first is ignored
		if first.Exited() {
			t.Fatalf("shaper exited on the first signal with requests in flight and drain_timeout 1m")
		}
		first.Signal(syscall.SIGTERM)
		forced := time.Now()
		code := first.Wait(15 * time.Second)
		took := time.Since(forced)
		if code != 1 {
			t.Errorf("exit code after a second signal = %d; want 1", code)
		}
		if took > 5*time.Second {
			t.Errorf("forced exit took %v; want well under drain_timeout (1m)", took)
		}
		checkFinishedWereDelivered(t, f, sink, nil, "after the forced exit")
		t.Logf("forced exit %d after %v with %d requests hanging", code, took.Round(time.Millisecond), inFlight)

		healthy.Store(true)
		second := startShaper(t, "second", config)
		testwait.For(t, 2*time.Minute, "every message delivered after the restart", func() bool { return sink.DeliveredCount() >= n })
		second.Stop()
		f.settled(30 * time.Second)
		delivered, answers := sink.Delivered()
		t.Logf("%d messages: %d lost, %d duplicates", n, n-len(delivered), answers-len(delivered))
	})
}

// TestGracefulDrainWithRetriesPendingRedeliversOnlyTheUnfinished drains
// while some messages wait in the retry heap (a 503 asked for 3 s;
// drain_timeout is 1 s), so the drain nacks them while later messages are
// done. A restart must deliver the rest and repeat at most the messages that
// had no final outcome at the drain: those the sink was asked for and did
// not answer 2xx. JetStream acks each message: it repeats nothing. Kafka
// commits contiguous offsets, so a pending retry holds back its partition's
// offset; the offsets finished after it go with the commit, in its
// metadata, and the restart skips them (before they did, 182 of 400
// messages came again: docs/reliability.md, finding 3).
func TestGracefulDrainWithRetriesPendingRedeliversOnlyTheUnfinished(t *testing.T) {
	const n, limit = 400, 100
	eachBroker(t, n, func(t *testing.T, f fixture) {
		// After the first 60 requests and until the drain, every 10th
		// message is answered 503 asking for 3s. Each such answer holds
		// every departure (docs/multi-tenant.md): so a few of them, enough to have
		// retries pending at the drain, and none for the restart, which
		// only has to deliver the rest.
		var requests atomic.Int64
		var restarted atomic.Bool
		sink := sinktest.Start(t, func(r *http.Request, attempt int) sinktest.Action {
			key := r.Header.Get("Idempotency-Key")
			i, _ := strconv.Atoi(key[strings.LastIndexByte(key, '/')+1:])
			if requests.Add(1) > 60 && attempt == 1 && i%10 == 3 && !restarted.Load() {
				return sinktest.Action{Status: http.StatusServiceUnavailable, RetryAfter: "3"}
			}
			return sinktest.Action{}
		})
		config := childtest.WriteConfig(t, childtest.Pipeline{
			Drain:  time.Second,
			Source: f.source,
			Rate:   fmt.Sprintf("{limit: %d}", limit),
			Sink:   fmt.Sprintf(`{http: {url: "%s", max_in_flight: 4, timeout: 2s, retry: {max_backoff: 10s}}}`, sink.URL),
		}.YAML())
		first := startShaper(t, "first", config)
		testwait.For(t, time.Minute, "100 deliveries", func() bool { return sink.DeliveredCount() >= 100 })
		first.Signal(syscall.SIGTERM)
		if code := first.Wait(30 * time.Second); code != 0 {
			t.Errorf("exit code after SIGTERM = %d; want 0", code)
		}
		checkFinishedWereDelivered(t, f, sink, nil, "after the drain")
		// Without a final outcome at the drain: asked for, never
		// answered 2xx (here, the retries still pending).
		deliveredBefore, _ := sink.Delivered()
		unfinished := make(map[string]bool)
		for _, r := range sink.Requests() {
			if deliveredBefore[r.Key] == 0 {
				unfinished[r.Key] = true
			}
		}
		if len(unfinished) == 0 {
			t.Fatalf("no retry was pending at the drain (%d delivered); the test needs some", len(deliveredBefore))
		}

		restarted.Store(true)
		delivered, answers := f.restart(t, sink, config, n)
		dups := answers - len(delivered)
		t.Logf("%s: %d delivered before the drain, %d without a final outcome at it; %d messages, %d lost, %d duplicates after the restart",
			f.kind, len(deliveredBefore), len(unfinished), n, n-len(delivered), dups)
		if len(delivered) != n {
			t.Errorf("delivered %d unique; want all %d", len(delivered), n)
		}
		want := len(unfinished)
		if f.kind == "jetstream" {
			want = 0 // acked one by one: nothing finished comes again
		}
		if dups > want {
			t.Errorf("%d duplicates after the restart; want at most %d (the messages without a final outcome at the drain)", dups, want)
		}
	})
}
