package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/shaper-dev/shaper/internal/quota"
	"github.com/shaper-dev/shaper/shaper"
)

// PushbackSection is how the pipeline follows a sink whose capacity steps
// down and up again (docs/multi-tenant.md, "When the sink pushes back"):
// the same schedule of capacities behind the adaptive rate and behind a
// fixed rate, one after the other.
type PushbackSection struct {
	Common
	// Limit is rate.limit of both runs.
	Limit float64 `json:"limit"`
	// Steps is the sink's schedule: from each step's At (seconds from its
	// first request) it admits Capacity requests in any sliding second.
	Steps   []PushbackStep `json:"steps"`
	Seconds float64        `json:"seconds"`
	// SettleSeconds after each step, its steady state begins; it lasts to
	// the next step.
	SettleSeconds float64       `json:"settle_seconds"`
	SampleMs      int           `json:"sample_ms"`
	Messages      int           `json:"messages"`
	Runs          []PushbackRun `json:"runs"`
	// TwoDestinations is the run with one destination held.
	TwoDestinations *TwoDestinations `json:"two_destinations,omitempty"`
}

// PushbackStep is one capacity of the sink's schedule.
type PushbackStep struct {
	At       float64 `json:"at_seconds"`
	Capacity int     `json:"capacity"`
}

// PushbackRun is one pipeline's run through the schedule.
type PushbackRun struct {
	Name  string `json:"name"`
	Label string `json:"label"`
	// Requests and Throttled count every request and every 429 of the run,
	// Delivered its 2xx, and Admissible what the sink would have admitted
	// at its capacity all along.
	Delivered    int     `json:"delivered"`
	Admissible   int     `json:"admissible"`
	Requests     int     `json:"requests"`
	Throttled    int     `json:"throttled"`
	ThrottledPct float64 `json:"throttled_pct"`
	// SteadyRequests and SteadyThrottled are the sums over the steps'
	// steady states.
	SteadyRequests     int              `json:"steady_requests"`
	SteadyThrottled    int              `json:"steady_throttled"`
	SteadyThrottledPct float64          `json:"steady_throttled_pct"`
	Steps              []PushbackFollow `json:"steps"`
	Samples            []PushbackSample `json:"samples"`
}

// PushbackFollow is how a run followed one step.
type PushbackFollow struct {
	At       float64 `json:"at_seconds"`
	Capacity int     `json:"capacity"`
	// FollowSeconds is the time from the step until the delivered rate is
	// within 10% of the capacity and stays so for 2 s; -1: not before the
	// next step.
	FollowSeconds float64 `json:"follow_seconds"`
	// LimitSeconds is the time from the step until the limit in force is
	// first within 10% of the capacity; -1: not before the next step (nil:
	// not measured).
	LimitSeconds *float64 `json:"limit_seconds,omitempty"`
	// Over the steady state: the rate delivered (2xx per second), the
	// requests and the 429s among them.
	SteadyRate         float64 `json:"steady_rate"`
	SteadyRequests     int     `json:"steady_requests"`
	SteadyThrottled    int     `json:"steady_throttled"`
	SteadyThrottledPct float64 `json:"steady_throttled_pct"`
}

// PushbackSample is the state at one moment, T seconds from the sink's
// first request: the limit in force, the sink's capacity, the 2xx over
// the second before it, and the 429s since the sample before.
type PushbackSample struct {
	T         float64 `json:"t"`
	Limit     float64 `json:"limit"`
	Capacity  int     `json:"capacity"`
	Delivered float64 `json:"delivered"`
	Throttled int     `json:"throttled,omitempty"`
}

// pushbackWithin is the band around the capacity the delivered rate must
// reach, and pushbackHold how long it must stay in it, for a step to count
// as followed.
const (
	pushbackWithin = 0.10
	pushbackHold   = 2 * time.Second
)

