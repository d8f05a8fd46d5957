package main

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shaper-dev/shaper/internal/window"
)

// FleetSection is one rate across a fleet: `shaper run` replicas on one
// JetStream durable (they share its messages) sharing one limit through a
// real redis-server (rate.shared), every replica running, and again with
// replica 0 stalled the way a CPU quota stalls a container.
type FleetSection struct {
	Common
	// Each run measures a window of WindowSeconds that starts
	// SettleSeconds after the sink received a second's worth of the
	// limit. In a stalled run replica 0 is stopped (SIGSTOP) for StallMs
	// every StallEveryMs through the window, then continued (SIGCONT).
	WindowSeconds float64    `json:"window_seconds"`
	SettleSeconds float64    `json:"settle_seconds"`
	StallMs       int        `json:"stall_ms"`
	StallEveryMs  int        `json:"stall_every_ms"`
	Runs          []FleetRun `json:"runs"`
}

// FleetRun is one fleet at one shared limit. Rate is what reached the
// sink's host from all replicas together over the window (on the wire, see
// markdown), RateErrPct its error against the limit, Max100ms the most in
// any 100 ms on the wire and Max100msHandler at the sink's handler;
// CallsPerRequest is the EVALSHA and EVAL calls
// the server ran (INFO commandstats) per request; Unused is the increase
// of shaper_limiter_unused_total summed over the replicas; Fallback is set
// when a replica showed shaper_limiter_fallback at the window's start or
// end.
type FleetRun struct {
	Replicas        int            `json:"replicas"`
	Limit           float64        `json:"limit"`
	Stalled         bool           `json:"stalled,omitempty"`
	Seconds         float64        `json:"seconds"`
	Requests        int            `json:"requests"`
	Rate            float64        `json:"aggregate_rate"`
	RateErrPct      float64        `json:"rate_err_pct"`
	Max100ms        int            `json:"max_per_100ms"`
	Max100msHandler int            `json:"max_per_100ms_handler,omitempty"`
	Allowed100ms    int            `json:"allowed_per_100ms"`
	CallsPerRequest float64        `json:"redis_calls_per_request"`
	Unused          float64        `json:"unused_slots"`
	Fallback        bool           `json:"fallback,omitempty"`
	Replica         []FleetReplica `json:"replica"`
}

// FleetReplica is one replica over the window: the messages it completed
// (shaper_messages_completed_total), the slots it leased and did not use
// (shaper_limiter_unused_total), and its CPU (/proc/<pid>/stat) per
// message and as a share of one core.
type FleetReplica struct {
	Completed int64   `json:"completed"`
	Unused    float64 `json:"unused_slots"`
	CPUUs     float64 `json:"cpu_us_per_msg"`
	CPUPct    float64 `json:"cpu_pct_of_core"`
}

// fleetStream is the section's stream, fleetCapacity each replica's
// bucket capacity.
const (
	fleetStream   = "FLEET"
	fleetCapacity = 1000
)

// The metrics of a replica the section reads.
const (
	completedTotal = "shaper_messages_completed_total"
	unusedTotal    = "shaper_limiter_unused_total"
	fallbackGauge  = "shaper_limiter_fallback"
)

