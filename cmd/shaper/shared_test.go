package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/redistest"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/shaper"
)

// sharedRun is startJetStream's stream of n messages, a sink that answers
// 200, a redis-server, and the config file of sharedConfig between them.
func sharedRun(t *testing.T, n int, limit, fallback float64) (*sinktest.Sink, *redistest.Server, string) {
	t.Helper()
	natsURL := startJetStream(t, n)
	sink := sinktest.Start(t, sinktest.OK)
	redis := redistest.Start(t)
	return sink, redis, childtest.WriteConfig(t, sharedConfig(natsURL, sink.URL, redis.Addr, limit, fallback))
}

func sharedConfig(natsURL, sinkURL, redisAddr string, limit, fallback float64) string {
	return childtest.Pipeline{
		Drain:  time.Second,
		Source: natsSource(natsURL),
		Bucket: "{capacity: 50, max_queue_time: 1m}",
		Rate:   fmt.Sprintf(`{limit: %v, shared: {redis: {addr: "%s"}, key: "shaper:test:psp", fallback_limit: %v}}`, limit, redisAddr, fallback),
		Sink:   httpSink(sinkURL, 4),
	}.YAML()
}

// rateOf waits for the next n requests to arrive at the sink, from now,
// and returns the rate they came at: n-1 intervals over the time from the
// first to the last. It fails the test if they have not come within a
// minute.
func rateOf(t *testing.T, sink *sinktest.Sink, n int) float64 {
	t.Helper()
	from := time.Now()
	var reqs []sinktest.Request
	testwait.For(t, time.Minute, fmt.Sprintf("%d requests at the sink", n), func() bool {
		reqs = sink.Between(from, from.Add(time.Hour))
		return len(reqs) >= n
	})
	slices.SortFunc(reqs, func(a, b sinktest.Request) int { return a.At.Compare(b.At) })
	return float64(n-1) / reqs[n-1].At.Sub(reqs[0].At).Seconds()
}

// fallbackIs returns a condition: every admin's shaper_limiter_fallback is
// want (1 fallen back, 0 on the shared limit).
func fallbackIs(admins []string, want float64) func() bool {
	return func() bool {
		for _, a := range admins {
			m, err := childtest.Scrape(a)
			if err != nil || m.Sum("shaper_limiter_fallback") != want {
				return false
			}
		}
		return true
	}
}

