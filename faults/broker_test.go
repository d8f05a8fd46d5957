package faults_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/redistest"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
)

// readyz returns /readyz's status and body (0 when it cannot be reached).
func readyz(admin string) (int, string) {
	code, body, err := childtest.Get(admin, "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	return code, strings.TrimSpace(body)
}

// brokerOutage takes the broker down with stop, checks that the daemon
// stays up and /readyz says 503 with a reason that contains want, then
// brings the broker back with start and checks /readyz returns to 200.
func brokerOutage(t *testing.T, p *childtest.Process, admin string, want string, stop, start func()) (notReadyAfter, readyAfter time.Duration) {
	t.Helper()
	// Ready first: a source may report a passing read error (a fetch that
	// timed out on a loaded machine) until its next read succeeds.
	var code int
	var body string
	if !testwait.Until(10*time.Second, func() bool { code, body = readyz(admin); return code == http.StatusOK }) {
		t.Fatalf("/readyz before the outage = %d %q for 10s; want 200", code, body)
	}
	stop()
	down := time.Now()
	testwait.For(t, 30*time.Second, "/readyz to turn 503 while the broker is down", func() bool {
		var code int
		code, body = readyz(admin)
		return code == http.StatusServiceUnavailable
	})
	notReadyAfter = time.Since(down)
	if !strings.Contains(body, want) {
		t.Errorf("/readyz while the broker is down = %q; want a reason mentioning %q", body, want)
	}
	// A while down (2s): alive and not ready all along.
	var last string
	if !testwait.Holds(2*time.Second, func() bool {
		code, b := readyz(admin)
		last = fmt.Sprintf("%d %q", code, b)
		return !p.Exited() && code != http.StatusOK
	}) && !p.Exited() {
		t.Errorf("/readyz during the outage = %s; want not ready until the broker is back", last)
	}
	if p.Exited() {
		t.Fatalf("shaper exited while the broker was down: %v", p.Cmd.ProcessState)
	}
	if code, b := readyz(admin); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz 2s into the outage = %d %q; want 503", code, b)
	}
	start()
	up := time.Now()
	testwait.For(t, time.Minute, "/readyz to return to 200 after the broker came back", func() bool {
		code, _ := readyz(admin)
		return code == http.StatusOK
	})
	readyAfter = time.Since(up)
	t.Logf("/readyz: 503 %v after the broker went down (%q), 200 again %v after it came back", notReadyAfter.Round(time.Millisecond), body, readyAfter.Round(time.Millisecond))
	return notReadyAfter, readyAfter
}

// shapeThroughOutage runs a shaper from f's source at limit/s into a sink
// that answers after 10ms, and once 50 messages are delivered takes the
// broker through an outage with stop and start (see brokerOutage, want
// names the broker in the /readyz reason).
func shapeThroughOutage(t *testing.T, f fixture, limit int, want string, stop, start func()) (*childtest.Process, *sinktest.Sink) {
	t.Helper()
	sink := sinktest.Start(t, func(*http.Request, int) sinktest.Action { return sinktest.Action{Delay: 10 * time.Millisecond} })
	config := childtest.WriteConfig(t, childtest.Pipeline{
		Source: f.source,
		Rate:   fmt.Sprintf("{limit: %d}", limit),
		Sink:   fmt.Sprintf(`{http: {url: "%s", max_in_flight: 4, timeout: 2s}}`, sink.URL),
	}.YAML())
	p := startShaper(t, "shaper", config)
	admin := p.Admin()
	testwait.For(t, time.Minute, "50 deliveries", func() bool { return sink.DeliveredCount() >= 50 })
	brokerOutage(t, p, admin, want, stop, start)
	return p, sink
}

func TestNATSServerRestartKeepsTheDaemonUpReadyzTruthfulAndLosesNothing(t *testing.T) {
	t.Parallel()
	const n, more, limit = 300, 50, 100
	f := jetstreamFixture(t, n)
	p, sink := shapeThroughOutage(t, f, limit, "nats", f.nats.stop, f.nats.start)
	// The consumer works after the restart: new messages arrive too.
	f.nats.publish(more, numbered("in.faults"))
	testwait.For(t, 2*time.Minute, "every message delivered after the restart", func() bool { return sink.DeliveredCount() >= n+more })
	p.Stop()
	f.settled(30 * time.Second)
	o := account(t, streamIDs(n+more), sink, nil)
	t.Logf("%d messages across a NATS restart: %d lost, %d duplicates", n+more, len(o.lost), o.duplicates)
}