func runFleet(ctx context.Context, b *bench) (*FleetSection, error) {
	sec := &FleetSection{WindowSeconds: 5, SettleSeconds: 2, StallMs: 100, StallEveryMs: 400}
	fleets, limits := []int{1, 3, 5}, []float64{100, 1000, 5000}
	if b.o.quick {
		sec.WindowSeconds, sec.SettleSeconds = 2, 0.5
		fleets, limits = []int{1, 3}, []float64{100, 1000}
	}
	// One stream for every run, each on a durable of its own from the
	// start: enough for the start, the window and a margin at the highest
	// limit, and every replica's bucket full.
	n := int(slices.Max(limits)*(sec.SettleSeconds+sec.WindowSeconds+8)) + slices.Max(fleets)*fleetCapacity
	progress("fleet: %d messages into JetStream", n)
	drop, err := b.stream(ctx, fleetStream, n)
	if err != nil {
		return nil, err
	}
	defer drop()
	redis, err := startRedis(ctx, b.o.tmp)
	if err != nil {
		return nil, err
	}
	defer redis.close()
	// The sink is a process of its own that stamps each request with the
	// time its bytes reached the host (bench/peers/sink).
	bins := filepath.Join(b.o.tmp, "peers")
	if err := buildPeers(ctx, b, bins, "sink"); err != nil {
		return nil, err
	}
	sink, err := startPeerSink(ctx, b.o.tmp, filepath.Join(bins, "sink"), "")
	if err != nil {
		return nil, err
	}
	defer sink.close()
	made := 0
	for _, limit := range limits {
		for _, replicas := range fleets {
			for _, stalled := range []bool{false, true} {
				if len(b.o.fleetCases) > 0 && !b.o.fleetCases[fleetCase(replicas, limit, stalled)] {
					continue
				}
				made++
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				r, err := b.fleetRun(ctx, redis, sink, sec, replicas, limit, stalled)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", r.label(), err)
				}
				progress("fleet: %-44s %7.1f/s (%+.2f%%), most %d per 100 ms (≤ %d), %.3f Redis calls per request, %.0f unused (%s), fallback %v",
					r.label(), r.Rate, r.RateErrPct, r.Max100ms, r.Allowed100ms, r.CallsPerRequest, r.Unused, r.eachReplica(func(p FleetReplica) string { return fmt.Sprintf("%.0f", p.Unused) }), r.Fallback)
				sec.Runs = append(sec.Runs, r)
			}
		}
	}
	if made == 0 {
		return nil, fmt.Errorf("-fleet-cases: no run named %v", slices.Collect(maps.Keys(b.o.fleetCases)))
	}
	return sec, nil
}

// fleetCase is the name -fleet-cases knows a run by: 3x1000, 3x1000-stalled.
func fleetCase(replicas int, limit float64, stalled bool) string {
	name := fmt.Sprintf("%dx%g", replicas, limit)
	if stalled {
		name += "-stalled"
	}
	return name
}

// fleetRun starts replicas on a new durable and a new Redis key, and
// measures what the sink receives from all of them over the window.
func (b *bench) fleetRun(ctx context.Context, redis *redisServer, s *peerSink, sec *FleetSection, replicas int, limit float64, stalled bool) (FleetRun, error) {
	r := FleetRun{Replicas: replicas, Limit: limit, Stalled: stalled, Allowed100ms: int(limit/10) + replicas}
	id := fmt.Sprintf("fleet-%d-%g-%v", replicas, limit, stalled)
	if _, err := s.call(http.MethodPost, "/reset"); err != nil {
		return r, err
	}
	config := pipelineYAML("fleet", b.natsYAML(fleetStream, id), fmt.Sprintf("bucket: {capacity: %d, max_queue_time: 1m}", fleetCapacity),
		fmt.Sprintf("rate: {limit: %v, shared: {redis: {addr: %q}, key: %q, fallback_limit: %v, timeout: 200ms}}", limit, redis.Addr, "shaper:bench:"+id, limit/float64(replicas)),
		fmt.Sprintf("sink: {http: {url: %q, max_in_flight: 8}}", s.callbackURL()))
	ds, err := b.startDaemons(ctx, id, slices.Repeat([]string{config}, replicas))
	if err != nil {
		return r, err
	}
	defer ds.kill()
	if !waitFor(ctx, time.Minute, func() bool { h, _, _ := s.arrivals(); return len(h) >= int(limit) }) {
		return r, fmt.Errorf("no steady delivery within a minute; log:\n%s", ds[0].tail())
	}
	time.Sleep(time.Duration(sec.SettleSeconds * float64(time.Second)))
	if err := redis.client.ConfigResetStat(ctx).Err(); err != nil {
		return r, err
	}
	cpu0, m0 := sampleFleet(ds)
	from, resume := time.Now(), func() {}
	if stalled {
		resume = stall(ds[0].pid(), time.Duration(sec.StallMs)*time.Millisecond, time.Duration(sec.StallEveryMs)*time.Millisecond)
	}
	defer resume() // before the kill: never leave a replica stopped
	time.Sleep(time.Duration(sec.WindowSeconds * float64(time.Second)))
	to := time.Now()
	resume()
	calls, err := redis.scriptCalls(ctx)
	if err != nil {
		return r, err
	}
	cpu1, m1 := sampleFleet(ds)
	handler, wire, err := s.arrivals()
	if err != nil {
		return r, err
	}
	if wire == nil {
		wire = handler // no receive timestamps on this system
	}
	in := between(wire, from, to)
	r.Seconds, r.Requests = to.Sub(from).Seconds(), len(in)
	r.Rate = float64(len(in)) / r.Seconds
	r.RateErrPct = 100 * (r.Rate - limit) / limit
	r.Max100ms = window.Most(in, 100*time.Millisecond)
	r.Max100msHandler = window.Most(between(handler, from, to), 100*time.Millisecond)
	if len(in) > 0 {
		r.CallsPerRequest = float64(calls) / float64(len(in))
	}
	for i := range ds {
		cpu := cpu1[i] - cpu0[i]
		rep := FleetReplica{Completed: int64(m1[i][completedTotal] - m0[i][completedTotal]), Unused: m1[i][unusedTotal] - m0[i][unusedTotal], CPUPct: 100 * cpu.Seconds() / r.Seconds}
		rep.CPUUs = perMessage(cpu, rep.Completed)
		r.Replica = append(r.Replica, rep)
		r.Unused += rep.Unused
		r.Fallback = r.Fallback || m0[i][fallbackGauge] > 0 || m1[i][fallbackGauge] > 0
	}
	return r, nil
}

