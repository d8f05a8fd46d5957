package shaper_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/sinks"
)

func TestLeakyModeNeverExceedsATenthOfTheLimitPerHundredMilliseconds(t *testing.T) {
	e := newEnv(t)
	rec := sinktest.Start(t, sinktest.OK)
	const n, limit = 120, 50
	e.publish(n) // a burst, all waiting before the pipeline starts
	e.start(e.config(rec.URL, func(c *config.Pipeline) { c.Rate.Limit = limit }))
	testwait.For(t, 30*time.Second, "every message delivered", func() bool { return rec.RequestCount() == n })

	// The promise is limit/10 + 1 as requests leave, which the limiter's
	// own tests hold exactly; at the sink a loaded machine may delay one
	// request's arrival onto the next (it did: 7 of 6), so one more is
	// allowed here: a doubled rate would still show.
	reqs := rec.Requests()
	if got, most := sinktest.MaxInWindow(sinktest.Arrivals(reqs), 100*time.Millisecond), limit/10+1+1; got > most {
		t.Errorf("most requests arriving in a 100ms window = %d; want <= limit/10 + 1 + 1 (arrival jitter) = %d", got, most)
	}
	// n requests 1/limit apart span (n-1)/limit seconds; the bound is generous
	// below (a slow machine only stretches it) and loose above.
	span := reqs[n-1].At.Sub(reqs[0].At)
	if want := time.Duration(n-1) * time.Second / limit; span < want-100*time.Millisecond {
		t.Errorf("%d requests at %d/s spanned %v; want about %v", n, limit, span, want)
	}
}

func TestTokenModeSendsTheBurstAtOnceThenHoldsTheAverage(t *testing.T) {
	e := newEnv(t)
	rec := sinktest.Start(t, sinktest.OK)
	const n, limit, burst = 60, 20, 10
	e.publish(n)
	e.start(e.config(rec.URL, func(c *config.Pipeline) {
		c.Rate.Mode, c.Rate.Limit = shaper.ModeToken, limit
		b := burst
		c.Rate.Burst = &b
		c.Sink.HTTP.MaxInFlight = burst
	}))
	testwait.For(t, 30*time.Second, "every message delivered", func() bool { return rec.RequestCount() == n })

	reqs := rec.Requests()
	if got := reqs[burst-1].At.Sub(reqs[0].At); got > 250*time.Millisecond {
		t.Errorf("the first %d requests (the burst) spanned %v; want them at once", burst, got)
	}
	// After the burst, the rest go at the limit: (n-burst) more need about
	// (n-burst)/limit seconds.
	rest := reqs[n-1].At.Sub(reqs[burst-1].At)
	if want := time.Duration(n-burst) * time.Second / limit; rest < want-150*time.Millisecond {
		t.Errorf("the %d after the burst took %v; want about %v (limit %d/s)", n-burst, rest, want, limit)
	}
	if got, most := sinktest.MaxInWindow(sinktest.Arrivals(reqs), time.Second), burst+limit+1; got > most {
		t.Errorf("most requests in any second = %d; want <= burst + limit + 1 = %d", got, most)
	}
}

func TestNothingIsAckedBeforeItsOutcomeIsFinal(t *testing.T) {
	e := newEnv(t)
	rec := sinktest.Start(t, func(*http.Request, int) sinktest.Action {
		return sinktest.Action{Status: http.StatusServiceUnavailable} // fails every request, forever
	})
	const n = 20
	e.publish(n)
	p := e.start(e.config(rec.URL, func(c *config.Pipeline) {
		c.Sink.HTTP.Retry = shaper.RetryConfig{MaxAttempts: 1000, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, MaxElapsed: time.Hour}
		c.Sink.HTTP.Breaker.Failures = new(int) // off: this test retries on and on
	}))
	testwait.For(t, 30*time.Second, "every message attempted three times", func() bool { return rec.RequestCount() >= 3*n })

	info := e.consumer("shaper-test")
	if info.AckFloor.Stream != 0 || info.NumAckPending != n {
		t.Errorf("while the sink fails: ack floor %d, ack pending %d; want 0 and %d (nothing acked)",
			info.AckFloor.Stream, info.NumAckPending, n)
	}
	p.stop(t)
	info = e.consumer("shaper-test")
	if info.AckFloor.Stream != 0 {
		t.Errorf("after the drain: ack floor %d; want 0 (unfinished messages are nacked, not acked)", info.AckFloor.Stream)
	}
	if st := p.Status(); st.Outcomes[shaper.OutcomeDelivered]+st.Outcomes[shaper.OutcomeDeadLettered] != 0 {
		t.Errorf("outcomes = %v; want none final", st.Outcomes)
	}
	if len(e.dead) != 0 {
		t.Errorf("%d dead letters; want 0", len(e.dead))
	}
}

