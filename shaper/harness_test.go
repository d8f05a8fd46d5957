package shaper_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"sync"
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

// The fake-clock harness, of the scheduler's, the breaker's, the
// destinations', the exhausted and the log summary's tests: a pipeline over
// an in-memory source and sink (fakes) that runFake runs in a
// testing/synctest bubble, whose time stands still until every goroutine in
// it waits, then jumps to the next timer. The whole pipeline runs there, so
// a minute of shaping takes milliseconds and every departure falls exactly
// where the limiter put it.

// bubbleClock is shaper.Clock on the bubble's fake time: its alarms wait on
// timers of the bubble, where the machine's clock waits on the kernel's
// (which the bubble cannot see).
type bubbleClock struct{}

func (bubbleClock) Now() time.Time                        { return time.Now() }
func (bubbleClock) NewTimer(d time.Duration) shaper.Timer { return bubbleTimer{time.NewTimer(d)} }
func (bubbleClock) NewAlarm() shaper.Alarm                { return bubbleAlarm{make(chan struct{}, 1)} }

// bubbleAlarm is a shaper.Alarm on a timer of the bubble; ring holds one
// pending Ring.
type bubbleAlarm struct{ ring chan struct{} }

func (a bubbleAlarm) Wait(t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-a.ring:
		return false
	}
}

func (a bubbleAlarm) Ring() {
	select {
	case a.ring <- struct{}{}:
	default:
	}
}

func (bubbleAlarm) Close() {}

type bubbleTimer struct{ t *time.Timer }

func (b bubbleTimer) C() <-chan time.Time { return b.t.C }
func (b bubbleTimer) Stop() bool          { return b.t.Stop() }

// event is something the fake source or sink saw, at the bubble's time.
type event struct {
	at   time.Time
	what string // "send", "ack", "nack"
	id   string
}

// fakes are an in-memory source and sink sharing one record of events.
type fakes struct {
	mu      sync.Mutex
	queue   []*shaper.Message
	more    chan struct{}
	events  []event
	respond func(m *shaper.Message, n int) (time.Duration, error) // latency and answer of the n-th send of m, from 1
	sink    shaper.Sink                                           // the pipeline's sink; nil: fakeSink
	log     *slog.Logger                                          // the pipeline's logger; nil: discarded
	reg     *prometheus.Registry                                  // the pipeline's metrics; nil: a registry of its own
	// destLimiter makes each destination's limiter; nil: the config's.
	destLimiter func(name string, now time.Time) shaper.Limiter
	// adaptsLimiter gives the pipeline no destination limiters, as
	// cmd/shaper does when rate.adaptive moves a shared rate.limit.
	adaptsLimiter bool
	// lim wraps the pipeline's limiter; nil: the config's as it is.
	lim func(*limiter.Limiter) shaper.Limiter
}

func newFakes(n int) *fakes {
	f := &fakes{more: make(chan struct{}, 1)}
	for i := range n {
		f.queue = append(f.queue, &shaper.Message{ID: fmt.Sprintf("m%d", i), Payload: []byte("x"), Receipt: receipt{f, fmt.Sprintf("m%d", i)}})
	}
	return f
}

func (f *fakes) record(what, id string) {
	f.mu.Lock()
	f.events = append(f.events, event{time.Now(), what, id})
	f.mu.Unlock()
}

// of returns the events of one kind, in order.
func (f *fakes) of(what string) []event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []event
	for _, e := range f.events {
		if e.what == what {
			out = append(out, e)
		}
	}
	return out
}