// sampleFleet reads each replica's CPU and metrics; a failed scrape reads
// as zeros.
func sampleFleet(ds daemons) (cpu []time.Duration, metrics []map[string]float64) {
	for _, p := range ds {
		m, _ := p.scrape(completedTotal, unusedTotal, fallbackGauge)
		cpu, metrics = append(cpu, p.cpu()), append(metrics, m)
	}
	return cpu, metrics
}

// stall stops process pid (SIGSTOP) for stop every every, as a CPU quota
// does, until the function it returns is called: that continues the
// process (SIGCONT) and returns once it has. Calling it again does nothing.
func stall(pid int, stop, every time.Duration) (resume func()) {
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		defer func() { _ = syscall.Kill(pid, syscall.SIGCONT) }() // whatever happened, it runs on
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if syscall.Kill(pid, syscall.SIGSTOP) != nil {
				return
			}
			select {
			case <-done:
				return
			case <-time.After(stop):
			}
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-ended }) }
}

// eachReplica writes one figure of each replica, replica 0 first.
func (r FleetRun) eachReplica(figure func(FleetReplica) string) string {
	var each []string
	for _, rep := range r.Replica {
		each = append(each, figure(rep))
	}
	return strings.Join(each, " / ")
}

// label names the run in progress lines, errors and goals.
func (r FleetRun) label() string {
	l := fmt.Sprintf("%d %s at %g/s", r.Replicas, map[bool]string{true: "replica", false: "replicas"}[r.Replicas == 1], r.Limit)
	if r.Stalled {
		l += ", replica 0 stalled"
	}
	return l
}

func (s *FleetSection) addGoals(g *goals) {
	rateErr := func(r FleetRun) float64 { return math.Abs(r.RateErrPct) }
	for _, stalled := range []bool{false, true} {
		goal := "fleet: aggregate rate within 1% of the shared limit, every replica running"
		if stalled {
			goal = fmt.Sprintf("fleet: aggregate rate within 1%% of the shared limit while replica 0 of several is stopped %d ms every %d ms", s.StallMs, s.StallEveryMs)
		}
		// A lone replica stopped a quarter of the time has no others to
		// use its slots: the stalled goal is the fleet's.
		keep := func(r FleetRun) bool { return r.Stalled == stalled && !(stalled && r.Replicas == 1) }
		if r, ok := worst(s.Runs, keep, rateErr); ok {
			g.add(goal, rateErr(r) <= 1, "worst %+.2f%% (%s)", r.RateErrPct, r.label())
		}
	}
	over := func(r FleetRun) float64 { return float64(r.Max100ms - r.Allowed100ms) }
	if r, ok := worst(s.Runs, nil, over); ok {
		g.add("fleet: no 100 ms window above limit/10 + replicas (every run, stalled or not)", over(r) <= 0,
			"worst: %d (allowed %d, %s)", r.Max100ms, r.Allowed100ms, r.label())
	}
	calls := func(r FleetRun) float64 { return r.CallsPerRequest }
	if r, ok := worst(s.Runs, func(r FleetRun) bool { return r.Limit >= 1000 }, calls); ok {
		g.add("fleet: ≤ 0.1 Redis calls per request at ≥ 1000/s", calls(r) <= 0.1, "worst %.3f (%s)", r.CallsPerRequest, r.label())
	}
}

