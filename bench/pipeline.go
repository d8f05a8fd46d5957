package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/sinks"
	"github.com/shaper-dev/shaper/sources"
)

// running is a real shaper.Pipeline running in this process: a JetStream
// or Kafka source, the HTTP sink, and the limiter under test, wired the way
// cmd/shaper wires them.
type running struct {
	name   string
	p      *shaper.Pipeline
	probe  *probedLimiter
	cancel context.CancelFunc
	done   chan error
}

// pipelineSpec is what a precision or picture case varies.
type pipelineSpec struct {
	name    string
	source  config.Source
	sinkURL string
	rate    shaper.RateConfig
	// limiter replaces the one the rate config would build (a baseline);
	// rate.Limit still sizes the bucket.
	limiter     shaper.Limiter
	maxInFlight int
	capacity    int
	// maxQueueTime is bucket.max_queue_time; 0 means a minute.
	maxQueueTime time.Duration
	// urlFrom, instead of sinkURL, takes each message's URL from it,
	// allowing allowedHosts (private addresses too).
	urlFrom      string
	allowedHosts []string
	// onExpire is bucket.on_expire, and maxBackoff retry.max_backoff (the
	// longest Retry-After honoured); empty, 0: the defaults.
	onExpire   string
	maxBackoff time.Duration
}

func startPipeline(ctx context.Context, spec pipelineSpec) (*running, error) {
	// A minute of queueing by default: nothing in these runs may expire,
	// and the capacity, not limit × max_queue_time, bounds the bucket.
	maxQueueTime := spec.maxQueueTime
	if maxQueueTime == 0 {
		maxQueueTime = time.Minute
	}
	cfg := config.File{Pipelines: []config.Pipeline{{
		Name:   spec.name,
		Source: spec.source,
		Bucket: shaper.BucketConfig{Capacity: spec.capacity, MaxQueueTime: maxQueueTime, OnExpire: spec.onExpire},
		Rate:   config.Rate{RateConfig: spec.rate},
		Sink: config.Sink{HTTP: &sinks.HTTPConfig{
			URL: spec.sinkURL, URLFrom: spec.urlFrom, AllowedHosts: spec.allowedHosts, AllowPrivate: spec.urlFrom != "",
			DeliveryConfig: shaper.DeliveryConfig{MaxInFlight: spec.maxInFlight, Retry: shaper.RetryConfig{MaxBackoff: spec.maxBackoff}},
		}},
	}}}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("pipeline %s: %w", spec.name, err)
	}
	pc := cfg.Pipelines[0]

	lim := spec.limiter
	if lim == nil {
		l, err := limiter.New(limiter.Config{Mode: limiter.Mode(pc.Rate.Mode), Limit: pc.Rate.Limit, Burst: *pc.Rate.Burst}, time.Now())
		if err != nil {
			return nil, err
		}
		lim = l
	}
	probe := &probedLimiter{Limiter: lim}
	sink, err := sinks.NewHTTP(*pc.Sink.HTTP)
	if err != nil {
		return nil, err
	}
	var src shaper.Source
	if pc.Source.Kafka != nil {
		src, err = sources.NewKafka(*pc.Source.Kafka, pc.Bucket.Capacity, "shaper-bench-"+spec.name, nil)
	} else {
		src, err = sources.NewJetStream(*pc.Source.NATS, pc.Pending(), "shaper-bench-"+spec.name, nil)
	}
	if err != nil {
		_ = sink.Close(context.Background())
		return nil, err
	}
	p := shaper.New(pc.Core(), shaper.Parts{
		Source: src, Sink: sink, Limiter: probe,
		DestinationLimiter: pc.Rate.DestinationLimiter(),
		Metrics:            shaper.NewMetrics(prometheus.NewRegistry()),
		DrainTimeout:       time.Second,
	})
	rctx, cancel := context.WithCancel(ctx)
	r := &running{name: spec.name, p: p, probe: probe, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- p.Run(rctx) }()
	return r, nil
}

// stop drains the pipeline (what is left is nacked after a second) and
// waits for Run to return.
func (r *running) stop() error {
	r.p.Drain()
	select {
	case err := <-r.done:
		r.cancel()
		return err
	case <-time.After(10 * time.Second):
		r.cancel()
		return <-r.done
	}
}

// probedLimiter passes every call to the limiter under test and records,
// for each slot taken, how long after the slot it waited for the scheduler
// came to take it. The scheduler asks Next for the next slot, sleeps until
// it, and then takes it with Allow: the difference is how late its timer
// woke it (plus the few microseconds of getting there), the cause of most of
// what the sink sees as jitter, and of a leaky limiter's lost time.
type probedLimiter struct {
	shaper.Limiter
	mu    sync.Mutex
	next  time.Time // the slot Next last told
	calls []lateCall
}

// lateCall is one slot taken: when, and how long after the slot it waited
// for.
type lateCall struct {
	at   time.Time
	late time.Duration
}

func (p *probedLimiter) Next(now time.Time) time.Time {
	at := p.Limiter.Next(now)
	p.mu.Lock()
	p.next = at
	p.mu.Unlock()
	return at
}

func (p *probedLimiter) Allow(now time.Time) bool {
	if !p.Limiter.Allow(now) {
		return false
	}
	p.mu.Lock()
	p.calls = append(p.calls, lateCall{at: now, late: now.Sub(p.next)})
	p.mu.Unlock()
	return true
}

