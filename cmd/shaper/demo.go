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

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/gather"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/sinks"
)

// demoCmd shows shaping live with nothing installed: an embedded broker
// (NATS JetStream, or Kafka as kfake), an embedded HTTP sink, and a real
// pipeline between them, fed one burst. The release build (-tags nodemo: the
// container image, make build) leaves the demo and its brokers out and has
// the stand-in of demo_nodemo.go instead.
func demoCmd(ctx context.Context, args []string, g *globals, stdout, stderr io.Writer) error {
	opts, err := parseDemoFlags(args, g, stderr)
	if err != nil {
		return err
	}
	log, err := g.logger(stderr)
	if err != nil {
		return err
	}
	var broker demoBroker
	switch opts.source {
	case "nats":
		broker, err = startNATSDemo(ctx)
	case "kafka":
		broker, err = startKafkaDemo()
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

	cfg, err := opts.config(broker.source(), "http://"+sinkLn.Addr().String()+"/callback")
	if err != nil {
		return err
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
	// As in run: a signal drains, a second one (or SIGQUIT) stops at once.
	force, forceStop := forceOnSecondSignal(ctx, log)
	defer forceStop()
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	defer context.AfterFunc(force, stopRun)()
	served := make(chan error, 1)
	go func() { served <- d.serve(runCtx, force, adminLn) }()

	start := time.Now()
	if err := broker.publish(ctx, opts.bodies()); err != nil {
		stopRun()
		<-served
		return fmt.Errorf("demo: publish: %w", err)
	}
	cfgRate := cfg.Pipelines[0].Rate
	fmt.Fprintf(stdout, "shaper demo: a burst of %d messages from %s, shaped to %g/s (%s mode, burst %d)\n",
		opts.messages, broker, cfgRate.Limit, cfgRate.Mode, *cfgRate.Burst)
	fmt.Fprintf(stdout, "status page: http://%[1]s/  metrics: http://%[1]s/metrics  (Ctrl-C stops)\n\n", adminLn.Addr())
	if ended := opts.report(runCtx, stdout, d, &sink, start); ended != "" {
		log.Info(ended + ": draining")
	}
	stopRun()
	err = <-served
	fmt.Fprintf(stdout, "\ndelivered %d of %d to the sink in %.1fs\n", sink.requests.Load(), opts.messages, time.Since(start).Seconds())
	return err
}

// demoOptions are the demo's flags.
type demoOptions struct {
	rate     float64
	messages int
	mode     string
	burst    int
	duration time.Duration
	source   string
}

func parseDemoFlags(args []string, g *globals, stderr io.Writer) (demoOptions, error) {
	var o demoOptions
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.Float64Var(&o.rate, "rate", 25, "requests per second to the sink")
	fs.IntVar(&o.messages, "messages", 500, "messages in the burst")
	fs.StringVar(&o.mode, "mode", shaper.ModeLeaky, "leaky or token")
	fs.IntVar(&o.burst, "burst", 0, "token mode: requests at once after idle (default: one second's worth)")
	fs.DurationVar(&o.duration, "duration", 0, "stop after this long (default: when every message is delivered)")
	fs.StringVar(&o.source, "source", "nats", "nats (embedded JetStream) or kafka (in-process kfake)")
	g.logLevel = "warn" // the demo's own lines tell the story; --log-level info shows the daemon's
	if err := parseFlags(fs, args, g, stderr); err != nil {
		return o, err
	}
	if o.messages < 1 {
		return o, fmt.Errorf("%w: demo: --messages must be >= 1, got %d", errUsage, o.messages)
	}
	if o.source != "nats" && o.source != "kafka" {
		return o, fmt.Errorf("%w: demo: --source: want nats or kafka, got %q", errUsage, o.source)
	}
	return o, nil
}

// config is the demo's one pipeline, from source to sinkURL, validated.
func (o demoOptions) config(source config.Source, sinkURL string) (*config.File, error) {
	cfg := &config.File{
		Admin:    config.AdminConfig{Listen: "127.0.0.1:0"},
		Shutdown: config.ShutdownConfig{DrainTimeout: 5 * time.Second},
		Pipelines: []config.Pipeline{{
			Name:   "demo",
			Source: source,
			Bucket: shaper.BucketConfig{
				Capacity:     1000,
				MaxQueueTime: time.Duration(float64(o.messages)/o.rate*float64(time.Second)) + 10*time.Second,
			},
			Rate: config.Rate{RateConfig: shaper.RateConfig{Mode: o.mode, Limit: o.rate}},
			Sink: config.Sink{HTTP: &sinks.HTTPConfig{
				URL:            sinkURL,
				Headers:        map[string]string{"Content-Type": "application/json"},
				DeliveryConfig: shaper.DeliveryConfig{MaxInFlight: 4},
			}},
		}},
	}
	if o.burst != 0 {
		cfg.Pipelines[0].Rate.Burst = &o.burst
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: demo:\n%v", errUsage, err)
	}
	return cfg, nil
}

// bodies are the burst's payment callbacks.
func (o demoOptions) bodies() [][]byte {
	bodies := make([][]byte, o.messages)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"payment":%d,"status":"settled"}`, i)
	}
	return bodies
}

// report prints a line a second until every message is delivered, the
// duration has passed, or ctx ends, and says which of the first two
// ended it: "" when ctx did (a signal, logged where it was received).
func (o demoOptions) report(ctx context.Context, stdout io.Writer, d *daemon, sink *demoSink, start time.Time) (ended string) {
	fmt.Fprintf(stdout, "%6s %9s %10s %6s %9s %10s\n", "time", "received", "delivered", "depth", "p99 wait", "sink rate")
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	var prevWait *dto.Histogram
	prevSink := int64(0)
	for {
		select {
		case <-ctx.Done():
		case <-ticker.C:
		}
		st := d.list()[0].Status()
		wait := queueWait(d)
		sunk := sink.requests.Load()
		fmt.Fprintf(stdout, "%5.0fs %9.0f %10d %6d %9s %8d/s\n",
			time.Since(start).Seconds(), gather.Sum(d.registry, "shaper_messages_received_total"),
			st.Outcomes[shaper.OutcomeDelivered], st.Depth, p99(prevWait, wait), sunk-prevSink)
		prevWait, prevSink = wait, sunk
		switch {
		case ctx.Err() != nil:
			return ""
		case st.Outcomes[shaper.OutcomeDelivered] >= int64(o.messages):
			return "every message delivered"
		case o.duration > 0 && time.Since(start) >= o.duration:
			return "demo duration passed"
		}
	}
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