func TestRetriesBackOffExponentiallyAndThenDeliver(t *testing.T) {
	e := newEnv(t)
	rec := sinktest.Start(t, func(_ *http.Request, attempt int) sinktest.Action {
		if attempt <= 3 {
			return sinktest.Action{Status: http.StatusBadGateway}
		}
		return sinktest.Action{}
	})
	e.publish(1)
	backoff := 200 * time.Millisecond
	e.start(e.config(rec.URL, func(c *config.Pipeline) {
		c.Sink.HTTP.Retry = shaper.RetryConfig{MaxAttempts: 5, InitialBackoff: backoff, MaxBackoff: time.Second, MaxElapsed: time.Minute}
	}))
	testwait.For(t, 30*time.Second, "the fourth attempt", func() bool { return rec.RequestCount() == 4 })

	reqs := rec.Requests()
	// Full jitter: the wait after attempt k is uniform in [0, backoff × 2^(k-1)];
	// add slack for scheduling.
	for k := 1; k < 4; k++ {
		gap := reqs[k].At.Sub(reqs[k-1].At)
		bound := backoff << (k - 1)
		if gap > bound+150*time.Millisecond {
			t.Errorf("gap after attempt %d = %v; want <= %v", k, gap, bound)
		}
	}
	if !testwait.Holds(300*time.Millisecond, func() bool { return rec.RequestCount() == 4 }) {
		t.Errorf("requests = %d; want 4 (3 failures, then delivered and never sent again)", rec.RequestCount())
	}
}

func TestRetryAfterIsHonouredInSecondsAndHTTPDateForm(t *testing.T) {
	tests := []struct {
		name string
		give func() string
		min  time.Duration
	}{
		{"seconds", func() string { return "2" }, 2 * time.Second},
		// An HTTP date has whole seconds: 3s ahead is at least 2s ahead.
		{"http-date", func() string { return time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat) }, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			rec := sinktest.Start(t, func(_ *http.Request, attempt int) sinktest.Action {
				if attempt == 1 {
					return sinktest.Action{Status: http.StatusTooManyRequests, RetryAfter: tt.give()}
				}
				return sinktest.Action{}
			})
			e.publish(1)
			e.start(e.config(rec.URL, func(c *config.Pipeline) {
				c.Sink.HTTP.Retry = shaper.RetryConfig{MaxAttempts: 3, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Second, MaxElapsed: time.Minute}
			}))
			testwait.For(t, 30*time.Second, "the second attempt", func() bool { return rec.RequestCount() == 2 })
			reqs := rec.Requests()
			if gap := reqs[1].At.Sub(reqs[0].At); gap < tt.min || gap > tt.min+2*time.Second {
				t.Errorf("gap after 429 with Retry-After %s = %v; want >= %v and not much more", tt.name, gap, tt.min)
			}
		})
	}
}