// departures returns the times of the slots taken from from to until, in
// order.
func (p *probedLimiter) departures(from, until time.Time) []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []time.Time
	for _, c := range p.calls {
		if !c.at.Before(from) && !c.at.After(until) {
			out = append(out, c.at)
		}
	}
	return out
}

// lateness returns the p50, p99 and mean, in microseconds, of how late the
// scheduler came for its next slot, over the calls from from on.
func (p *probedLimiter) lateness(from time.Time) (p50, p99, mean float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var late []float64
	for _, c := range p.calls {
		if !c.at.Before(from) {
			late = append(late, float64(c.late)/1e3)
		}
	}
	slices.Sort(late)
	sum := 0.0
	for _, l := range late {
		sum += l
	}
	if len(late) > 0 {
		mean = sum / float64(len(late))
	}
	return quantile(late, 0.5), quantile(late, 0.99), mean
}

// The baselines are what shaper is measured against, driven by the same
// pipeline through shaper.Limiter: Next tells the departure time, and the
// scheduler sends at that time after taking it with Allow. They live here only; the product
// does not use them.

// fixedWindow is the counter most hand-rolled limiters are: at most n
// requests per one-second window, the count reset at each window edge. A
// request over the count waits for the next edge. It keeps the average but
// sends each window's n at once, and lets up to 2n through in one second
// across an edge (n at the end of one window, n at the start of the next).
//
// Windows are [origin + k·1s, origin + (k+1)·1s).
type fixedWindow struct {
	mu     sync.Mutex
	origin time.Time
	n      int
	window int64 // index of the window counted
	count  int   // requests in that window
}

var _ shaper.Limiter = (*fixedWindow)(nil)

func newFixedWindow(limit float64, origin time.Time) *fixedWindow {
	return &fixedWindow{origin: origin, n: max(int(limit), 1)}
}

// Next tells the place a request at now would take: in the window of now
// or, when that one is full, in the first window after it with room.
func (f *fixedWindow) Next(now time.Time) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.place(now, false)
}

// Allow takes a place in the window of now if it has room.
func (f *fixedWindow) Allow(now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.place(now, false).After(now) {
		return false
	}
	f.place(now, true)
	return true
}

// place finds the place of a request at now, and takes it when take is
// true. It requires that f.mu is held.
func (f *fixedWindow) place(now time.Time, take bool) time.Time {
	window, count := f.window, f.count
	if !take {
		defer func() { f.window, f.count = window, count }()
	}
	w := int64(now.Sub(f.origin) / time.Second)
	if now.Before(f.origin) {
		w = -1
	}
	if w > f.window {
		f.window, f.count = w, 0
	}
	if f.count >= f.n {
		f.window++
		f.count = 0
	}
	f.count++
	start := f.origin.Add(time.Duration(f.window) * time.Second)
	if start.After(now) {
		return start
	}
	return now
}

func (f *fixedWindow) SetRate(limit float64, _ int) {
	f.mu.Lock()
	f.n = max(int(limit), 1)
	f.mu.Unlock()
}

func (f *fixedWindow) Limit(time.Time) float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return float64(f.n)
}

// xrate is golang.org/x/time/rate used the way its Wait is: reserve one
// token at now and go after the reservation's delay. Wait does exactly
// this with a timer; here the pipeline's scheduler does the waiting.
type xrate struct {
	l *rate.Limiter
}

var _ shaper.Limiter = xrate{}

func newXRate(limit float64, burst int) xrate {
	return xrate{l: rate.NewLimiter(rate.Limit(limit), burst)}
}

// Next reserves a token and cancels the reservation at once, which gives
// it back whole while nothing was reserved after it.
func (x xrate) Next(now time.Time) time.Time {
	r := x.l.ReserveN(now, 1)
	defer r.CancelAt(now)
	return now.Add(r.DelayFrom(now))
}

func (x xrate) Allow(now time.Time) bool { return x.l.AllowN(now, 1) }

func (x xrate) SetRate(limit float64, burst int) {
	now := time.Now()
	x.l.SetLimitAt(now, rate.Limit(limit))
	x.l.SetBurstAt(now, burst)
}

func (x xrate) Limit(time.Time) float64 { return float64(x.l.Limit()) }

// flow is an in-process pipeline reading a stream of its own and sending
// to a sink.
type flow struct {
	*running
	sink *sink
	drop func()
}

// startFlow creates the stream spec.name holding messages payloads and
// starts the pipeline of spec reading it (as durable shaper-bench) and
// sending to s. close stops it and drops s and the stream.
func (b *bench) startFlow(ctx context.Context, spec pipelineSpec, messages int, s *sink) (*flow, error) {
	drop, err := b.stream(ctx, spec.name, messages)
	if err != nil {
		s.close()
		return nil, err
	}
	spec.source, spec.sinkURL = b.natsSource(spec.name, "shaper-bench"), s.URL
	r, err := startPipeline(ctx, spec)
	if err != nil {
		s.close()
		drop()
		return nil, err
	}
	return &flow{running: r, sink: s, drop: drop}, nil
}

func (f *flow) close() {
	if err := f.stop(); err != nil {
		progress("%s: pipeline stop: %v", f.name, err) // the figures are taken; a stop error changes nothing
	}
	f.sink.close()
	f.drop()
}