// Fetch is shaper.Source's: what is queued, at most max, or a wait.
func (f *fakes) Fetch(ctx context.Context, max int) ([]*shaper.Message, error) {
	for {
		f.mu.Lock()
		if n := min(max, len(f.queue)); n > 0 {
			out := f.queue[:n:n]
			f.queue = f.queue[n:]
			f.mu.Unlock()
			return out, nil
		}
		f.mu.Unlock()
		select {
		case <-f.more:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (f *fakes) Ready() error                { return nil }
func (f *fakes) Close(context.Context) error { return nil }

// fakeSink is the sink side of fakes.
type fakeSink struct{ *fakes }

// Send is shaper.Sink's: it records the request and answers as respond says.
func (f fakeSink) Send(ctx context.Context, m *shaper.Message) error {
	f.record("send", m.ID)
	n := 0
	for _, e := range f.of("send") {
		if e.id == m.ID {
			n++
		}
	}
	var latency time.Duration
	var err error
	if f.respond != nil {
		latency, err = f.respond(m, n)
	}
	if latency > 0 {
		select {
		case <-time.After(latency):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

func (fakeSink) Close(context.Context) error { return nil }

type receipt struct {
	f  *fakes
	id string
}

func (r receipt) Ack(context.Context) error                 { r.f.record("ack", r.id); return nil }
func (r receipt) Nack(context.Context, time.Duration) error { r.f.record("nack", r.id); return nil }

// elapse lets d pass on the fake clock of the testing/synctest bubble it
// runs in: it returns once d has passed there, which takes no real time
// when every other goroutine of the bubble is blocked. Only for tests in a
// bubble.
func elapse(d time.Duration) { time.Sleep(d) }

// fakeConfig returns the config of a pipeline over fakes (named fake,
// capacity 1000, max_queue_time 1m, 100/s), changed by mutate (nil: none),
// with its defaults and validated, and a limiter of its rate.
func fakeConfig(t *testing.T, mutate func(*config.Pipeline)) (config.Pipeline, *limiter.Limiter) {
	t.Helper()
	cfg := config.File{Pipelines: []config.Pipeline{{
		Name:   "fake",
		Source: config.Source{NATS: &sources.NATSConfig{URL: "nats://127.0.0.1:4222", Subject: "s"}},
		Bucket: shaper.BucketConfig{Capacity: 1000, MaxQueueTime: time.Minute},
		Rate:   config.Rate{RateConfig: shaper.RateConfig{Limit: 100}},
		Sink:   config.Sink{HTTP: &sinks.HTTPConfig{URL: "https://sink.example/"}},
	}}}
	if mutate != nil {
		mutate(&cfg.Pipelines[0])
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	pc := cfg.Pipelines[0]
	lim, err := limiter.New(limiter.Config{Mode: limiter.Mode(pc.Rate.Mode), Limit: pc.Rate.Limit, Burst: *pc.Rate.Burst}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return pc, lim
}

// runFake runs a pipeline over f in the bubble until the test's body
// returns, then drains it and waits for Run.
func runFake(t *testing.T, f *fakes, mutate func(*config.Pipeline), body func(p *shaper.Pipeline)) {
	t.Helper()
	pc, lim := fakeConfig(t, mutate)
	var sink shaper.Sink = fakeSink{f}
	if f.sink != nil {
		sink = f.sink
	}
	reg := f.reg
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	parts := shaper.Parts{Source: f, Sink: sink, Limiter: lim, Clock: bubbleClock{}, Logger: f.log,
		Metrics: shaper.NewMetrics(reg), DrainTimeout: 2 * time.Second}
	if f.lim != nil {
		parts.Limiter = f.lim(lim)
	}
	if pc.Rate.PerKey != nil {
		parts.KeyLimiter = pc.Rate.KeyLimiter()
	}
	parts.DestinationLimiter = pc.Rate.DestinationLimiter()
	if f.destLimiter != nil {
		parts.DestinationLimiter = f.destLimiter
	}
	if f.adaptsLimiter {
		parts.DestinationLimiter = nil // the adaptive rate moves the pipeline's limit (a shared one, with a fixed url)
	}
	p := shaper.New(pc.Core(), parts)
	done := make(chan error, 1)
	go func() { done <- p.Run(context.Background()) }()
	body(p)
	p.Drain()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

// gaps returns the time between consecutive events.
func gaps(events []event) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(events); i++ {
		out = append(out, events[i].at.Sub(events[i-1].at))
	}
	return out
}
