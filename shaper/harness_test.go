package shaper_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/fleet"
	"github.com/shaper-dev/shaper/internal/gather"
	"github.com/shaper-dev/shaper/internal/natstest"
	"github.com/shaper-dev/shaper/internal/tuning"
	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/sinks"
	"github.com/shaper-dev/shaper/sources"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// env is a JetStream stream with a message subject and a dead-letter
// subject, on an embedded nats-server.
type env struct {
	t    testing.TB
	url  string
	nc   *nats.Conn
	js   jetstream.JetStream
	dead chan *nats.Msg // messages published to the dead-letter subject
}

const (
	stream      = "CALLBACKS"
	subject     = "callbacks.psp"
	deadSubject = "dlq.psp"
)

func newEnv(t testing.TB) *env {
	s := natstest.Start(t)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"callbacks.>"}}); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, url: s.ClientURL(), nc: nc, js: js, dead: make(chan *nats.Msg, 1000)}
	sub, err := nc.ChanSubscribe(deadSubject, e.dead)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return e
}

// publish puts n messages with bodies "msg-0".. into the stream.
func (e *env) publish(n int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range n {
		if _, err := e.js.Publish(ctx, subject, []byte(fmt.Sprintf("msg-%d", i))); err != nil {
			e.t.Fatal(err)
		}
	}
}

// publishKeyed puts n messages with header Merchant-Id: key and bodies
// key+"-0".. into the stream.
func (e *env) publishKeyed(key string, n int) { e.publishHeader("Merchant-Id", key, key, n) }

// publishHeader puts n messages with header name: value and bodies
// body+"-0".. into the stream.
func (e *env) publishHeader(name, value, body string, n int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		m := &nats.Msg{Subject: subject, Data: fmt.Appendf(nil, "%s-%d", body, i), Header: nats.Header{name: {value}}}
		if _, err := e.js.PublishMsg(ctx, m); err != nil {
			e.t.Fatal(err)
		}
	}
}

// consumer returns the durable consumer's state: what was delivered and acked.
func (e *env) consumer(name string) *jetstream.ConsumerInfo {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := e.js.Consumer(ctx, stream, name)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return info
}

// config returns a pipeline config from the stream to sinkURL with a
// dead-letter subject, after mutate, defaulted and validated.
func (e *env) config(sinkURL string, mutate func(*config.Pipeline)) config.Pipeline {
	e.t.Helper()
	cfg := config.File{Pipelines: []config.Pipeline{{
		Name:       "test",
		Source:     config.Source{NATS: &sources.NATSConfig{URL: e.url, Subject: subject, Stream: stream, AckWait: 5 * time.Second}},
		Bucket:     shaper.BucketConfig{Capacity: 1000, MaxQueueTime: time.Minute},
		Rate:       config.Rate{RateConfig: shaper.RateConfig{Limit: 100}},
		Sink:       config.Sink{HTTP: &sinks.HTTPConfig{URL: sinkURL}},
		DeadLetter: &config.DeadLetter{NATS: &sinks.NATSPublisherConfig{URL: e.url, Subject: deadSubject}},
	}}}
	if mutate != nil {
		mutate(&cfg.Pipelines[0])
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		e.t.Fatalf("config: %v", err)
	}
	return cfg.Pipelines[0]
}

// running is a pipeline running in the background of a test.
type running struct {
	*shaper.Pipeline
	registry *prometheus.Registry
	cancel   context.CancelFunc
	done     chan error
}

// start wires real parts for cfg and runs the pipeline until the test ends.
func (e *env) start(cfg config.Pipeline) *running {
	e.t.Helper()
	lim, err := limiter.New(limiter.Config{Mode: limiter.Mode(cfg.Rate.Mode), Limit: cfg.Rate.Limit, Burst: *cfg.Rate.Burst, Warmup: cfg.Rate.Warmup}, time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	src, err := sources.NewJetStream(*cfg.Source.NATS, cfg.Pending(), "test", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	sink, err := sinks.NewHTTP(*cfg.Sink.HTTP)
	if err != nil {
		e.t.Fatal(err)
	}
	var dl shaper.Sink
	if cfg.DeadLetter != nil {
		if dl, err = sinks.NewNATS(*cfg.DeadLetter.NATS, "test-dlq"); err != nil {
			e.t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	// The daemon's clock: with SHAPER_TUNING=off in the environment these
	// tests run on Go timers (docs/tuning.md).
	knobs, err := tuning.Resolve("")
	if err != nil {
		e.t.Fatal(err)
	}
	p := shaper.New(cfg.Core(), shaper.Parts{
		Source: src, Sink: sink, DeadLetter: dl, Limiter: lim, KeyLimiter: cfg.Rate.KeyLimiter(),
		DestinationLimiter: cfg.Rate.DestinationLimiter(), Clock: fleet.NewClock(knobs),
		Metrics: shaper.NewMetrics(reg), DrainTimeout: 2 * time.Second,
	})
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Pipeline: p, registry: reg, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- p.Run(ctx) }()
	e.t.Cleanup(func() { r.stop(e.t) })
	return r
}

// list is the running pipeline as the admin API sees it.
func (r *running) list() []*shaper.Pipeline { return []*shaper.Pipeline{r.Pipeline} }

// serveAdmin serves the pipeline's admin API with token and log (nil: none)
// until the test ends.
func (r *running) serveAdmin(t testing.TB, token string, log *slog.Logger) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(shaper.Admin(r.list, r.registry, token, shaper.AdminHosts{}, log))
	t.Cleanup(srv.Close)
	return srv
}

// metric returns the sum of a counter's or gauge's values in the
// pipeline's registry.
func (r *running) metric(name string) float64 { return gather.Sum(r.registry, name) }

// stop drains the pipeline and waits for Run to return; it is safe to call twice.
func (r *running) stop(t testing.TB) {
	t.Helper()
	r.Drain()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
		r.done <- nil // for a second stop
	case <-time.After(30 * time.Second):
		r.cancel()
		t.Fatal("pipeline did not drain within 30s")
	}
	r.cancel()
}

// noDeadLetters fails the test for every dead letter received so far.
func (e *env) noDeadLetters() {
	e.t.Helper()
	for {
		select {
		case m := <-e.dead:
			e.t.Errorf("dead letter %s (%s); want none", m.Header.Get("Shaper-Source"), m.Header.Get("Shaper-Reason"))
		default:
			return
		}
	}
}

// deadLetters collects n dead letters, failing the test after timeout.
func (e *env) deadLetters(n int, timeout time.Duration) []*nats.Msg {
	e.t.Helper()
	var out []*nats.Msg
	deadline := time.After(timeout)
	for len(out) < n {
		select {
		case m := <-e.dead:
			out = append(out, m)
		case <-deadline:
			e.t.Fatalf("got %d dead letters within %v; want %d", len(out), timeout, n)
		}
	}
	return out
}
