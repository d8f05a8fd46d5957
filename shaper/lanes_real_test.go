package shaper_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/shaper"
)

// One merchant's flood of 2000 published before another's 50, leaky
// 100/s, per_key_capacity 100: the flood's further messages wait in
// JetStream (handed back, no attempt), the other merchant's get in and
// take every other departure, and nothing is lost.
func TestAFloodingKeyDoesNotHoldBackAnotherOnJetStream(t *testing.T) {
	t.Parallel()
	const flood, few = 2000, 50
	e := newEnv(t)
	rec := sinktest.Start(t, sinktest.OK)
	e.publishKeyed("A", flood)
	e.publishKeyed("B", few)
	p := e.start(e.config(rec.URL, func(c *config.Pipeline) {
		c.Rate.Limit = 100
		c.Key = &shaper.KeyConfig{From: "header:Merchant-Id"}
		c.Bucket.PerKeyCapacity = 100
		c.Bucket.MaxQueueTime = 5 * time.Minute
	}))
	testwait.For(t, 30*time.Second, "every B delivered", func() bool {
		n := 0
		for _, r := range rec.Requests() {
			if bytes.HasPrefix(r.Body, []byte("B-")) && r.Status == 200 {
				n++
			}
		}
		return n == few
	})
	var first, firstB, lastB time.Time
	for _, r := range rec.Requests() {
		if first.IsZero() || r.At.Before(first) {
			first = r.At
		}
		if bytes.HasPrefix(r.Body, []byte("B-")) {
			if firstB.IsZero() || r.At.Before(firstB) {
				firstB = r.At
			}
			if r.At.After(lastB) {
				lastB = r.At
			}
		}
	}
	t.Logf("first B %v after the first delivery; every B within %v of the first B; lanes %v, %v handed back (lane full)",
		firstB.Sub(first).Round(time.Millisecond), lastB.Sub(firstB).Round(time.Millisecond), p.Keys(10), p.metric("shaper_messages_nacked_total"))
	if d := firstB.Sub(first); d > 4*time.Second {
		t.Errorf("first B %v after the first delivery; want within 4s", d)
	}
	if d := lastB.Sub(firstB); d > 3*time.Second {
		t.Errorf("every B within %v of the first B; want within 3s", d)
	}
	testwait.For(t, 60*time.Second, "every message delivered", func() bool { return rec.DeliveredCount() == flood+few })
	if dup := rec.Duplicates(); len(dup) > 0 {
		t.Errorf("sent more than once: %v", dup)
	}
	e.noDeadLetters()
}