func runPushback(ctx context.Context, b *bench) (*PushbackSection, error) {
	step := 30 * time.Second
	if b.o.quick {
		step = 10 * time.Second
	}
	sec := &PushbackSection{
		Limit:         100,
		Steps:         []PushbackStep{{At: 0, Capacity: 100}, {At: step.Seconds(), Capacity: 30}, {At: 2 * step.Seconds(), Capacity: 80}},
		Seconds:       3 * step.Seconds(),
		SettleSeconds: step.Seconds() / 3,
		SampleMs:      100,
	}
	// Enough for the limit all along: the bucket never runs dry.
	sec.Messages = int(sec.Limit * sec.Seconds)
	runs := []struct {
		name, label string
		adaptive    *shaper.AdaptiveConfig
	}{
		{"adaptive", "rate.adaptive {min: 5}, limit 100", &shaper.AdaptiveConfig{Min: 5}},
		{"fixed", "fixed 100/s (today's daemon: Retry-After pauses, no adaptive)", nil},
	}
	for i, r := range runs {
		progress("pushback: %s, the sink's capacity %s over %.0f s", r.label, scheduleText(sec.Steps), sec.Seconds)
		run, err := b.pushbackRun(ctx, sec, i, r.adaptive)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.name, err)
		}
		run.Name, run.Label = r.name, r.label
		var follow []string
		for _, f := range run.Steps {
			follow = append(follow, fmt.Sprintf("%d/s: %s, %.1f/s, %.1f%% 429", f.Capacity, followText(f.FollowSeconds), f.SteadyRate, f.SteadyThrottledPct))
		}
		progress("pushback %-8s %s; %d of %d requests throttled (%.1f%%)", r.name, strings.Join(follow, "; "), run.Throttled, run.Requests, run.ThrottledPct)
		sec.Runs = append(sec.Runs, run)
	}
	var err error
	if sec.TwoDestinations, err = b.twoDestinations(ctx); err != nil {
		return nil, fmt.Errorf("two destinations: %w", err)
	}
	return sec, nil
}

// pushbackRun runs one pipeline through the sink's schedule and measures
// it.
func (b *bench) pushbackRun(ctx context.Context, sec *PushbackSection, i int, adaptive *shaper.AdaptiveConfig) (PushbackRun, error) {
	contract := &slidingContract{steps: sec.Steps}
	s, err := serveSink(&sink{record: true, admit: contract.admit}, "127.0.0.1")
	if err != nil {
		return PushbackRun{}, err
	}
	f, err := b.startFlow(ctx, pipelineSpec{
		name: fmt.Sprintf("PUSH%d", i), rate: shaper.RateConfig{Mode: shaper.ModeLeaky, Limit: sec.Limit, Adaptive: adaptive},
		// Nothing may expire while the sink holds the rate down.
		capacity: 500, maxInFlight: 8, maxQueueTime: 5 * time.Minute,
	}, sec.Messages, s)
	if err != nil {
		return PushbackRun{}, err
	}
	defer f.close()
	limits, err := sampleLimit(ctx, f.p, contract, time.Duration(sec.SampleMs)*time.Millisecond, time.Duration(sec.Seconds*float64(time.Second)))
	if err != nil {
		return PushbackRun{}, err
	}
	return measurePushback(sec, contract.start(), s.arrivals(), s.refusals(), limits), nil
}

// TwoDestinations is one pipeline at Limit whose messages name, in turn,
// two destinations (sink.http.url_from): A answers 429 with Retry-After
// to every request, B admits everything. Times are from the first
// request; B's rate is over the window from 1 s on.
type TwoDestinations struct {
	Limit          float64   `json:"limit"`
	Capacity       int       `json:"capacity"`
	PerKeyCapacity int       `json:"per_key_capacity"`
	MaxQueueTime   float64   `json:"max_queue_time_seconds"`
	RetryAfter     int       `json:"retry_after_seconds"`
	Seconds        float64   `json:"seconds"`
	Published      int       `json:"published"`
	BDelivered     int       `json:"b_delivered"`
	BRate          float64   `json:"b_rate"`
	ARequestsAt    []float64 `json:"a_requests_at"`
	// How the messages ended once the pipeline had stopped: delivered
	// (B's), dropped at max_queue_time (on_expire: drop; A's), left
	// unacked in the broker, and neither (lost); B's 2xx beyond those
	// delivered are duplicates.
	Delivered  int64 `json:"delivered"`
	Expired    int64 `json:"expired"`
	Unacked    int   `json:"unacked"`
	Lost       int64 `json:"lost"`
	Duplicates int64 `json:"duplicates"`
}

