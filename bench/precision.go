package main

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/shaper-dev/shaper/internal/window"
	"github.com/shaper-dev/shaper/shaper"
)

// PrecisionSection is how exactly the sink sees the configured rate, for
// shaper's two modes and two baselines driven by the same pipeline.
type PrecisionSection struct {
	Common
	Setup string          `json:"setup"`
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
	// Timing is of the steady state's arrivals, but for the fixed window
	// its rate is per whole window: its bursts make (n-1)/(t_n - t_1)
	// meaningless. The goal of most per 100 ms is limit/10 + 1.
	Timing
	// Departed100ms is the most departures (slots the limiter gave, as the
	// probe saw them taken) in any 100 ms of the steady state: what the
	// limiter let go, before the way to the sink adds its jitter.
	Allowed100ms  int `json:"allowed_per_100ms"`
	Departed100ms int `json:"departed_max_per_100ms,omitempty"`
	// Max1s is the most arrivals in any one-second window of the whole run,
	// start included; a limit of n/s allows n + 1 (the same one of
	// arrival jitter as limit/10 + 1), token mode n + burst.
	Max1s     int `json:"max_per_1s"`
	Allowed1s int `json:"allowed_per_1s"`
	// LateP50, LateP99 and LateMean are of how long after the previous
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

// limiterSpec is the pipeline of one limiter at limit, with a bucket of
// 1000 and 8 requests in flight; a fixed window's edges are from origin.
func limiterSpec(name, impl string, limit float64, burst int, origin time.Time) pipelineSpec {
	spec := pipelineSpec{name: name, rate: shaper.RateConfig{Mode: shaper.ModeLeaky, Limit: limit}, capacity: 1000, maxInFlight: 8}
	switch impl {
	case implToken:
		spec.rate.Mode, spec.rate.Burst = shaper.ModeToken, &burst
	case implFixed:
		spec.limiter = newFixedWindow(limit, origin)
	case implXRate:
		spec.limiter = newXRate(limit, 1)
	}
	return spec
}

func runPrecision(ctx context.Context, b *bench) (*PrecisionSection, error) {
	sec := &PrecisionSection{Setup: "embedded NATS JetStream (file store) → shaper.Pipeline → HTTP sink on 127.0.0.1, all in the harness process; max_in_flight 8, bucket capacity 1000; a backlog published before the pipeline starts"}
	limits := []float64{10, 100, 1000, 5000}
	if b.o.quick {
		limits = []float64{100, 1000}
	}
	for _, limit := range limits {
		for _, impl := range []string{implLeaky, implToken, implFixed, implXRate} {
			c, err := precisionCase(ctx, b, len(sec.Cases), limit, impl)
			if err != nil {
				return nil, fmt.Errorf("%s at %v/s: %w", impl, limit, err)
			}
			progress("precision %-12s %5v/s: rate err %+.3f%%, max/100ms %d (≤%d), max/1s %d, jitter p50 %.0fµs p99 %.0fµs, late p50 %.0fµs p99 %.0fµs",
				impl, limit, c.RateErrPct, c.Max100ms, c.Allowed100ms, c.Max1s, c.JitterP50, c.JitterP99, c.LateP50, c.LateP99)
			sec.Cases = append(sec.Cases, c)
		}
	}
	return sec, nil
}

func precisionCase(ctx context.Context, b *bench, i int, limit float64, impl string) (PrecisionCase, error) {
	warmup, steady := time.Second, 2*time.Second
	if limit <= 10 {
		steady = 4 * time.Second // 40 gaps
	}
	if b.o.quick {
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
	s, err := startSink(true)
	if err != nil {
		return c, err
	}
	origin := time.Now().Add(-fixedPhase)
	f, err := b.startFlow(ctx, limiterSpec(fmt.Sprintf("PREC%d", i), impl, limit, c.Burst, origin), n, s)
	if err != nil {
		return c, err
	}
	defer f.close()
	timeout := 2*(time.Duration(float64(n)/limit*float64(time.Second))+2*time.Second) + 30*time.Second
	if !waitFor(ctx, timeout, s.reached(int64(n))) {
		return c, fmt.Errorf("%d of %d messages delivered within %v", s.count.Load(), n, timeout)
	}

	arr := s.arrivals()
	from := arr[0].Add(warmup)
	st := between(arr, from, arr[len(arr)-1].Add(1))
	c.SteadyCount, c.Timing = len(st), timing(limit, st)
	if impl == implFixed {
		c.Rate = windowRate(arr, origin, from)
		c.RateErrPct = 100 * (c.Rate - limit) / limit
	}
	c.Allowed100ms = int(limit/10) + 1
	c.Max1s = window.Most(arr, time.Second)
	c.Allowed1s = int(limit) + c.Burst
	c.LateP50, c.LateP99, c.LateMean = f.probe.lateness(from)
	c.Departed100ms = window.Most(f.probe.departures(from, arr[len(arr)-1]), 100*time.Millisecond)
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

// PictureSection is the run behind docs/shaping.svg: one burst into three
// pipelines, each shaping it with a different limiter.
type PictureSection struct {
	Common
	Burst  int            `json:"burst"`
	Limit  float64        `json:"limit"`
	BinMs  int            `json:"bin_ms"`
	Panels []PicturePanel `json:"panels"`
}

// PicturePanel is one limiter's input and output, binned.
type PicturePanel struct {
	Limiter string `json:"limiter"`
	Label   string `json:"label"`
	// In and Out are messages published and delivered per bin, from the
	// start of the picture.
	In  []int `json:"in"`
	Out []int `json:"out"`
	// Max100ms is the most deliveries in any 100ms window; Took is the
	// time from the burst to the last delivery.
	Max100ms int     `json:"max_per_100ms"`
	Took     float64 `json:"seconds_to_deliver"`
}

func runPicture(ctx context.Context, b *bench) (*PictureSection, error) {
	const limit, tokenBurst = 100.0, 100
	sec := &PictureSection{Burst: 2000, Limit: limit, BinMs: 100}
	if b.o.quick {
		sec.Burst = 500
	}
	panels := []PicturePanel{
		{Limiter: implLeaky, Label: "shaper, leaky mode"},
		{Limiter: implToken, Label: fmt.Sprintf("shaper, token mode (burst %d)", tokenBurst)},
		{Limiter: implFixed, Label: "fixed-window counter (100 per 1 s window)"},
	}
	// Bins, and the fixed window's edges, count from start. The pipelines
	// idle for a second (an idle bucket, a full token bucket), then the
	// burst arrives at all three at once, just after the fixed window's
	// edge at 1s.
	start := time.Now()
	flows := make([]*flow, len(panels))
	defer func() {
		for _, f := range flows {
			if f != nil {
				f.close()
			}
		}
	}()
	for i, p := range panels {
		s, err := startSink(true)
		if err != nil {
			return nil, err
		}
		if flows[i], err = b.startFlow(ctx, limiterSpec(fmt.Sprintf("PIC%d", i), p.Limiter, limit, tokenBurst, start), 0, s); err != nil {
			return nil, err
		}
	}
	time.Sleep(time.Until(start.Add(time.Second)))
	progress("picture: a burst of %d into three pipelines at %v/s", sec.Burst, limit)
	var wg sync.WaitGroup
	in, errs := make([][]time.Time, len(flows)), make([]error, len(flows))
	for i, f := range flows {
		in[i] = make([]time.Time, sec.Burst)
		wg.Go(func() { errs[i] = b.publish(ctx, f.name, sec.Burst, in[i]) })
	}
	wg.Wait()
	timeout := time.Duration(float64(sec.Burst)/limit*float64(time.Second)) + 30*time.Second
	for i, f := range flows {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if !waitFor(ctx, timeout, f.sink.reached(int64(sec.Burst))) {
			return nil, fmt.Errorf("%s: %d of %d delivered within %v", f.name, f.sink.count.Load(), sec.Burst, timeout)
		}
	}
	time.Sleep(time.Second) // a second of quiet after the last delivery, for the picture

	bin := time.Duration(sec.BinMs) * time.Millisecond
	nbins := int(math.Ceil(float64(time.Since(start)) / float64(bin)))
	for i, f := range flows {
		arr, p := f.sink.arrivals(), panels[i]
		p.In, p.Out = binCounts(in[i], start, bin, nbins), binCounts(arr, start, bin, nbins)
		p.Max100ms, p.Took = window.Most(arr, 100*time.Millisecond), arr[len(arr)-1].Sub(in[i][0]).Seconds()
		progress("picture: %-40s max/100ms %3d, all delivered %.1fs after the burst", p.Label, p.Max100ms, p.Took)
		sec.Panels = append(sec.Panels, p)
	}
	return sec, nil
}

// binCounts counts ts in nbins consecutive bins of width bin from start.
func binCounts(ts []time.Time, start time.Time, bin time.Duration, nbins int) []int {
	out := make([]int, nbins)
	for _, t := range ts {
		if i := int(t.Sub(start) / bin); i >= 0 && i < nbins {
			out[i]++
		}
	}
	return out
}
