package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/embedded"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/sources"
)

// BenchmarkPipelineCPU runs the real pipeline in this process, from a
// Kafka (kfake) or JetStream backlog of b.N messages to the HTTP sink, so
// that `go test -cpuprofile` shows where a delivered message's CPU goes:
//
//	go test -run '^$' -bench 'PipelineCPU/kafka/limit=1000' -benchtime 5000x -cpuprofile /tmp/cpu.out ./bench/
//	go tool pprof -top -focus 'shaper-dev/shaper/(shaper|sources|sinks|limiter)' /tmp/cpu.out
//
// The harness measures the same path with `shaper run` as a child process;
// here the broker and the sink share the process, and cpu-µs/msg counts
// all three. Each op is one message delivered.
func BenchmarkPipelineCPU(b *testing.B) {
	cases := []struct {
		source   string
		limit    float64
		inFlight int
	}{
		{"kafka", 1000, 8},
		{"kafka", 1e6, 8},
		{"kafka", 1e6, 64},
		{"jetstream", 1000, 8},
		{"jetstream", 1e6, 8},
	}
	for i, c := range cases {
		limit := fmt.Sprint(c.limit)
		if c.limit >= 1e6 {
			limit = "off"
		}
		b.Run(fmt.Sprintf("%s/limit=%s/max_in_flight=%d", c.source, limit, c.inFlight), func(b *testing.B) {
			ctx := context.Background()
			name := fmt.Sprintf("cpu%d", i)
			env := &bench{o: &options{}}
			var src config.Source
			switch c.source {
			case "kafka":
				k, err := embedded.StartKafka(kafkaPartitions, name)
				if err != nil {
					b.Fatal(err)
				}
				defer k.Close()
				env.kafka = k
				if err := env.publishKafka(ctx, name, b.N); err != nil {
					b.Fatal(err)
				}
				src = config.Source{Kafka: sources.InProcessKafka(k.Addrs(), name, "shaper-"+name)}
			default:
				js, err := startJetStream()
				if err != nil {
					b.Fatal(err)
				}
				defer js.Close()
				env.js = js
				drop, err := env.stream(ctx, name, b.N)
				if err != nil {
					b.Fatal(err)
				}
				defer drop()
				src = env.natsSource(name, "shaper-"+name)
			}
			sink, err := startSink(false)
			if err != nil {
				b.Fatal(err)
			}
			defer sink.close()
			b.ReportAllocs()
			b.ResetTimer()
			start, cpu0 := time.Now(), selfCPU()
			r, err := startPipeline(ctx, pipelineSpec{
				name: name, source: src, sinkURL: sink.URL,
				rate:     shaper.RateConfig{Mode: shaper.ModeLeaky, Limit: c.limit},
				capacity: 1000, maxInFlight: c.inFlight,
			})
			if err != nil {
				b.Fatal(err)
			}
			ok := waitFor(ctx, 10*time.Minute, sink.reached(int64(b.N)))
			cpu, took := selfCPU()-cpu0, time.Since(start)
			b.StopTimer()
			if err := r.stop(); err != nil {
				b.Logf("stop: %v", err)
			}
			if !ok {
				b.Fatalf("%d of %d delivered", sink.count.Load(), b.N)
			}
			b.ReportMetric(float64(b.N)/took.Seconds(), "msgs/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/msg")
		})
	}
}
