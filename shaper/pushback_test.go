package shaper_test

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/shaper"
)

// These tests run the pipeline against real JetStream and a scripted sink
// in real time (docs/multi-tenant.md); they take seconds each, so they run in
// parallel with one another.

// rateIn returns the requests per second that reached the sink in [from,
// from+d).
func rateIn(rec *sinktest.Sink, from time.Time, d time.Duration) float64 {
	return float64(len(rec.Between(from, from.Add(d)))) / d.Seconds()
}

// An outage of the sink (503 to everything for 15s) opens the breaker:
// few requests reach the sink while it is down, no message spends its
// attempts or is dead-lettered, and once it is back the first request is
// answered within 2.5s and the rate is the configured one again.
func TestAnOutageOpensTheBreakerAndLosesNothing(t *testing.T) {
	t.Parallel()
	const n, limit, outage = 300, 50.0, 15 * time.Second
	e := newEnv(t)
	var mu sync.Mutex
	var down time.Time // the first request: the outage starts there
	rec := sinktest.Start(t, func(*http.Request, int) sinktest.Action {
		mu.Lock()
		defer mu.Unlock()
		if down.IsZero() {
			down = time.Now()
		}
		if time.Since(down) < outage {
			return sinktest.Action{Status: http.StatusServiceUnavailable}
		}
		return sinktest.Action{}
	})
	e.publish(n)
	p := e.start(e.config(rec.URL, func(c *config.Pipeline) { c.Rate.Limit = limit }))
	testwait.For(t, 60*time.Second, "every message delivered", func() bool { return rec.DeliveredCount() == n })

	mu.Lock()
	up := down.Add(outage)
	mu.Unlock()
	during := rec.Between(down, up)
	t.Logf("outage: %d requests in %v; breaker opened, probes went at %v", len(during), outage, arrivals(during, down))
	if len(during) > 40 {
		t.Errorf("%d requests reached the sink during the outage; want at most 40", len(during))
	}
	first := time.Time{}
	for _, r := range rec.Requests() {
		if r.Status == http.StatusOK && (first.IsZero() || r.At.Before(first)) {
			first = r.At
		}
	}
	t.Logf("first 2xx %v after the sink came back", first.Sub(up).Round(time.Millisecond))
	if first.Sub(up) > 2500*time.Millisecond {
		t.Errorf("first 2xx %v after the sink came back; want within 2.5s", first.Sub(up))
	}
	after := rateIn(rec, first.Add(time.Second), 3*time.Second)
	t.Logf("rate after the outage: %.1f/s", after)
	if after < limit*0.95 || after > limit*1.05 {
		t.Errorf("rate after the outage = %.1f/s; want %v ± 5%%", after, limit)
	}
	delivered, _ := rec.Delivered()
	for key, times := range delivered {
		if times != 1 {
			t.Errorf("%s delivered %d times; want once", key, times)
		}
	}
	e.noDeadLetters()
	// The sink counts a request when it answers; the pipeline counts it
	// delivered once it has read the answer and acked the message.
	testwait.For(t, 10*time.Second, "every delivered outcome counted", func() bool {
		return p.Status().Outcomes[shaper.OutcomeDelivered] == n
	})
}

// arrivals lists when requests arrived, from t0, for a log line.
func arrivals(reqs []sinktest.Request, t0 time.Time) []time.Duration {
	var out []time.Duration
	for _, r := range reqs {
		out = append(out, r.At.Sub(t0).Round(10*time.Millisecond))
	}
	return out
}