// twoDestinations runs the TwoDestinations case: A on 127.0.0.1, B on
// 127.0.0.2, each a sink of this harness, behind one pipeline.
func (b *bench) twoDestinations(ctx context.Context) (*TwoDestinations, error) {
	d := &TwoDestinations{Limit: 100, Capacity: 200, MaxQueueTime: 10, RetryAfter: 60, Seconds: 65}
	if b.o.quick {
		d.MaxQueueTime, d.RetryAfter, d.Seconds = 2, 3, 8
	}
	d.PerKeyCapacity = d.Capacity / 4 // the default with url_from on JetStream
	a, err := serveSink(&sink{record: true, admit: func(time.Time) bool { return false }, retryAfter: fmt.Sprint(d.RetryAfter)}, "127.0.0.1")
	if err != nil {
		return nil, err
	}
	defer a.close()
	ok, err := serveSink(&sink{record: true}, "127.0.0.2")
	if err != nil {
		return nil, err
	}
	defer ok.close()
	const name, durable = "PUSHDEST", "shaper-pushback-destinations"
	drop, err := b.stream(ctx, name, 0)
	if err != nil {
		return nil, err
	}
	defer drop()
	// Enough for B at the whole limit all along: its lane never runs dry.
	d.Published = 2 * int(d.Limit*(d.Seconds+10))
	urls := []string{a.URL, ok.URL}
	if err := b.js.Publish(ctx, name+".in", d.Published, func(i int) []byte {
		return fmt.Appendf(nil, `{"url":%q,"payment":"pay_%010d"}`, urls[i%2], i)
	}); err != nil {
		return nil, err
	}
	progress("pushback: two destinations at %g/s, A answering 429 Retry-After: %d to everything, for %.0f s", d.Limit, d.RetryAfter, d.Seconds)
	r, err := startPipeline(ctx, pipelineSpec{
		name: name, source: b.natsSource(name, durable), urlFrom: "json:url", allowedHosts: []string{"127.0.0.1", "127.0.0.2"},
		rate:     shaper.RateConfig{Mode: shaper.ModeLeaky, Limit: d.Limit},
		capacity: d.Capacity, maxInFlight: 8, maxQueueTime: time.Duration(d.MaxQueueTime * float64(time.Second)),
		onExpire: shaper.OnExpireDrop, maxBackoff: 2 * time.Duration(d.RetryAfter) * time.Second,
	})
	if err != nil {
		return nil, err
	}
	first := func() time.Time {
		var t time.Time
		for _, ts := range [][]time.Time{a.refusals(), ok.arrivals()} {
			if len(ts) > 0 && (t.IsZero() || ts[0].Before(t)) {
				t = ts[0]
			}
		}
		return t
	}
	waitFor(ctx, 30*time.Second, func() bool { return !first().IsZero() })
	origin := first()
	end := origin.Add(time.Duration(d.Seconds * float64(time.Second)))
	if !origin.IsZero() {
		time.Sleep(time.Until(end))
	}
	delivered, refused := ok.arrivals(), a.refusals()
	if err := r.stop(); err != nil {
		progress("pushback, two destinations: pipeline stop: %v", err)
	}
	if origin.IsZero() {
		return nil, fmt.Errorf("no request within 30s")
	}
	st := r.p.Status()
	d.BDelivered = len(between(delivered, origin.Add(time.Second), end))
	d.BRate = round2(float64(d.BDelivered) / (d.Seconds - 1))
	for _, t := range refused {
		d.ARequestsAt = append(d.ARequestsAt, round2(t.Sub(origin).Seconds()))
	}
	if d.Unacked, err = b.js.Unacked(ctx, name, durable); err != nil {
		return nil, err
	}
	d.Delivered, d.Expired = st.Outcomes[shaper.OutcomeDelivered], st.Outcomes[shaper.OutcomeDropped]
	d.Lost = int64(d.Published) - d.Delivered - d.Expired - st.Outcomes[shaper.OutcomeExpired] - st.Outcomes[shaper.OutcomeDeadLettered] - int64(d.Unacked)
	d.Duplicates = int64(len(ok.arrivals())) - d.Delivered
	progress("pushback, two destinations: B %.1f/s (%.1f%% of the limit); A %d requests, at %v s; %d delivered, %d expired, %d unacked, %d lost, %d duplicates",
		d.BRate, 100*d.BRate/d.Limit, len(d.ARequestsAt), d.ARequestsAt, d.Delivered, d.Expired, d.Unacked, d.Lost, d.Duplicates)
	return d, nil
}

// limitAt is the limit in force at one moment.
type limitAt struct {
	at    time.Time
	limit float64
}

// sampleLimit reads the pipeline's limit in force every interval until the
// contract has run for d from its first request.
func sampleLimit(ctx context.Context, p *shaper.Pipeline, c *slidingContract, interval, d time.Duration) ([]limitAt, error) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	started := time.Now()
	var out []limitAt
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case now := <-ticker.C:
			out = append(out, limitAt{at: now, limit: p.Status().LimitNow})
			origin := c.start()
			if origin.IsZero() && now.Sub(started) > 30*time.Second {
				return nil, fmt.Errorf("no request reached the sink within 30s")
			}
			if !origin.IsZero() && now.Sub(origin) >= d {
				return out, nil
			}
		}
	}
}

