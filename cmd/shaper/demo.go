//go:build !nodemo

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/shaper-dev/shaper/shaper"
)

// demoCmd shows shaping live with nothing installed: an embedded broker
// (NATS JetStream, or Kafka as kfake), an embedded HTTP sink, and a real
// pipeline between them, fed one burst. The release build (-tags nodemo: the
// container image, make build) leaves the demo and its brokers out and has
// the stand-in of demo_nodemo.go instead.
func demoCmd(ctx context.Context, args []string, g *globals, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	rate := fs.Float64("rate", 25, "requests per second to the sink")
	messages := fs.Int("messages", 500, "messages in the burst")
	mode := fs.String("mode", shaper.ModeLeaky, "leaky or token")
	burst := fs.Int("burst", 0, "token mode: requests at once after idle (default: one second's worth)")
	duration := fs.Duration("duration", 0, "stop after this long (default: when every message is delivered)")
	source := fs.String("source", "nats", "nats (embedded JetStream) or kafka (in-process kfake)")
	g.logLevel = "warn" // the demo's own lines tell the story; --log-level info shows the daemon's
	if err := parseFlags(fs, args, g, stderr); err != nil {
		return err
	}
	log, err := g.logger(stderr)
	if err != nil {
		return err
	}
	if *messages < 1 {
		return fmt.Errorf("%w: demo: --messages must be >= 1, got %d", errUsage, *messages)
	}
	var broker demoBroker
	switch *source {
	case "nats":
		broker, err = startNATSDemo(ctx)
	case "kafka":
		broker, err = startKafkaDemo()
	default:
		return fmt.Errorf("%w: demo: --source: want nats or kafka, got %q", errUsage, *source)
	}
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer broker.close()

	var sink demoSink
	sinkLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo: sink: %w", err)
	}
	sinkSrv := &http.Server{Handler: &sink, ReadHeaderTimeout: 5 * time.Second}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { _ = sinkSrv.Serve(sinkLn) }) // ends with Close below
	defer sinkSrv.Close()

	cfg := &shaper.Config{
		Admin:    shaper.AdminConfig{Listen: "127.0.0.1:0"},
		Shutdown: shaper.ShutdownConfig{DrainTimeout: 5 * time.Second},
		Pipelines: []shaper.PipelineConfig{{
			Name:   "demo",
			Source: broker.source(),
			Bucket: shaper.BucketConfig{
				Capacity:     1000,
				MaxQueueTime: time.Duration(float64(*messages)/(*rate)*float64(time.Second)) + 10*time.Second,
			},
			Rate: shaper.RateConfig{Mode: *mode, Limit: *rate},
			Sink: shaper.SinkConfig{HTTP: &shaper.HTTPSinkConfig{
				URL:            "http://" + sinkLn.Addr().String() + "/callback",
				Headers:        map[string]string{"Content-Type": "application/json"},
				DeliveryConfig: shaper.DeliveryConfig{MaxInFlight: 4},
			}},
		}},
	}
	if *burst != 0 {
		cfg.Pipelines[0].Rate.Burst = burst
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: demo:\n%v", errUsage, err)
	}

	d, err := newDaemon(cfg, log)
	if err != nil {
		return err
	}
	adminLn, err := d.listen()
	if err != nil {
		d.closeAll()
		return err
	}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	force, forceStop := context.WithCancel(context.WithoutCancel(ctx))
	defer forceStop()
	served := make(chan error, 1)
	go func() { served <- d.serve(runCtx, force, adminLn) }()

	start := time.Now()
	bodies := make([][]byte, *messages)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"payment":%d,"status":"settled"}`, i)
	}
	if err := broker.publish(ctx, bodies); err != nil {
		stopRun()
		<-served
		return fmt.Errorf("demo: publish: %w", err)
	}

	cfgRate := cfg.Pipelines[0].Rate
	fmt.Fprintf(stdout, "shaper demo: a burst of %d messages from %s, shaped to %g/s (%s mode, burst %d)\n",
		*messages, broker, cfgRate.Limit, cfgRate.Mode, *cfgRate.Burst)
	fmt.Fprintf(stdout, "metrics and admin API: http://%s/metrics  (Ctrl-C stops)\n\n", adminLn.Addr())
	fmt.Fprintf(stdout, "%6s %9s %10s %6s %9s %10s\n", "time", "received", "delivered", "depth", "p99 wait", "sink rate")

	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	var prevWait *dto.Histogram
	prevSink := int64(0)
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-ticker.C:
		}
		st := d.list()[0].Status()
		wait := queueWait(d)
		sunk := sink.requests.Load()
		fmt.Fprintf(stdout, "%5.0fs %9.0f %10d %6d %9s %8d/s\n",
			time.Since(start).Seconds(), counterValue(d, "shaper_messages_received_total"),
			st.Outcomes[shaper.OutcomeDelivered], st.Depth, p99(prevWait, wait), sunk-prevSink)
		prevWait, prevSink = wait, sunk
		if st.Outcomes[shaper.OutcomeDelivered] >= int64(*messages) ||
			*duration > 0 && time.Since(start) >= *duration {
			done = true
		}
	}
	stopRun()
	err = <-served
	fmt.Fprintf(stdout, "\ndelivered %d of %d to the sink in %.1fs\n", sink.requests.Load(), *messages, time.Since(start).Seconds())
	return err
}

// demoSink is the embedded HTTP sink: it answers 204 and counts.
type demoSink struct {
	requests atomic.Int64
}

func (s *demoSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	s.requests.Add(1)
	w.WriteHeader(http.StatusNoContent)
}

// counterValue sums a counter of the daemon's registry.
func counterValue(d *daemon, name string) float64 {
	families, _ := d.registry.Gather() // in-process collectors do not fail
	sum := 0.0
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// queueWait returns the queue-wait histogram of the demo's pipeline.
func queueWait(d *daemon) *dto.Histogram {
	families, _ := d.registry.Gather()
	for _, f := range families {
		if f.GetName() == "shaper_queue_wait_seconds" && len(f.GetMetric()) > 0 {
			return f.GetMetric()[0].GetHistogram()
		}
	}
	return nil
}

// p99 estimates the 99th percentile of the observations made between two
// snapshots of a histogram, interpolating within a bucket the way PromQL's
// histogram_quantile does; "-" when there were none.
func p99(prev, cur *dto.Histogram) string {
	if cur == nil {
		return "-"
	}
	count := func(h *dto.Histogram, i int) float64 {
		if h == nil {
			return 0
		}
		return float64(h.GetBucket()[i].GetCumulativeCount())
	}
	buckets := cur.GetBucket()
	total := float64(cur.GetSampleCount())
	if prev != nil {
		total -= float64(prev.GetSampleCount())
	}
	if total == 0 {
		return "-"
	}
	rank := 0.99 * total
	lower, below := 0.0, 0.0
	for i, b := range buckets {
		n := count(cur, i) - count(prev, i)
		if n >= rank {
			upper := b.GetUpperBound()
			v := lower + (upper-lower)*(rank-below)/math.Max(n-below, 1)
			return strconv.FormatFloat(v, 'f', 2, 64) + "s"
		}
		lower, below = b.GetUpperBound(), n
	}
	return ">" + strconv.FormatFloat(lower, 'f', 0, 64) + "s"
}