func TestKafkaBrokerRestartKeepsTheDaemonUpReadyzTruthfulAndLosesNothing(t *testing.T) {
	t.Parallel()
	const n, limit = 400, 100
	f := kafkaFixture(t, n, 200*time.Millisecond)
	p, sink := shapeThroughOutage(t, f, limit, "kafka", f.kafka.Stop, f.kafka.Restart)
	testwait.For(t, 2*time.Minute, "every message delivered after the restart", func() bool { return sink.DeliveredCount() >= n })
	p.Stop()
	f.settled(30 * time.Second)
	delivered, answers := sink.Delivered()
	t.Logf("%d messages across a Kafka restart: %d lost, %d duplicates", n, n-len(delivered), answers-len(delivered))
	if len(delivered) != n {
		t.Errorf("delivered %d of %d", len(delivered), n)
	}
}

func TestRedisDownUpAndPausedKeepsTheRateBoundedAndLosesNothing(t *testing.T) {
	t.Parallel()
	const n, limit, fallback = 1000, 100, 20
	f := jetstreamFixture(t, n)
	rs := redistest.Start(t)
	sink := sinktest.Start(t, func(*http.Request, int) sinktest.Action { return sinktest.Action{Delay: 5 * time.Millisecond} })
	config := childtest.WriteConfig(t, childtest.Pipeline{
		Source: f.source,
		Rate: fmt.Sprintf(`{limit: %d, shared: {redis: {addr: "%s"}, key: "shaper:faults", fallback_limit: %d, timeout: 50ms}}`,
			limit, rs.Addr, fallback),
		Sink: fmt.Sprintf(`{http: {url: "%s", max_in_flight: 4, timeout: 2s}}`, sink.URL),
	}.YAML())
	p := startShaper(t, "shaper", config)
	admin := p.Admin()
	fallbackIs := func(want float64) func() bool {
		return func() bool {
			m, err := childtest.Scrape(admin)
			return err == nil && m.Sum("shaper_limiter_fallback") == want
		}
	}
	// phase lasts k deliveries, about a second or two at the rate the
	// phase should have, and checks that the pipeline delivers and is
	// ready meanwhile.
	phase := func(name string, k int) {
		from, base := time.Now(), sink.DeliveredCount()
		testwait.For(t, time.Minute, fmt.Sprintf("%d deliveries while %s", k, name), func() bool { return sink.DeliveredCount() >= base+k })
		took := time.Since(from)
		code, body := readyz(admin)
		t.Logf("%-22s %5.1f/s at the sink; /readyz %d %q", name+":", float64(len(sink.Between(from, time.Now())))/took.Seconds(), code, body)
		if p.Exited() {
			t.Fatalf("shaper exited during %s: %v", name, p.Cmd.ProcessState)
		}
		if code != http.StatusOK {
			t.Errorf("/readyz during %s = %d %q; want 200: the source is connected and the pipeline delivers", name, code, body)
		}
	}

	testwait.For(t, time.Minute, "deliveries", func() bool { return sink.DeliveredCount() >= 20 })
	phase("shared", 2*limit)

	rs.Stop()
	testwait.For(t, 10*time.Second, "shaper_limiter_fallback 1 with Redis down", fallbackIs(1))
	if _, body, err := childtest.Get(admin, "/v1/pipelines"); err != nil || !strings.Contains(body, `"limiter": "fallback"`) {
		t.Errorf("/v1/pipelines with Redis down = %q, %v; want it to show \"limiter\": \"fallback\"", body, err)
	}
	phase("redis down (fallback)", 2*fallback)

	rs.Restart()
	testwait.For(t, 15*time.Second, "shaper_limiter_fallback 0 with Redis back", fallbackIs(0))
	phase("redis back", 2*limit)

	// A stalled Redis: CLIENT PAUSE holds every command for 2s; calls
	// time out after 50ms, and the limiter falls back instead of waiting.
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := rc.ClientPause(ctx, 2*time.Second).Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	cancel()
	_ = rc.Close()
	paused := testwait.Until(2*time.Second, fallbackIs(1))
	phase("redis paused", fallback)
	testwait.For(t, 15*time.Second, "shaper_limiter_fallback 0 after the pause", fallbackIs(0))
	phase("after the pause", limit)
	if !paused {
		t.Errorf("shaper_limiter_fallback never turned 1 while Redis was paused")
	}

	testwait.For(t, 2*time.Minute, "every message delivered", func() bool { return sink.DeliveredCount() >= n })
	p.Stop()
	f.settled(30 * time.Second)
	o := account(t, streamIDs(n), sink, nil)
	// One lease: about 20 ms of slots, limit × 20 ms.
	most100, most1s := checkShapingWith(t, sink, limit, 4, 2*time.Second, limit*20/1000)
	t.Logf("%d messages: %d lost, %d duplicates; most in 100 ms %d, in 1 s %d (limit %d/s)", n, len(o.lost), o.duplicates, most100, most1s, limit)
}
