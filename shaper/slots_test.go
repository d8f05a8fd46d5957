package shaper_test

import (
	"testing"
	"time"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/shaper"
)

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
	deadline := time.Now().Add(10 * time.Second)
	for len(requestsAfter(rec.Requests(), restored)) < 200 {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests within 10s after the restore; want 200 (status %+v)", len(requestsAfter(rec.Requests(), restored)), p.Status())
		}
		time.Sleep(20 * time.Millisecond)
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