func (s *FleetSection) markdown(p func(string, ...any), r *Report) {
	p("## Fleet: one rate across replicas\n")
	p("`shaper run` replicas read one JetStream durable (they share its messages) and share one `rate.limit` through a real `redis-server` (`rate.shared`, `fallback_limit` limit/replicas, bucket capacity %d, `max_in_flight` 8), all delivering to one HTTP sink on 127.0.0.1 that records each arrival; the broker runs in the harness process, the sink (`bench/peers/sink`) in one of its own.", fleetCapacity)
	p("Each run starts its replicas on a new durable and a new Redis key, waits until the sink has received a second's worth of the limit and %g s more, and measures a window of %g s.", s.SettleSeconds, s.WindowSeconds)
	p("In a *stalled* run replica 0 is stopped (SIGSTOP) for %d ms every %d ms through the window and continued (SIGCONT), as a CPU quota stalls a container; the other replicas run on.\n", s.StallMs, s.StallEveryMs)
	p("- *aggregate rate*: the requests that reached the sink from every replica together over the window, against the limit; goal: within 1%%. Arrivals are counted *on the wire*: by the kernel's receive timestamp of each request's first bytes (SO_TIMESTAMPNS), when it reached the sink's host, as a packet capture would show it.")
	p("- *most per 100 ms*: the most arrivals on the wire in any 100 ms of the window; goal: limit/10 + replicas (a lease's seam per replica); a replica that wakes up to 2 ms late sends the slots it missed at once, which may add limit × 2 ms. *At the handler* is the same count of when the sink's handler ran, which adds however late the system scheduled the sink's process.")
	p("- *Redis calls per request*: the `EVALSHA` + `EVAL` calls in `INFO commandstats` over the window (statistics reset at its start), per request the sink received; goal: ≤ 0.1 at ≥ 1000/s.")
	p("- *unused slots*: how much `shaper_limiter_unused_total` rose over the window, summed over the replicas: slots leased and then given back or let pass.")
	p("- *CPU per message*: each replica's CPU (`/proc/<pid>/stat`, 10 ms resolution) over the window per message it completed (`shaper_messages_completed_total`), replica 0 first.")
	p("- *fell back*: a replica showed `shaper_limiter_fallback` at the window's start or end, having run on its local `fallback_limit` for a while.")
	measuredBy(p, s.Common, r)
	p("\n%s\n", loadLine(s.Load))
	table(p, ">replicas", ">shared limit", "replica 0", ">aggregate rate", ">error", ">most per 100 ms (goal)", ">at the handler", ">Redis calls per request", ">unused slots", ">CPU per message, each replica", "fell back")
	for _, run := range s.Runs {
		replica0 := "running"
		if run.Stalled {
			replica0 = fmt.Sprintf("stopped %d ms every %d ms", s.StallMs, s.StallEveryMs)
		}
		handler := "–" // measured before the sink had wire times
		if run.Max100msHandler > 0 {
			handler = fmt.Sprint(run.Max100msHandler)
		}
		p("| %d | %v/s | %s | %.1f/s | %s | %s | %s | %s | %.0f | %s µs | %s |", run.Replicas, run.Limit, replica0, run.Rate,
			mark(fmt.Sprintf("%+.2f%%", run.RateErrPct), math.Abs(run.RateErrPct) > 1),
			mark(fmt.Sprintf("%d (%d)", run.Max100ms, run.Allowed100ms), run.Max100ms > run.Allowed100ms), handler,
			mark(fmt.Sprintf("%.3f", run.CallsPerRequest), run.Limit >= 1000 && run.CallsPerRequest > 0.1),
			run.Unused, run.eachReplica(func(r FleetReplica) string { return fmt.Sprintf("%.0f", r.CPUUs) }), map[bool]string{true: "**yes**", false: "no"}[run.Fallback])
	}
	p("")
}