func TestThreeReplicasShareOneLimitThroughRedisAndFallBackWithoutIt(t *testing.T) {
	const limit, fallback = 60.0, 8.0
	sink, redis, config := sharedRun(t, 3000, limit, fallback)

	var children []*childtest.Process
	var admins []string
	for range 3 {
		c := startChild(t, config)
		children, admins = append(children, c), append(admins, c.Admin())
	}
	// Two seconds of the limit: past the start, into the steady state.
	testwait.For(t, 30*time.Second, "deliveries to start", func() bool { u, _ := sink.Counts(); return u >= 2*limit })

	shared := rateOf(t, sink, 4*limit) // about 4s
	t.Logf("shared: %.1f/s aggregate for 3 replicas (limit %v)", shared, limit)
	// Over-sending is the failure; under-sending only shows a busy machine
	// (a replica that wakes late wastes the rest of its lease), so the
	// bounds differ: 48.8/s and 53.0/s were seen with CI's other test
	// binaries running beside the three replicas on 2 cores. The lower
	// bound still fails a limit split three ways (20/s).
	if shared > limit*1.03 || shared < limit*0.75 {
		t.Errorf("aggregate rate with a shared limit = %.1f/s; want %v +3%% -25%% (not 3×)", shared, limit)
	}

	redis.Stop()
	stopped := time.Now()
	testwait.For(t, 30*time.Second, "every replica to fall back", fallbackIs(admins, 1))
	// It engages at a replica's next Redis call: within a second.
	if took := time.Since(stopped); took > 2*time.Second {
		t.Errorf("every replica fell back %v after Redis stopped; want within 1s (2s on a loaded machine)", took)
	}
	down := rateOf(t, sink, 3*3*fallback) // about 3s
	t.Logf("fallback: %.1f/s aggregate (3 × fallback_limit = %v)", down, 3*fallback)
	// As above, over-sending is the failure; a busy machine under-sends
	// (20.3/s of 24 was seen with three race-enabled test binaries at once).
	if down > 3*fallback*1.15 || down < 3*fallback*0.7 {
		t.Errorf("aggregate rate with Redis down = %.1f/s; want about 3 × fallback_limit = %v (+15%% -30%%)", down, 3*fallback)
	}

	redis.Restart()
	restarted := time.Now()
	testwait.For(t, 30*time.Second, "every replica back on the shared limit", fallbackIs(admins, 0))
	// A probe every 200-300ms finds Redis back within about 300ms.
	if took := time.Since(restarted); took > 2*time.Second {
		t.Errorf("every replica was back on the shared limit %v after Redis restarted; want within 300ms (2s on a loaded machine)", took)
	}
	back := rateOf(t, sink, 4*limit) // about 4s
	t.Logf("recovered: %.1f/s aggregate", back)
	if back > limit*1.03 || back < limit*0.75 {
		t.Errorf("aggregate rate after Redis came back = %.1f/s; want %v +3%% -25%%", back, limit)
	}

	for _, c := range children {
		_ = c.Cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range children {
		if code := c.Wait(15 * time.Second); code != exitOK {
			t.Errorf("replica exit code = %d; want 0; stderr:\n%s", code, c.Stderr)
		}
	}
}

// Three replicas share limit 100 through Redis with the adaptive rate, in
// front of a sink that admits 40 requests a second: the limit in force is
// the shared one, so they slow down together and the requests reaching the
// sink settle near its capacity, not at three times anything.
func TestThreeReplicasWithASharedAdaptiveRateSettleWithinTheSinksCapacity(t *testing.T) {
	const admits = 40
	natsURL := startJetStream(t, 5000)
	sink := sinktest.Start(t, sinktest.Admitting(sinktest.Quota(admits)))
	redis := redistest.Start(t)
	const token = "adaptive-test-token-0123456789"
	config := childtest.WriteConfig(t, strings.Replace(childtest.Pipeline{
		Drain:  time.Second,
		Source: natsSource(natsURL),
		Bucket: "{capacity: 200, max_queue_time: 5m}",
		Rate: fmt.Sprintf(`{limit: 100, adaptive: {min: 5}, shared: {redis: {addr: "%s"}, key: "shaper:test:adaptive", fallback_limit: 30}}`,
			redis.Addr),
		Sink: httpSink(sink.URL, 4),
	}.YAML(), `admin: {listen: "127.0.0.1:0"}`, `admin: {listen: "127.0.0.1:0", token: "`+token+`"}`, 1))
	var admins []string
	for range 3 {
		admins = append(admins, startChild(t, config).Admin())
	}
	testwait.For(t, 30*time.Second, "deliveries to start", func() bool { return sink.DeliveredCount() >= 100 })
	from := time.Now().Add(15 * time.Second)
	time.Sleep(time.Until(from) + 15*time.Second)

	var ok, throttled int
	for _, r := range sink.Between(from, from.Add(15*time.Second)) {
		switch r.Status {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			throttled++
		}
	}
	requests, delivered := float64(ok+throttled)/15, float64(ok)/15
	t.Logf("3 replicas, 15s in steady state: %.1f requests/s reach the sink (it admits %d/s), %.1f/s delivered, %.1f%% throttled",
		requests, admits, delivered, 100*float64(throttled)/float64(ok+throttled))
	if requests > admits*1.15 {
		t.Errorf("%.1f requests/s reach the sink; want at most its capacity %d/s + 15%%", requests, admits)
	}
	if delivered < admits*0.5 {
		t.Errorf("%.1f/s delivered; want at least half the sink's capacity %d/s", delivered, admits)
	}
	if share := float64(throttled) / float64(ok+throttled); share > 0.05 {
		t.Errorf("%.1f%% of requests throttled; want at most 5%% (7%% was measured without rate.adaptive)", 100*share)
	}
	// Every replica has the one shared limit in force, well below 100: at
	// some moment all three report the same. A replica hears of a change
	// another made with its next lease (every request or so: ~75ms at
	// 13/s), or after its pause when a Retry-After holds it, so a single
	// look may catch one behind (it did: [35.3 46.1 48.1]); limits of
	// their own would hardly ever agree. The limit rises until the sink
	// pushes back, so a look may also catch the shared one on its way up
	// past the capacity (it did: 61 of 60): the looks go on until one
	// finds the replicas agreeing at most half again above it.
	var limits, configured []float64
	look := func() {
		limits, configured = limits[:0], configured[:0]
		for _, admin := range admins {
			code, body, err := childtest.Get(admin, "/v1/pipelines")
			var list []shaper.Status
			if err != nil || code != http.StatusOK || json.Unmarshal([]byte(body), &list) != nil || len(list) != 1 {
				t.Fatalf("GET /v1/pipelines = %d %s, %v", code, body, err)
			}
			limits, configured = append(limits, list[0].LimitNow), append(configured, list[0].Limit)
		}
	}
	agreed := testwait.Until(10*time.Second, func() bool {
		look()
		lo, hi := slices.Min(limits), slices.Max(limits)
		return hi-lo <= 1e-9*hi && hi <= 3*admits/2
	})
	t.Logf("limit in force on each replica: %v", limits)
	if !agreed || slices.Max(limits) > 3*admits/2 {
		t.Errorf("limits in force %v (the last of 10s of looks); want one shared limit on every replica, near the sink's %d/s (not 100, not one per replica)", limits, admits)
	}

	// A rate lowered through one replica's API is every replica's
	// rate.limit, and stays the most the limit in force is: the others'
	// adaptive rates rise to it, not to their configured 100.
	const lowered = 20
	putRate(t, admins[0], token, lowered)
	under := func() bool {
		look()
		return slices.Max(limits) <= lowered && slices.Min(configured) == lowered && slices.Max(configured) == lowered
	}
	if !testwait.Until(5*time.Second, under) {
		t.Errorf("5s after PUT rate %d on replica 0: rate.limit %v, in force %v; want %d and at most %d on every replica", lowered, configured, limits, lowered, lowered)
	} else if !testwait.Holds(4*time.Second, under) {
		t.Errorf("within 4s after every replica took PUT rate %d: rate.limit %v, in force %v; want %d and at most %d on every replica throughout", lowered, configured, limits, lowered, lowered)
	}
	t.Logf("after PUT rate %d on replica 0: rate.limit %v, in force %v", lowered, configured, limits)
}
