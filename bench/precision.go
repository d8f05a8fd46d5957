package main

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/shaper-dev/shaper/internal/window"
	"github.com/shaper-dev/shaper/shaper"
)

// PrecisionSection is how exactly the sink sees the configured rate, for
// shaper's two modes and two baselines driven by the same pipeline.
type PrecisionSection struct {
	Setup string          `json:"setup"`
	Load  Load            `json:"load"`
	Cases []PrecisionCase `json:"cases"`
}

// PrecisionCase is one limiter at one limit.
type PrecisionCase struct {
	Limit   float64 `json:"limit"`
	Limiter string  `json:"limiter"`
	Burst   int     `json:"burst"`
	// Messages went through in all; the steady state is every arrival
	// from WarmupSeconds after the first one on.
	Messages      int     `json:"messages"`
	WarmupSeconds float64 `json:"warmup_seconds"`
	SteadyCount   int     `json:"steady_count"`
	// Rate is the steady-state rate the sink saw: (n-1)/(t_n - t_1) for the
	// pacing limiters, and per whole window for the fixed window, whose
	// bursts make that formula meaningless.
	Rate       float64 `json:"rate"`
	RateErrPct float64 `json:"rate_err_pct"`
	// Max100ms is the most arrivals in any 100ms window of the steady
	// state; the goal is limit/10 + 1.
	Max100ms     int `json:"max_per_100ms"`
	Allowed100ms int `json:"allowed_per_100ms"`
	// Departed100ms is the most departures (slots the limiter gave, as the
	// probe saw them taken) in any 100ms window of the same steady state:
	// what the limiter let go, before the way to the sink adds its jitter.
	// Absent in runs made before it was measured.
	Departed100ms int `json:"departed_max_per_100ms,omitempty"`
	// Max1s is the most arrivals in any one-second window of the whole run,
	// start included; a limit of n/s allows n + 1 (the same one of
	// arrival jitter as limit/10 + 1), token mode n + burst.
	Max1s     int `json:"max_per_1s"`
	Allowed1s int `json:"allowed_per_1s"`
	// JitterP50 and JitterP99 are quantiles of |gap - 1/limit| between
	// consecutive steady-state arrivals, in microseconds.
	JitterP50 float64 `json:"jitter_p50_us"`
	JitterP99 float64 `json:"jitter_p99_us"`
	// LateP50 and LateP99 are quantiles of how long after the previous
	// slot's time the pipeline's scheduler asked for the next slot in the
	// steady state, in microseconds: its timer's wake-up lateness. A leaky
	// limiter loses whatever exceeds 1/limit of it.
	LateP50  float64 `json:"scheduler_late_p50_us"`
	LateP99  float64 `json:"scheduler_late_p99_us"`
	LateMean float64 `json:"scheduler_late_mean_us"`
}

// Limiter names, as they appear in every table.
const (
	implLeaky = "shaper-leaky"
	implToken = "shaper-token"
	implFixed = "fixed-window"
	implXRate = "x-time-rate"
)

// fixedPhase is where in its first window a fixed-window run starts: 0.3s
// before an edge, so the first window's n go just before the edge and the
// next window's n just after it, the 2× spike a fixed window allows.
const fixedPhase = 700 * time.Millisecond

func runPrecision(ctx context.Context, o *options, js *jetStream) (*PrecisionSection, error) {
	probe := startLoadProbe()
	sec := &PrecisionSection{Setup: "embedded NATS JetStream (file store) → shaper.Pipeline → HTTP sink on 127.0.0.1, all in the harness process; max_in_flight 8, bucket capacity 1000; a backlog published before the pipeline starts"}
	limits := []float64{10, 100, 1000, 5000}
	impls := []string{implLeaky, implToken, implFixed, implXRate}
	if o.quick {
		limits = []float64{100, 1000}
	}
	for _, limit := range limits {
		for _, impl := range impls {
			c, err := precisionCase(ctx, o, js, len(sec.Cases), limit, impl)
			if err != nil {
				return nil, fmt.Errorf("precision %s at %v/s: %w", impl, limit, err)
			}
			progress("precision %-12s %5v/s: rate err %+.3f%%, max/100ms %d (≤%d), max/1s %d, jitter p50 %.0fµs p99 %.0fµs, late p50 %.0fµs p99 %.0fµs",
				impl, limit, c.RateErrPct, c.Max100ms, c.Allowed100ms, c.Max1s, c.JitterP50, c.JitterP99, c.LateP50, c.LateP99)
			sec.Cases = append(sec.Cases, c)
		}
	}
	sec.Load = probe.stop()
	return sec, nil
}

