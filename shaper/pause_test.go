package shaper_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/shaper"
)

// The operator's pause on real JetStream and a real sink: the push-back
// rules themselves run on a fake clock (breaker_test.go, destinations_test.go).

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