func TestA400IsDeadLetteredAsRejectedWithoutRetry(t *testing.T) {
	e := newEnv(t)
	rec := sinktest.Start(t, func(*http.Request, int) sinktest.Action {
		return sinktest.Action{Status: http.StatusBadRequest, Body: "unknown payment\n"}
	})
	const n = 5
	e.publish(n)
	p := e.start(e.config(rec.URL, nil))
	dead := e.deadLetters(n, 30*time.Second)
	// With max_in_flight 8 the 400s, and so the dead letters, may come in
	// any order: each is matched to its message by Shaper-Source.
	slices.SortFunc(dead, func(a, b *nats.Msg) int {
		return strings.Compare(a.Header.Get("Shaper-Source"), b.Header.Get("Shaper-Source"))
	})

	for i, m := range dead {
		h := m.Header
		checks := map[string]string{
			"Shaper-Reason":   "rejected",
			"Shaper-Attempts": "1",
			"Shaper-Pipeline": "test",
			"Shaper-Source":   stream + "/" + strconv.Itoa(i+1),
			"Shaper-Id":       stream + "/" + strconv.Itoa(i+1),
		}
		for k, want := range checks {
			if got := h.Get(k); got != want {
				t.Errorf("dead letter %d: %s = %q; want %q", i, k, got, want)
			}
		}
		if got := h.Get("Shaper-Error"); got != "status 400: unknown payment" {
			t.Errorf("dead letter %d: Shaper-Error = %q; want the status and body", i, got)
		}
		if got, want := string(m.Data), "msg-"+strconv.Itoa(i); got != want {
			t.Errorf("dead letter %d: payload %q; want the original %q", i, got, want)
		}
	}
	testwait.For(t, 10*time.Second, "acks", func() bool { return e.consumer("shaper-test").AckFloor.Stream == n })
	if got := rec.RequestCount(); got != n {
		t.Errorf("sink requests = %d; want %d (no retry of a 400)", got, n)
	}
	// The count follows the ack, so it may trail the consumer's ack floor.
	testwait.For(t, 10*time.Second, "5 dead_lettered in the status", func() bool {
		return p.Status().Outcomes[shaper.OutcomeDeadLettered] == n
	})
}

func TestAMessagePastMaxQueueTimeIsDeadLetteredAsExpired(t *testing.T) {
	e := newEnv(t)
	// The first request hangs 2s with max_in_flight 1, so the others wait
	// longer than max_queue_time for their departure.
	rec := sinktest.Start(t, func(r *http.Request, _ int) sinktest.Action {
		if r.Header.Get("Idempotency-Key") == stream+"/1" {
			return sinktest.Action{Delay: 2 * time.Second}
		}
		return sinktest.Action{}
	})
	const n = 5
	e.publish(n)
	p := e.start(e.config(rec.URL, func(c *config.Pipeline) {
		c.Bucket.MaxQueueTime = time.Second
		c.Sink.HTTP.MaxInFlight = 1
		c.Sink.HTTP.Timeout = 5 * time.Second
	}))
	dead := e.deadLetters(n-1, 30*time.Second)
	for _, m := range dead {
		if got := m.Header.Get("Shaper-Reason"); got != "expired" {
			t.Errorf("dead letter %s: Shaper-Reason = %q; want expired", m.Header.Get("Shaper-Source"), got)
		}
		if got := m.Header.Get("Shaper-Attempts"); got != "0" {
			t.Errorf("dead letter %s: Shaper-Attempts = %q; want 0", m.Header.Get("Shaper-Source"), got)
		}
	}
	testwait.For(t, 10*time.Second, "acks", func() bool { return e.consumer("shaper-test").AckFloor.Stream == n })
	// The server may count an ack before the pipeline counts the outcome:
	// wait for the counts too.
	testwait.For(t, 10*time.Second, "1 delivered and 4 expired", func() bool {
		st := p.Status()
		return st.Outcomes[shaper.OutcomeDelivered] == 1 && st.Outcomes[shaper.OutcomeExpired] == n-1
	})
	if got := rec.RequestCount(); got != 1 {
		t.Errorf("sink requests = %d; want 1 (expired messages are not sent late)", got)
	}
}