func precisionCase(ctx context.Context, o *options, js *jetStream, i int, limit float64, impl string) (PrecisionCase, error) {
	warmup := time.Second
	steady := 2 * time.Second
	if limit <= 10 {
		steady = 4 * time.Second // 40 gaps
	}
	if o.quick {
		steady = time.Second
	}
	c := PrecisionCase{Limit: limit, Limiter: impl, Burst: 1, WarmupSeconds: warmup.Seconds()}
	n := int(math.Ceil(limit*(warmup+steady).Seconds())) + 1
	switch impl {
	case implToken:
		c.Burst = max(int(limit/10), 1) // 100ms worth at once after idle
		n += c.Burst
	case implFixed:
		// The first window, then the one whose edge is 0.3s in, then the
		// steady ones: whole windows of n each.
		n = int(limit) * (int(steady/time.Second) + 3)
	}
	c.Messages = n

	name := fmt.Sprintf("PREC%d", i)
	if err := js.stream(ctx, name); err != nil {
		return c, err
	}
	defer js.deleteStream(context.WithoutCancel(ctx), name)
	if err := js.publish(ctx, name, 0, n, nil); err != nil {
		return c, err
	}
	sink, err := startSink(true)
	if err != nil {
		return c, err
	}
	defer sink.close()

	spec := pipelineSpec{
		name: name, source: js.sourceConfig(name, "shaper-bench"), sinkURL: sink.URL,
		rate:     shaper.RateConfig{Mode: shaper.ModeLeaky, Limit: limit},
		capacity: 1000, maxInFlight: 8,
	}
	origin := time.Now().Add(-fixedPhase)
	switch impl {
	case implToken:
		spec.rate.Mode, spec.rate.Burst = shaper.ModeToken, &c.Burst
	case implFixed:
		spec.limiter = newFixedWindow(limit, origin)
	case implXRate:
		spec.limiter = newXRate(limit, 1)
	}
	r, err := startPipeline(ctx, spec)
	if err != nil {
		return c, err
	}
	expect := time.Duration(float64(n)/limit*float64(time.Second)) + 2*time.Second
	ok := sink.waitCount(ctx, int64(n), 2*expect+30*time.Second)
	if err := r.stop(); err != nil {
		progress("precision %s: pipeline stop: %v", name, err)
	}
	if !ok {
		return c, fmt.Errorf("%d of %d messages delivered within %v", sink.count.Load(), n, 2*expect+30*time.Second)
	}

	arr := sink.arrivals()
	interval := time.Duration(float64(time.Second) / limit)
	st := between(arr, arr[0].Add(warmup), arr[len(arr)-1].Add(1))
	c.SteadyCount = len(st)
	c.Rate = pacedRate(st)
	if impl == implFixed {
		c.Rate = windowRate(arr, origin, arr[0].Add(warmup))
	}
	c.RateErrPct = 100 * (c.Rate - limit) / limit
	c.Max100ms = window.Most(st, 100*time.Millisecond)
	c.Allowed100ms = int(limit/10) + 1
	c.Max1s = window.Most(arr, time.Second)
	c.Allowed1s = int(limit) + c.Burst
	c.JitterP50, c.JitterP99 = jitter(st, interval)
	c.LateP50, c.LateP99, c.LateMean = r.probe.lateness(arr[0].Add(warmup))
	c.Departed100ms = window.Most(r.probe.departures(arr[0].Add(warmup), arr[len(arr)-1]), 100*time.Millisecond)
	return c, nil
}

// windowRate is the rate over the whole fixed windows between the first
// edge at or after from and the edge of the last burst.
func windowRate(arr []time.Time, origin, from time.Time) float64 {
	edge := func(t time.Time) time.Time {
		k := math.Ceil(float64(t.Sub(origin)) / float64(time.Second))
		return origin.Add(time.Duration(k) * time.Second)
	}
	first := edge(from)
	last := edge(arr[len(arr)-1].Add(-time.Second + 1)) // the edge the last burst started at
	if !last.After(first) {
		return 0
	}
	return float64(len(between(arr, first, last))) / last.Sub(first).Seconds()
}