// One 429 with Retry-After: 2 holds every departure for 2s, not only the
// message that got it; then the rate resumes, and the throttled attempt is
// counted in shaper_throttled_total, not against max_attempts.
func TestARetryAfterPausesEveryDeparture(t *testing.T) {
	t.Parallel()
	const n, limit = 400, 100.0
	e := newEnv(t)
	var count atomic.Int64
	var throttledAt atomic.Pointer[time.Time]
	rec := sinktest.Start(t, func(*http.Request, int) sinktest.Action {
		if count.Add(1) == 50 {
			now := time.Now()
			throttledAt.Store(&now)
			return sinktest.Action{Status: http.StatusTooManyRequests, RetryAfter: "2"}
		}
		return sinktest.Action{}
	})
	e.publish(n)
	p := e.start(e.config(rec.URL, func(c *config.Pipeline) {
		c.Rate.Limit = limit
		c.Sink.HTTP.Retry.MaxAttempts = 1 // the throttled attempt must not use it up
	}))
	testwait.For(t, 30*time.Second, "every message delivered", func() bool { return rec.DeliveredCount() == n })

	at := *throttledAt.Load()
	held := rec.Between(at.Add(50*time.Millisecond), at.Add(1900*time.Millisecond))
	if len(held) > 0 {
		t.Errorf("%d requests within the 2s after the 429 (first %v after it); want none", len(held), held[0].At.Sub(at))
	}
	var resumed time.Time
	for _, r := range rec.Requests() {
		if r.At.After(at.Add(50*time.Millisecond)) && (resumed.IsZero() || r.At.Before(resumed)) {
			resumed = r.At
		}
	}
	t.Logf("departures resumed %v after the 429", resumed.Sub(at).Round(time.Millisecond))
	if wait := resumed.Sub(at); wait < 1900*time.Millisecond || wait > 2300*time.Millisecond {
		t.Errorf("departures resumed %v after the 429; want once its Retry-After of 2s is over", wait)
	}
	if after := rateIn(rec, resumed.Add(200*time.Millisecond), time.Second); after < limit*0.9 || after > limit*1.1 {
		t.Errorf("rate after the hold = %.1f/s; want %v ± 10%%", after, limit)
	}
	if got := p.metric("shaper_throttled_total"); got != 1 {
		t.Errorf("shaper_throttled_total = %v; want 1", got)
	}
	e.noDeadLetters() // a throttled attempt spends none
}

// Pause and resume through the admin API under load: nothing is sent while
// paused, the state and shaper_paused say so, and every message is
// delivered once afterwards, none expired (max_queue_time is longer than
// the pause).
func TestPauseAndResumeThroughTheAdminAPI(t *testing.T) {
	t.Parallel()
	const n, token = 300, "a-token-of-sixteen-bytes"
	e := newEnv(t)
	rec := sinktest.Start(t, sinktest.OK)
	e.publish(n)
	p := e.start(e.config(rec.URL, func(c *config.Pipeline) { c.Rate.Limit = 100 }))
	admin := p.serveAdmin(t, token, nil)
	testwait.For(t, 10*time.Second, "deliveries to start", func() bool { return rec.DeliveredCount() >= 50 })

	if code, body := call(t, "POST", admin.URL+"/v1/pipelines/test/pause", "", ""); code != http.StatusUnauthorized {
		t.Errorf("pause without the token = %d %s; want 401", code, body)
	}
	code, body := call(t, "POST", admin.URL+"/v1/pipelines/test/pause", token, "")
	paused := time.Now()
	if code != http.StatusOK || p.Status().State != shaper.StatePaused {
		t.Fatalf("pause = %d %s, state %q; want 200 and paused", code, body, p.Status().State)
	}
	time.Sleep(2 * time.Second)
	if got := p.metric("shaper_paused"); got != 1 {
		t.Errorf("shaper_paused = %v while paused; want 1", got)
	}
	// A request already in flight at the pause may still arrive.
	if sent := rec.Between(paused.Add(50*time.Millisecond), time.Now()); len(sent) > 0 {
		t.Errorf("%d requests while paused; want none", len(sent))
	}
	if code, body := call(t, "POST", admin.URL+"/v1/pipelines/test/resume", token, ""); code != http.StatusOK {
		t.Fatalf("resume = %d %s; want 200", code, body)
	}
	testwait.For(t, 30*time.Second, "every message delivered", func() bool { return rec.DeliveredCount() == n })
	if delivered, _ := rec.Delivered(); len(delivered) != n {
		t.Errorf("%d messages delivered; want %d", len(delivered), n)
	}
	if dup := rec.Duplicates(); len(dup) > 0 {
		t.Errorf("sent more than once: %v", dup)
	}
	// The sink counts a request when it answers; the pipeline counts it
	// delivered once it has read the answer and acked the message.
	testwait.For(t, 10*time.Second, "every delivery counted", func() bool {
		return p.Status().Outcomes[shaper.OutcomeDelivered] == n
	})
	st := p.Status()
	if st.State != shaper.StateRunning || st.Outcomes[shaper.OutcomeExpired] != 0 || st.Outcomes[shaper.OutcomeDelivered] != n {
		t.Errorf("after resume: state %q, outcomes %v; want running, %d delivered, none expired", st.State, st.Outcomes, n)
	}
}