func TestAnOversizedMessageIsDeadLetteredAsMalformedUnsent(t *testing.T) {
	e := newEnv(t)
	rec := sinktest.Start(t, sinktest.OK)
	e.publish(1) // "msg-0": 5 bytes
	e.start(e.config(rec.URL, func(c *config.Pipeline) { c.Sink.HTTP.MaxBodyBytes = 4 }))
	dead := e.deadLetters(1, 30*time.Second)
	if got := dead[0].Header.Get("Shaper-Reason"); got != "malformed" {
		t.Errorf("Shaper-Reason = %q; want malformed", got)
	}
	if got := rec.RequestCount(); got != 0 {
		t.Errorf("sink requests = %d; want 0", got)
	}
}

func TestWithoutADeadLetterTargetAFailedMessageIsNackedNotAcked(t *testing.T) {
	e := newEnv(t)
	rec := sinktest.Start(t, func(*http.Request, int) sinktest.Action {
		return sinktest.Action{Status: http.StatusBadRequest}
	})
	e.publish(1)
	e.start(e.config(rec.URL, func(c *config.Pipeline) {
		c.DeadLetter = nil
		c.Sink.HTTP.Retry.MaxBackoff = 200 * time.Millisecond // the nack delay
	}))
	// Nacked with a delay, the message comes back and is attempted again.
	testwait.For(t, 30*time.Second, "a redelivery", func() bool { return rec.RequestCount() >= 2 })
	if floor := e.consumer("shaper-test").AckFloor.Stream; floor != 0 {
		t.Errorf("ack floor = %d; want 0 (never acked without an outcome)", floor)
	}
}

func TestEveryRequestCarriesTheIdempotencyKeyAndConfiguredHeaders(t *testing.T) {
	e := newEnv(t)
	rec := sinktest.Start(t, sinktest.OK)
	e.publish(3)
	e.start(e.config(rec.URL, func(c *config.Pipeline) {
		c.Sink.HTTP.Method = http.MethodPut
		c.Sink.HTTP.Headers = map[string]string{"Content-Type": "application/json", "X-Psp": "acme"}
	}))
	testwait.For(t, 30*time.Second, "3 requests", func() bool { return rec.RequestCount() == 3 })
	// Requests 10ms apart may reach the sink in either order (each opens
	// its own connection); each must carry its own key and body.
	keys := map[string]bool{}
	for i, r := range rec.Requests() {
		seq, _ := strconv.Atoi(strings.TrimPrefix(r.Key, stream+"/"))
		keys[r.Key] = true
		if want := "msg-" + strconv.Itoa(seq-1); string(r.Body) != want {
			t.Errorf("request %d (Idempotency-Key %q): body %q; want %q", i, r.Key, string(r.Body), want)
		}
		if r.Header.Get("X-Psp") != "acme" || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("request %d: headers %v; want the configured ones", i, r.Header)
		}
	}
	for i := 1; i <= 3; i++ {
		if key := stream + "/" + strconv.Itoa(i); !keys[key] {
			t.Errorf("no request with Idempotency-Key %q; got %v", key, keys)
		}
	}
}

func TestAnUnreachableSinkIsRetriedThenDeadLetteredAsExhausted(t *testing.T) {
	e := newEnv(t)
	rec := sinktest.Start(t, sinktest.OK)
	url := rec.URL
	rec.Close() // nothing listens there any more: connection refused
	e.publish(2)
	p := e.start(e.config(url, func(c *config.Pipeline) {
		c.Sink.HTTP.Retry = shaper.RetryConfig{MaxAttempts: 3, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, MaxElapsed: time.Minute}
		// Off: with it, an unreachable sink opens the breaker and messages
		// wait, spending no attempts (TestAnOutage...).
		c.Sink.HTTP.Breaker.Failures = new(int)
	}))
	for _, m := range e.deadLetters(2, 30*time.Second) {
		if got := m.Header.Get("Shaper-Reason"); got != "exhausted" {
			t.Errorf("Shaper-Reason = %q; want exhausted", got)
		}
		if got := m.Header.Get("Shaper-Attempts"); got != "3" {
			t.Errorf("Shaper-Attempts = %q; want 3", got)
		}
		if got := m.Header.Get("Shaper-Error"); !strings.Contains(got, "connection refused") {
			t.Errorf("Shaper-Error = %q; want the network error", got)
		}
	}
	testwait.For(t, 10*time.Second, "acks", func() bool { return e.consumer("shaper-test").AckFloor.Stream == 2 })
	if got := p.metric("shaper_retries_total"); got != 4 {
		t.Errorf("shaper_retries_total = %v; want 4 (2 messages × 2 retries)", got)
	}
}

