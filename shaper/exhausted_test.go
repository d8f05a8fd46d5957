package shaper_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/shaper"
)

// boundedFakes is fakes that end: once its queue is empty, Fetch returns
// io.EOF, as a replay's range does.
type boundedFakes struct{ *fakes }

func (b boundedFakes) Fetch(ctx context.Context, max int) ([]*shaper.Message, error) {
	b.mu.Lock()
	empty := len(b.queue) == 0
	b.mu.Unlock()
	if empty {
		return nil, io.EOF
	}
	return b.fakes.Fetch(ctx, max)
}

func TestAnExhaustedSourceEndsRunOnceEveryMessageIsSettled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakes(50)
		f.respond = func(m *shaper.Message, n int) (time.Duration, error) {
			if m.ID == "m49" && n < 3 { // the last one is retried twice: Run must wait for it
				return 0, errors.New("connection reset")
			}
			return 0, nil
		}
		lim, err := limiter.New(limiter.Config{Mode: limiter.Leaky, Limit: 100, Burst: 1}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		cfg := shaper.PipelineConfig{Name: "bounded", Bucket: shaper.BucketConfig{Capacity: 10, MaxQueueTime: time.Minute},
			Rate: shaper.RateConfig{Limit: 100}, Delivery: shaper.DeliveryConfig{}}
		cfg.SetDefaults()
		p := shaper.New(cfg, shaper.Parts{Source: boundedFakes{f}, Sink: fakeSink{f}, Limiter: lim, Clock: bubbleClock{},
			Metrics: shaper.NewMetrics(prometheus.NewRegistry()), DrainTimeout: time.Millisecond})
		start := time.Now()
		if err := p.Run(context.Background()); err != nil { // no Drain: the source's end ends it
			t.Fatalf("Run = %v", err)
		}
		if got := len(f.of("ack")); got != 50 {
			t.Errorf("%d acks when Run returned; want all 50", got)
		}
		if got := len(f.of("nack")); got != 0 {
			t.Errorf("%d nacks; want none (the end of the source is no drain: nothing is cut short)", got)
		}
		if got := len(f.of("send")); got != 52 {
			t.Errorf("%d sends; want 52 (50 and two retries)", got)
		}
		if got := p.Status().Outcomes[shaper.OutcomeDelivered]; got != 50 {
			t.Errorf("delivered = %d; want 50", got)
		}
		// 52 departures at 100/s take 0.51 s; the retries' backoff may add
		// to it, and DrainTimeout (1ms) must not have cut it short.
		if took := time.Since(start); took < 510*time.Millisecond {
			t.Errorf("Run took %v; want at least the 0.51 s of 52 departures at 100/s", took)
		}
	})
}