// measurePushback turns what the sink saw (the 2xx and the 429s) and the
// limit in force over time into samples and per-step figures, with times
// from origin, the sink's first request.
func measurePushback(sec *PushbackSection, origin time.Time, ok, refused []time.Time, limits []limitAt) PushbackRun {
	var run PushbackRun
	seconds := func(t time.Time) float64 { return t.Sub(origin).Seconds() }
	at := func(s float64) time.Time { return origin.Add(time.Duration(s * float64(time.Second))) }
	end := at(sec.Seconds)
	prev := origin
	for _, l := range limits {
		if l.at.Before(origin) || l.at.After(end) {
			continue
		}
		t := seconds(l.at)
		run.Samples = append(run.Samples, PushbackSample{
			T:         round2(t),
			Limit:     round2(l.limit),
			Capacity:  capacityAt(sec.Steps, t),
			Delivered: float64(countIn(ok, l.at.Add(-time.Second), l.at)),
			Throttled: countIn(refused, prev, l.at),
		})
		prev = l.at
	}
	run.Requests = len(between(ok, origin, end)) + len(between(refused, origin, end))
	run.Throttled = len(between(refused, origin, end))
	run.Delivered = len(between(ok, origin, end))
	run.ThrottledPct = pct(run.Throttled, run.Requests)
	for i, st := range sec.Steps {
		next := sec.Seconds
		if i+1 < len(sec.Steps) {
			next = sec.Steps[i+1].At
		}
		from, to := at(st.At+sec.SettleSeconds), at(next)
		f := PushbackFollow{At: st.At, Capacity: st.Capacity, FollowSeconds: followTime(run.Samples, st.At, next, st.Capacity)}
		limit := -1.0
		for _, sm := range run.Samples {
			if sm.T >= st.At && sm.T < next && math.Abs(sm.Limit-float64(st.Capacity)) <= pushbackWithin*float64(st.Capacity) {
				limit = round2(sm.T - st.At)
				break
			}
		}
		f.LimitSeconds = &limit
		delivered := len(between(ok, from, to))
		f.SteadyThrottled = len(between(refused, from, to))
		f.SteadyRequests = delivered + f.SteadyThrottled
		f.SteadyThrottledPct = pct(f.SteadyThrottled, f.SteadyRequests)
		f.SteadyRate = round2(float64(delivered) / to.Sub(from).Seconds())
		run.SteadyRequests += f.SteadyRequests
		run.SteadyThrottled += f.SteadyThrottled
		run.Admissible += int(float64(st.Capacity) * (next - st.At))
		run.Steps = append(run.Steps, f)
	}
	run.SteadyThrottledPct = pct(run.SteadyThrottled, run.SteadyRequests)
	return run
}

// followTime is the time from the step at from until the delivered rate
// is within pushbackWithin of capacity at every sample for pushbackHold,
// all before to; -1 if it never is.
func followTime(samples []PushbackSample, from, to float64, capacity int) float64 {
	in := func(s PushbackSample) bool {
		return math.Abs(s.Delivered-float64(capacity)) <= pushbackWithin*float64(capacity)
	}
	hold := pushbackHold.Seconds()
	for i, s := range samples {
		if s.T < from || !in(s) {
			continue
		}
		if s.T+hold > to {
			return -1
		}
		held := true
		for _, later := range samples[i+1:] {
			if later.T > s.T+hold {
				break
			}
			if !in(later) {
				held = false
				break
			}
		}
		if held {
			return round2(s.T - from)
		}
	}
	return -1
}

// capacityAt is the sink's capacity t seconds from its first request.
func capacityAt(steps []PushbackStep, t float64) int {
	c := steps[0].Capacity
	for _, s := range steps {
		if t >= s.At {
			c = s.Capacity
		}
	}
	return c
}

// countIn counts the sorted times in (from, to].
func countIn(ts []time.Time, from, to time.Time) int {
	return len(between(ts, from.Add(1), to.Add(1)))
}

func pct(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return round2(100 * float64(n) / float64(of))
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

// slidingContract is the admission rule of the push-back sink: it admits
// capacity(t) requests in any sliding second (package quota, as the core's
// push-back tests do), t from its first request. It is safe for concurrent
// use.
type slidingContract struct {
	steps []PushbackStep
	quota quota.Window

	mu     sync.Mutex
	origin time.Time // the first request; zero: none yet
}

// admit reports whether a request arriving at now is admitted, and counts
// it if so.
func (c *slidingContract) admit(now time.Time) bool {
	c.mu.Lock()
	if c.origin.IsZero() {
		c.origin = now
	}
	origin := c.origin
	c.mu.Unlock()
	return c.quota.Admit(now, capacityAt(c.steps, now.Sub(origin).Seconds()))
}

// start returns when the first request came (zero: none yet).
func (c *slidingContract) start() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.origin
}

// scheduleText writes the steps as "100 → 30 → 80/s".
func scheduleText(steps []PushbackStep) string {
	var parts []string
	for _, s := range steps {
		parts = append(parts, fmt.Sprint(s.Capacity))
	}
	return strings.Join(parts, " → ") + "/s"
}

// followText writes a follow time, or that there was none.
func followText(s float64) string {
	if s < 0 {
		return "not within 10%"
	}
	return fmt.Sprintf("%.1f s", s)
}