func TestReconfigureChangesTheRateInPlaceWithoutLosingMessages(t *testing.T) {
	e := newEnv(t)
	rec := sinktest.Start(t, sinktest.OK)
	const n = 100
	e.publish(n)
	cfg := e.config(rec.URL, func(c *config.Pipeline) { c.Rate.Limit = 10 })
	p := e.start(cfg)
	testwait.For(t, 10*time.Second, "a few requests", func() bool { return rec.RequestCount() >= 5 })

	faster := cfg
	faster.Rate.Limit = 50
	faster.Sink.HTTP = new(sinks.HTTPConfig)
	*faster.Sink.HTTP = *cfg.Sink.HTTP
	faster.Sink.HTTP.MaxInFlight = 32
	faster.Sink.HTTP.Timeout = 5 * time.Second
	if err := p.Reconfigure(faster.Core()); err != nil {
		t.Fatalf("Reconfigure = %v", err)
	}
	if st := p.Status(); st.Limit != 50 {
		t.Errorf("limit after Reconfigure = %v; want 50", st.Limit)
	}
	changed := time.Now()
	testwait.For(t, 20*time.Second, "every message delivered", func() bool { return p.Status().Outcomes[shaper.OutcomeDelivered] == n })
	if took := time.Since(changed); took > 4*time.Second {
		t.Errorf("the rest took %v after the change to 50/s; want about 2s", took)
	}
	if got := rec.RequestCount(); got != n {
		t.Errorf("sink requests = %d; want %d: nothing lost or repeated by the change", got, n)
	}

	modeChange := faster
	modeChange.Rate.Mode = shaper.ModeToken
	if err := p.Reconfigure(modeChange.Core()); !errors.Is(err, shaper.ErrNeedsRestart) {
		t.Errorf("Reconfigure(mode change) = %v; want ErrNeedsRestart", err)
	}
}

func TestADeadLetterTooLargeForItsTargetIsSentWithoutItsPayload(t *testing.T) {
	e := newEnv(t)
	// A stream on the dead-letter subject that takes no message over 300
	// bytes: the dead letter of a 200-byte message, with its Shaper-*
	// headers, does not fit.
	ctx := context.Background()
	dlq, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "DLQ", Subjects: []string{deadSubject}, MaxMsgSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	rec := sinktest.Start(t, func(*http.Request, int) sinktest.Action {
		return sinktest.Action{Status: http.StatusBadRequest, Body: "no such payment\n"}
	})
	if _, err := e.js.Publish(ctx, subject, []byte(strings.Repeat("p", 200))); err != nil {
		t.Fatal(err)
	}
	p := e.start(e.config(rec.URL, nil))
	testwait.For(t, 30*time.Second, "the ack", func() bool { return e.consumer("shaper-test").AckFloor.Stream == 1 })
	// What the stream stored (a core subscriber also saw the refused
	// full-size attempt go by).
	dead, err := dlq.GetMsg(ctx, 1)
	if err != nil {
		t.Fatalf("dead letter not stored: %v", err)
	}
	if len(dead.Data) != 0 || dead.Header.Get("Shaper-Payload-Omitted") != "200 bytes" || dead.Header.Get("Shaper-Reason") != "rejected" {
		t.Errorf("dead letter: %d bytes, headers %v; want no payload, Shaper-Payload-Omitted: 200 bytes, reason rejected", len(dead.Data), dead.Header)
	}
	if got := rec.RequestCount(); got != 1 {
		t.Errorf("sink requests = %d; want 1 (an outcome, not a loop)", got)
	}
	// The outcome is counted once the dead letter is published.
	testwait.For(t, 10*time.Second, "one dead_lettered outcome", func() bool {
		return p.Status().Outcomes[shaper.OutcomeDeadLettered] == 1
	})
}

