package shaper_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/sinks"
	"github.com/shaper-dev/shaper/sources"
)

// Example wires one pipeline by hand, the way cmd/shaper does from a config
// file: a JetStream source, an HTTP sink, a leaky limiter at 20/s.
func Example() {
	// A NATS server with a stream holding three callbacks, and an HTTP sink.
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	go ns.Start()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	ns.ReadyForConnections(10 * time.Second)
	nc, _ := nats.Connect(ns.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	_, _ = js.CreateStream(ctx, jetstream.StreamConfig{Name: "CALLBACKS", Subjects: []string{"callbacks.>"}})
	for i := range 3 {
		_, _ = js.Publish(ctx, "callbacks.psp", []byte(fmt.Sprintf(`{"payment":%d}`, i)))
	}
	received := make(chan string, 3)
	sinkSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received <- r.Header.Get("Idempotency-Key")
	}))
	defer sinkSrv.Close()

	// The config, defaulted and validated as Load would.
	cfg := config.File{Pipelines: []config.Pipeline{{
		Name:   "psp",
		Source: config.Source{NATS: &sources.NATSConfig{URL: ns.ClientURL(), Subject: "callbacks.psp", Stream: "CALLBACKS"}},
		Rate:   config.Rate{RateConfig: shaper.RateConfig{Limit: 20}},
		Sink:   config.Sink{HTTP: &sinks.HTTPConfig{URL: sinkSrv.URL}},
	}}}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	pc := cfg.Pipelines[0]

	// The parts, then the pipeline.
	lim, _ := limiter.New(limiter.Config{Mode: limiter.Leaky, Limit: pc.Rate.Limit, Burst: 1}, time.Now())
	src, _ := sources.NewJetStream(*pc.Source.NATS, pc.Bucket.Capacity, "example", nil)
	sink, _ := sinks.NewHTTP(*pc.Sink.HTTP)
	p := shaper.New(pc.Core(), shaper.Parts{
		Source: src, Sink: sink, Limiter: lim,
		Metrics: shaper.NewMetrics(prometheus.NewRegistry()), DrainTimeout: 5 * time.Second,
	})
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()

	for range 3 {
		fmt.Println(<-received)
	}
	p.Drain() // a graceful stop: Run returns once every message is settled
	fmt.Println(<-done, p.Status().Outcomes[shaper.OutcomeDelivered])
	// Output:
	// CALLBACKS/1
	// CALLBACKS/2
	// CALLBACKS/3
	// <nil> 3
}
