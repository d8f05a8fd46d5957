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
// down and up again (docs/multi-tenant.md, "When the sink pushes back"): the same
// schedule of capacities behind the adaptive rate and behind a fixed rate,
// one after the other.
type PushbackSection struct {
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
	Load          Load          `json:"load"`
	Runs          []PushbackRun `json:"runs"`
	// TwoDestinations is the run with one destination held (issue 30).
	TwoDestinations *TwoDestinations `json:"two_destinations,omitempty"`
	// MeasuredBy is the run that measured the section, which stays with it
	// when it is merged into the report of another run.
	MeasuredBy Provenance `json:"measured_by"`
}

// Provenance is the command and date of a harness run.
type Provenance struct {
	Command string `json:"command"`
	Date    string `json:"date"`
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

func runPushback(ctx context.Context, o *options, env *environment) (*PushbackSection, error) {
	probe := startLoadProbe()
	step := 30 * time.Second
	if o.quick {
		step = 10 * time.Second
	}
	sec := &PushbackSection{
		Limit: 100,
		Steps: []PushbackStep{
			{At: 0, Capacity: 100},
			{At: step.Seconds(), Capacity: 30},
			{At: 2 * step.Seconds(), Capacity: 80},
		},
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
		run, err := pushbackRun(ctx, env.js, sec, i, r.adaptive)
		if err != nil {
			return nil, fmt.Errorf("pushback %s: %w", r.name, err)
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
	if sec.TwoDestinations, err = twoDestinations(ctx, env.js, o.quick); err != nil {
		return nil, fmt.Errorf("pushback, two destinations: %w", err)
	}
	sec.Load = probe.stop()
	return sec, nil
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
func twoDestinations(ctx context.Context, js *jetStream, quick bool) (*TwoDestinations, error) {
	d := &TwoDestinations{Limit: 100, Capacity: 200, MaxQueueTime: 10, RetryAfter: 60, Seconds: 65}
	if quick {
		d.MaxQueueTime, d.RetryAfter, d.Seconds = 2, 3, 8
	}
	d.PerKeyCapacity = d.Capacity / 4 // the default with url_from on JetStream
	a, err := serveSink(&sink{record: true, admit: func(time.Time) bool { return false }, retryAfter: fmt.Sprint(d.RetryAfter)}, "127.0.0.1")
	if err != nil {
		return nil, err
	}
	defer a.close()
	b, err := serveSink(&sink{record: true}, "127.0.0.2")
	if err != nil {
		return nil, err
	}
	defer b.close()
	const name, durable = "PUSHDEST", "shaper-pushback-destinations"
	if err := js.stream(ctx, name); err != nil {
		return nil, err
	}
	defer js.deleteStream(context.WithoutCancel(ctx), name)
	// Enough for B at the whole limit all along: its lane never runs dry.
	d.Published = 2 * int(d.Limit*(d.Seconds+10))
	urls := []string{a.URL, b.URL}
	if err := js.Publish(ctx, name+".in", d.Published, func(i int) []byte {
		return fmt.Appendf(nil, `{"url":%q,"payment":"pay_%010d"}`, urls[i%2], i)
	}); err != nil {
		return nil, err
	}
	progress("pushback: two destinations at %g/s, A answering 429 Retry-After: %d to everything, for %.0f s", d.Limit, d.RetryAfter, d.Seconds)
	r, err := startPipeline(ctx, pipelineSpec{
		name: name, source: js.sourceConfig(name, durable), urlFrom: "json:url", allowedHosts: []string{"127.0.0.1", "127.0.0.2"},
		rate:     shaper.RateConfig{Mode: shaper.ModeLeaky, Limit: d.Limit},
		capacity: d.Capacity, maxInFlight: 8, maxQueueTime: time.Duration(d.MaxQueueTime * float64(time.Second)),
		onExpire: shaper.OnExpireDrop, maxBackoff: 2 * time.Duration(d.RetryAfter) * time.Second,
	})
	if err != nil {
		return nil, err
	}
	first := func() time.Time {
		var t time.Time
		for _, ts := range [][]time.Time{a.refusals(), b.arrivals()} {
			if len(ts) > 0 && (t.IsZero() || ts[0].Before(t)) {
				t = ts[0]
			}
		}
		return t
	}
	deadline := time.Now().Add(30 * time.Second)
	for first().IsZero() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	origin := first()
	if origin.IsZero() {
		_ = r.stop()
		return nil, fmt.Errorf("no request within 30s")
	}
	end := origin.Add(time.Duration(d.Seconds * float64(time.Second)))
	select {
	case <-time.After(time.Until(end)):
	case <-ctx.Done():
		_ = r.stop()
		return nil, ctx.Err()
	}
	ok, refused := b.arrivals(), a.refusals()
	if err := r.stop(); err != nil {
		progress("pushback, two destinations: pipeline stop: %v", err)
	}
	st := r.p.Status()
	d.BDelivered = len(between(ok, origin.Add(time.Second), end))
	d.BRate = round2(float64(d.BDelivered) / (d.Seconds - 1))
	for _, t := range refused {
		d.ARequestsAt = append(d.ARequestsAt, round2(t.Sub(origin).Seconds()))
	}
	if d.Unacked, err = js.Unacked(ctx, name, durable); err != nil {
		return nil, err
	}
	d.Delivered, d.Expired = st.Outcomes[shaper.OutcomeDelivered], st.Outcomes[shaper.OutcomeDropped]
	d.Lost = int64(d.Published) - d.Delivered - d.Expired - st.Outcomes[shaper.OutcomeExpired] - st.Outcomes[shaper.OutcomeDeadLettered] - int64(d.Unacked)
	d.Duplicates = int64(len(b.arrivals())) - d.Delivered
	progress("pushback, two destinations: B %.1f/s (%.1f%% of the limit); A %d requests, at %v s; %d delivered, %d expired, %d unacked, %d lost, %d duplicates",
		d.BRate, 100*d.BRate/d.Limit, len(d.ARequestsAt), d.ARequestsAt, d.Delivered, d.Expired, d.Unacked, d.Lost, d.Duplicates)
	return d, nil
}

// pushbackRun runs one pipeline through the sink's schedule and measures
// it.
func pushbackRun(ctx context.Context, js *jetStream, sec *PushbackSection, i int, adaptive *shaper.AdaptiveConfig) (PushbackRun, error) {
	var run PushbackRun
	name := fmt.Sprintf("PUSH%d", i)
	if err := js.stream(ctx, name); err != nil {
		return run, err
	}
	defer js.deleteStream(context.WithoutCancel(ctx), name)
	if err := js.publish(ctx, name, 0, sec.Messages, nil); err != nil {
		return run, err
	}
	contract := &slidingContract{steps: sec.Steps}
	sink, err := startThrottlingSink(contract.admit)
	if err != nil {
		return run, err
	}
	defer sink.close()
	r, err := startPipeline(ctx, pipelineSpec{
		name: name, source: js.sourceConfig(name, "shaper-pushback"), sinkURL: sink.URL,
		rate:     shaper.RateConfig{Mode: shaper.ModeLeaky, Limit: sec.Limit, Adaptive: adaptive},
		capacity: 500, maxInFlight: 8,
		// Nothing may expire while the sink holds the rate down.
		maxQueueTime: 5 * time.Minute,
	})
	if err != nil {
		return run, err
	}
	limits, err := sampleLimit(ctx, r.p, contract, time.Duration(sec.SampleMs)*time.Millisecond, time.Duration(sec.Seconds*float64(time.Second)))
	if err := r.stop(); err != nil {
		progress("pushback %s: pipeline stop: %v", name, err)
	}
	if err != nil {
		return run, err
	}
	return measurePushback(sec, contract.start(), sink.arrivals(), sink.refusals(), limits), nil
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

// The push-back picture, in the style of shaping.svg: one panel per run on
// one time axis, each with the sink's capacity (a grey step), the limit in
// force (dashed), the rate delivered over the second before each sample (a
// coloured line) and a red tick under the axis for each sample with 429s.
const pushbackPanelH = 150

var pushbackColours = []string{"#1f77b4", "#c62828"}

func renderPushbackSVG(sec *PushbackSection) string {
	var b strings.Builder
	n := len(sec.Runs)
	height := svgTop + n*pushbackPanelH + (n-1)*svgPanelGap + svgBottom
	plotW := float64(svgWidth - svgLeft - svgRight)
	x := func(s float64) float64 { return svgLeft + plotW*s/sec.Seconds }
	yMax := math.Ceil(sec.Limit*1.2/10) * 10

	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="11">`+"\n",
		svgWidth, height, svgWidth, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">A sink whose capacity steps %s, behind rate.limit %g</text>`+"\n", svgLeft, scheduleText(sec.Steps), sec.Limit)
	lx := float64(svgLeft)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="38" x2="%.0f" y2="38" stroke="#b0b0b0" stroke-width="5"/><text x="%.0f" y="42">sink capacity (per sliding second)</text>`+"\n", lx, lx+18, lx+22)
	lx += 210
	fmt.Fprintf(&b, `<line x1="%.0f" y1="38" x2="%.0f" y2="38" stroke="#333" stroke-dasharray="4 3"/><text x="%.0f" y="42">limit in force</text>`+"\n", lx, lx+18, lx+22)
	lx += 110
	fmt.Fprintf(&b, `<line x1="%.0f" y1="38" x2="%.0f" y2="38" stroke="#333" stroke-width="2"/><text x="%.0f" y="42">delivered (2xx over the last 1 s)</text>`+"\n", lx, lx+18, lx+22)
	lx += 215
	fmt.Fprintf(&b, `<line x1="%.0f" y1="34" x2="%.0f" y2="42" stroke="#c62828"/><text x="%.0f" y="42">a 429 (under the axis)</text>`+"\n", lx, lx, lx+6)

	tick := 10.0
	if sec.Seconds < 60 {
		tick = 5
	}
	for i, run := range sec.Runs {
		top := float64(svgTop + i*(pushbackPanelH+svgPanelGap))
		bottom := top + pushbackPanelH
		y := func(v float64) float64 { return bottom - pushbackPanelH*math.Min(v, yMax)/yMax }
		colour := pushbackColours[i%len(pushbackColours)]

		fmt.Fprintf(&b, `<text x="%d" y="%.0f" font-size="12" font-weight="bold" fill="%s">%s</text>`+"\n", svgLeft, top-6, colour, xmlEscape(run.Label))
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end" fill="#555">429s: %.1f%% of requests, %.1f%% in steady state</text>`+"\n", svgWidth-svgRight, top-6, run.ThrottledPct, run.SteadyThrottledPct)
		for v := 0.0; v <= yMax; v += 50 {
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e6e6e6"/>`+"\n", svgLeft, y(v), svgWidth-svgRight, y(v))
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%g/s</text>`+"\n", svgLeft-6, y(v)+4, v)
		}
		// The capacity, a step line under the others.
		var capPath strings.Builder
		for j, st := range sec.Steps {
			next := sec.Seconds
			if j+1 < len(sec.Steps) {
				next = sec.Steps[j+1].At
			}
			verb := "L"
			if j == 0 {
				verb = "M"
			}
			fmt.Fprintf(&capPath, "%s%.1f,%.1f L%.1f,%.1f ", verb, x(st.At), y(float64(st.Capacity)), x(next), y(float64(st.Capacity)))
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="#b0b0b0" stroke-width="5" stroke-linejoin="round"/>`+"\n", strings.TrimSpace(capPath.String()))
		// The limit in force and the delivered rate.
		var limPath, outPath strings.Builder
		for j, s := range run.Samples {
			verb := "L"
			if j == 0 {
				verb = "M"
			}
			fmt.Fprintf(&limPath, "%s%.1f,%.1f ", verb, x(s.T), y(s.Limit))
			fmt.Fprintf(&outPath, "%s%.1f,%.1f ", verb, x(s.T), y(s.Delivered))
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="#333" stroke-dasharray="4 3" stroke-width="1.2"/>`+"\n", strings.TrimSpace(limPath.String()))
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.6" stroke-linejoin="round"/>`+"\n", strings.TrimSpace(outPath.String()), colour)
		// 429s: a tick under the axis at each sample that saw any.
		for _, s := range run.Samples {
			if s.Throttled > 0 {
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#c62828"/>`+"\n", x(s.T), bottom+2, x(s.T), bottom+8)
			}
		}
		// Axes.
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#333"/>`+"\n", svgLeft, bottom, svgWidth-svgRight, bottom)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#333"/>`+"\n", svgLeft, top, svgLeft, bottom)
		for s := 0.0; s <= sec.Seconds; s += tick {
			if i == n-1 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%g</text>`+"\n", x(s), bottom+20, s)
			}
		}
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">seconds from the sink's first request</text>`+"\n", svgLeft+plotW/2, height-8)
	fmt.Fprintf(&b, `<text transform="translate(14 %d) rotate(-90)" text-anchor="middle">requests per second</text>`+"\n",
		svgTop+(n*pushbackPanelH+(n-1)*svgPanelGap)/2)
	b.WriteString("</svg>\n")
	return b.String()
}