// requestsAfter returns the requests that arrived at or after t.
func requestsAfter(reqs []sinktest.Request, t time.Time) []sinktest.Request {
	var out []sinktest.Request
	for _, r := range reqs {
		if !r.At.Before(t) {
			out = append(out, r)
		}
	}
	return out
}

// The reproducer of the jam: a full bucket at 200/s, the rate lowered to
// 0.01/s for 2s and restored. Under the old scheduler the slot taken at
// 0.01/s (100s out) was kept, and the restored rate was spaced from it: the
// sink got nothing for 100s and the bucket expired. Now the restored rate is
// in force at once.
func TestLoweringTheRateAndRestoringItResumesAtTheFullRateAtOnce(t *testing.T) {
	e := newEnv(t)
	rec := sinktest.Start(t, sinktest.OK)
	e.publish(2000)
	cfg := e.config(rec.URL, func(c *config.Pipeline) {
		c.Rate.Limit = 200
		c.Bucket.Capacity = 400
		c.Bucket.MaxQueueTime = 2 * time.Minute // 0.01/s is allowed: one slot per 100s fits in it
	})
	p := e.start(cfg)
	testwait.For(t, 10*time.Second, "the rate established", func() bool { return rec.RequestCount() >= 100 })

	if err := p.SetRate(0.01, 0); err != nil {
		t.Fatalf("SetRate(0.01) = %v", err)
	}
	lowered := time.Now()
	time.Sleep(2 * time.Second)
	if err := p.SetRate(200, 0); err != nil {
		t.Fatalf("SetRate(200) = %v", err)
	}
	restored := time.Now()

	// At 0.01/s at most the request whose slot came just before the change
	// and one more may go; then 200 more at 200/s take about 1s.
	if !testwait.Until(10*time.Second, func() bool { return len(requestsAfter(rec.Requests(), restored)) >= 200 }) {
		t.Fatalf("%d requests within 10s after the restore; want 200 (status %+v)", len(requestsAfter(rec.Requests(), restored)), p.Status())
	}
	if got := len(requestsAfter(rec.Requests(), lowered.Add(50*time.Millisecond))) - len(requestsAfter(rec.Requests(), restored)); got > 1 {
		t.Errorf("requests while the rate was 0.01/s = %d; want at most 1", got)
	}
	after := requestsAfter(rec.Requests(), restored)
	t.Logf("after the restore: first request in %v, 200 requests in %v, expired %d",
		after[0].At.Sub(restored).Round(time.Microsecond), after[199].At.Sub(after[0].At).Round(time.Millisecond), p.Status().Outcomes[shaper.OutcomeExpired])
	// One interval is 5ms; the bounds are generous for a loaded machine.
	if first := after[0].At.Sub(restored); first > 250*time.Millisecond {
		t.Errorf("first request %v after the restore; want within one interval (5ms; 250ms allowed)", first)
	}
	if took := after[199].At.Sub(after[0].At); took > 1500*time.Millisecond || took < 900*time.Millisecond {
		t.Errorf("200 requests after the restore took %v; want about 1s at 200/s", took)
	}
	if got := p.Status().Outcomes[shaper.OutcomeExpired]; got != 0 {
		t.Errorf("expired = %d; want 0: nothing waited past max_queue_time (2m)", got)
	}
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
	// A request already in flight at the pause may still arrive.
	if !testwait.Holds(2*time.Second, func() bool { return len(rec.Between(paused.Add(50*time.Millisecond), time.Now())) == 0 }) {
		t.Errorf("%d requests while paused; want none", len(rec.Between(paused.Add(50*time.Millisecond), time.Now())))
	}
	if got := p.metric("shaper_paused"); got != 1 {
		t.Errorf("shaper_paused = %v while paused; want 1", got)
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
