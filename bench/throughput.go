package main

import (
	"context"
	"fmt"
	"time"
)

// ThroughputSection is the ceiling with the limit out of the way: a very
// high limit, a `shaper run` child, a backlog in the broker and the sink
// on loopback, all on the same machine.
type ThroughputSection struct {
	Setup string           `json:"setup"`
	Load  Load             `json:"load"`
	Cases []ThroughputCase `json:"cases"`
}

// ThroughputCase is one source at one max_in_flight.
type ThroughputCase struct {
	Source      string  `json:"source"`
	MaxInFlight int     `json:"max_in_flight"`
	Seconds     float64 `json:"seconds"`
	Delivered   int64   `json:"delivered"`
	Rate        float64 `json:"msgs_per_sec"`
	ChildCost
	// Exhausted is set when the backlog ran out inside the window: the
	// rate is then a lower bound.
	Exhausted bool `json:"backlog_exhausted,omitempty"`
}

// throughputBacklog is how many messages each source holds for this
// section; every case starts again from the beginning (a new group or
// durable).
const throughputBacklog = 200_000

func runThroughput(ctx context.Context, o *options, env *environment) (*ThroughputSection, error) {
	probe := startLoadProbe()
	sec := &ThroughputSection{Setup: "limit 1000000/s (off), bucket capacity 1000, a `shaper run` child; the broker (kfake or embedded nats-server) and the HTTP sink run in the harness process on the same 2 cores"}
	window := 4 * time.Second
	if o.quick {
		window = 2 * time.Second
	}
	if err := env.js.stream(ctx, "THROUGH"); err != nil {
		return nil, err
	}
	progress("throughput: publishing %d messages to JetStream", throughputBacklog)
	if err := env.js.publish(ctx, "THROUGH", 0, throughputBacklog, nil); err != nil {
		return nil, err
	}
	for _, source := range []string{"kafka", "jetstream"} {
		for _, inFlight := range []int{1, 8, 64} {
			name := fmt.Sprintf("through-%s-%d", source, inFlight)
			var src, label string
			switch source {
			case "kafka":
				label = "Kafka (kfake)"
				src = env.kafka.sourceYAML(topicThroughput, "shaper-"+name, true)
			default:
				label = "NATS JetStream"
				src = fmt.Sprintf(`
      nats: {url: %q, subject: THROUGH.in, stream: THROUGH, durable: %s}`, env.js.URL(), name)
			}
			c, err := throughputCase(ctx, env, o, name, src, inFlight, window)
			if err != nil {
				return nil, fmt.Errorf("throughput %s max_in_flight %d: %w", label, inFlight, err)
			}
			c.Source = label
			progress("throughput %-14s max_in_flight %2d: %6.0f msg/s, shaper %.1f µs/msg (%.0f%% of a core), broker+sink %.1f µs/msg",
				label, inFlight, c.Rate, c.ShaperUs, c.ShaperPct, c.HarnessUs)
			sec.Cases = append(sec.Cases, c)
		}
	}
	env.js.deleteStream(ctx, "THROUGH")
	sec.Load = probe.stop()
	return sec, nil
}

func throughputCase(ctx context.Context, env *environment, o *options, name, src string, inFlight int, window time.Duration) (ThroughputCase, error) {
	c := ThroughputCase{MaxInFlight: inFlight}
	sink, err := startSink(false)
	if err != nil {
		return c, err
	}
	defer sink.close()
	ch, err := startChild(env.bin, o.tmp, name, fmt.Sprintf(`
  - name: through
    source:%s
    bucket: {capacity: 1000, max_queue_time: 1m}
    rate: {limit: 1000000}
    sink:
      http: {url: %q, max_in_flight: %d}
`, src, sink.URL, inFlight))
	if err != nil {
		return c, err
	}
	defer ch.kill()
	if !sink.waitCount(ctx, 3000, time.Minute) { // past the group join and the first fetches
		return c, fmt.Errorf("no delivery within a minute; log:\n%s", ch.tail())
	}
	m := measureChild(ch, sink, window)
	c.Seconds, c.Delivered, c.Rate, c.ChildCost = m.seconds, m.delivered, m.rate, m.cost
	c.Exhausted = sink.count.Load() >= throughputBacklog
	ch.kill() // a drain would only add time; nothing here needs the commits
	return c, nil
}
