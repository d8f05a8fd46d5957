package browser_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/fleet"
	"github.com/shaper-dev/shaper/internal/natstest"
	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/sinks"
	"github.com/shaper-dev/shaper/sources"
)

// The stream the pipeline reads, on the embedded nats-server of a test.
const (
	stream  = "CALLBACKS"
	subject = "callbacks.psp"
)

// jetStream starts an embedded nats-server with the stream and returns its
// URL.
func jetStream(t *testing.T) string {
	t.Helper()
	url := natstest.Start(t).ClientURL()
	natstest.Stream(t, url, stream, "callbacks.>")
	return url
}

// startPipeline runs, until the test ends, the pipeline "test" from the
// stream at natsURL to sinkURL, after mutate, as the daemon runs it (a
// fleet of one), and serves its admin API with token on 127.0.0.1. It
// returns the pipeline and the admin server.
func startPipeline(t *testing.T, natsURL, sinkURL, token string, mutate func(*config.Pipeline)) (*shaper.Pipeline, *httptest.Server) {
	t.Helper()
	cfg := &config.File{
		Shutdown: config.ShutdownConfig{DrainTimeout: 2 * time.Second},
		Pipelines: []config.Pipeline{{
			Name:   "test",
			Source: config.Source{NATS: &sources.NATSConfig{URL: natsURL, Subject: subject, Stream: stream, AckWait: 5 * time.Second}},
			Bucket: shaper.BucketConfig{Capacity: 1000, MaxQueueTime: time.Minute},
			Rate:   config.Rate{RateConfig: shaper.RateConfig{Limit: 100}},
			Sink:   config.Sink{HTTP: &sinks.HTTPConfig{URL: sinkURL}},
		}},
	}
	mutate(&cfg.Pipelines[0])
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	reg := prometheus.NewRegistry()
	f, err := fleet.New(cfg, nil, buildParts, shaper.NewMetrics(reg), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, drain := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Run(ctx, context.Background(), nil)
	}()
	t.Cleanup(func() {
		drain()
		<-done // within shutdown.drain_timeout, after which what is left is nacked
	})
	admin := httptest.NewServer(shaper.Admin(f.Pipelines, reg, token, shaper.AdminHosts{}, nil))
	t.Cleanup(admin.Close)
	return f.Pipelines()[0], admin
}

// buildParts is the fleet's Builder: a local limiter, a JetStream source
// and an HTTP sink, with the per-key and per-destination limiters the
// config asks for. A part that failed is left nil, for the fleet to close
// the others.
func buildParts(pc config.Pipeline) (shaper.Parts, error) {
	r := pc.Rate
	var parts shaper.Parts
	lim, err := limiter.New(limiter.Config{Mode: limiter.Mode(r.Mode), Limit: r.Limit, Burst: *r.Burst, Warmup: r.Warmup}, time.Now())
	if err != nil {
		return parts, err
	}
	parts.Limiter = lim
	src, err := sources.NewJetStream(*pc.Source.NATS, pc.Pending(), pc.Name, nil)
	if err != nil {
		return parts, err
	}
	parts.Source = src
	sink, err := sinks.NewHTTP(*pc.Sink.HTTP)
	if err != nil {
		return parts, err
	}
	parts.Sink = sink
	parts.KeyLimiter, parts.DestinationLimiter = r.KeyLimiter(), r.DestinationLimiter()
	return parts, nil
}
