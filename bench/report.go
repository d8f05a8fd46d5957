package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Report is everything one run measured; docs/benchmarks.json is this,
// and docs/benchmarks.md is rendered from it.
type Report struct {
	Command string  `json:"command"`
	Date    string  `json:"date"`
	Seconds float64 `json:"seconds"`
	Quick   bool    `json:"quick,omitempty"`
	Machine Machine `json:"machine"`
	Goals   []Goal  `json:"goals"`
	// Failures are the errors of sections that could not be measured.
	Failures []string `json:"failures,omitempty"`

	Precision  *PrecisionSection  `json:"precision,omitempty"`
	Overhead   *OverheadSection   `json:"overhead,omitempty"`
	Throughput *ThroughputSection `json:"throughput,omitempty"`
	Scale      *ScaleSection      `json:"scale,omitempty"`
	Picture    *PictureSection    `json:"picture,omitempty"`
	Pushback   *PushbackSection   `json:"pushback,omitempty"`
	Lanes      *LanesSection      `json:"lanes,omitempty"`
	// Destinations is what sink.http.url_from costs with many hosts.
	Destinations *DestinationsSection `json:"destinations,omitempty"`
	// Peers is shaper beside the loops users would write instead.
	Peers *PeersSection `json:"peers,omitempty"`
	// Tuning is what each knob of internal/tuning buys (bench/tuning.go).
	Tuning *TuningSection `json:"tuning,omitempty"`

	written []string
}

// Goal is one of the project's targets with what this run measured. The
// harness reports goals; it never fails on one.
type Goal struct {
	Goal     string `json:"goal"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
}

// loadAffected is the share of the machine's CPU that other processes may
// use during a section before its figures are flagged.
const loadAffected = 5.0

func evaluateGoals(r *Report) []Goal {
	var goals []Goal
	add := func(goal string, met bool, format string, args ...any) {
		goals = append(goals, Goal{Goal: goal, Measured: fmt.Sprintf(format, args...), Met: met})
	}
	if p := r.Precision; p != nil {
		if c, ok := findPrecision(p, implLeaky, 5000); ok {
			add("leaky rate error ≤ 0.1% at 5000/s", math.Abs(c.RateErrPct) <= 0.1, "%+.3f%%", c.RateErrPct)
		}
		// The spacing goals hold leaky mode to them. Token mode promises
		// the average only: bursts up to burst, after idle time or to catch
		// up a late scheduler, are its contract; its figures are in the
		// precision table.
		// window says whether every leaky case kept count(c) within its
		// allowed per 100 ms, and where the most over it (or under) came;
		// "" when no case measured it (count 0: a run made before).
		window := func(count func(PrecisionCase) int) (met bool, where string) {
			met, worst := true, 0
			for _, c := range p.Cases {
				n := count(c)
				if c.Limiter != implLeaky || n == 0 {
					continue
				}
				met = met && n <= c.Allowed100ms
				if over := n - c.Allowed100ms; where == "" || over >= worst {
					worst, where = over, fmt.Sprintf("%d (allowed %d) at %v/s", n, c.Allowed100ms, c.Limit)
				}
			}
			return met, where
		}
		if met, where := window(func(c PrecisionCase) int { return c.Max100ms }); where != "" {
			add("leaky: no 100 ms window above limit/10 + 1 (steady state, every limit)", met, "worst: %s", where)
		}
		if met, where := window(func(c PrecisionCase) int { return c.Departed100ms }); where != "" {
			add("leaky: no 100 ms window of departures above limit/10 + 1 (as the limiter let them go, before the way to the sink)", met, "worst: %s", where)
		}
		worstJ, at, found := 0.0, 0.0, false
		for _, c := range p.Cases {
			if c.Limiter == implLeaky && c.Limit <= 1000 && c.JitterP99 >= worstJ {
				worstJ, at, found = c.JitterP99, c.Limit, true
			}
		}
		if found {
			add("leaky: p99 jitter ≤ 1 ms at limits up to 1000/s", worstJ <= 1000, "worst p99 %s (at %v/s)", micros(worstJ), at)
		}
	}
	if o := r.Overhead; o != nil {
		byName := map[string]LimiterBench{}
		for _, b := range o.Limiter {
			byName[b.Name] = b
		}
		for _, bench := range []string{"Reserve", "ReserveParallel"} {
			x, ok := byName[bench+"/x-time-rate"]
			if !ok {
				continue
			}
			for _, impl := range []string{implLeaky, implToken} {
				s, ok := byName[bench+"/"+impl]
				if !ok {
					continue
				}
				add(fmt.Sprintf("%s %s at or below x/time/rate's ns/op, 0 allocs", bench, impl),
					s.NsPerOp <= x.NsPerOp && s.AllocsPerOp == 0,
					"%.1f vs %.1f ns/op, %g allocs/op", s.NsPerOp, x.NsPerOp, s.AllocsPerOp)
			}
		}
		for _, idle := range o.Idle {
			add(fmt.Sprintf("idle CPU < 0.5%% (%s)", idle.Source), idle.Pct < 0.5, "%.3f%% of a core", idle.Pct)
		}
	}
	if t := r.Throughput; t != nil {
		best, inFlight := 0.0, 0
		for _, c := range t.Cases {
			if strings.HasPrefix(c.Source, "Kafka") && c.Rate > best {
				best, inFlight = c.Rate, c.MaxInFlight
			}
		}
		if inFlight > 0 {
			add("≥ 20 000 msg/s Kafka → HTTP with no limit on 2 cores", best >= 20000, "%.0f msg/s (max_in_flight %d)", best, inFlight)
		}
	}
	if s := r.Pushback; s != nil && len(s.Runs) > 0 {
		// The goals hold the adaptive run to them at the steps (the
		// start is not a step), and in every step's steady state.
		a := s.Runs[0]
		met := true
		var follow []string
		for _, f := range a.Steps[1:] {
			if f.FollowSeconds < 0 || f.FollowSeconds > 5 {
				met = false
			}
			follow = append(follow, fmt.Sprintf("→ %d/s: %s", f.Capacity, followText(f.FollowSeconds)))
		}
		add("push-back, adaptive: delivered rate within 10% of the sink's capacity ≤ 5 s after each step", met, "%s", strings.Join(follow, ", "))
		worstPct, at := 0.0, 0
		for _, f := range a.Steps {
			if f.SteadyThrottledPct >= worstPct {
				worstPct, at = f.SteadyThrottledPct, f.Capacity
			}
		}
		add("push-back, adaptive: < 5% of requests throttled (429) in steady state", worstPct < 5, "worst step %.1f%% (at %d/s); all steady states %.1f%%", worstPct, at, a.SteadyThrottledPct)
		if up := a.Steps[len(a.Steps)-1]; len(a.Steps) > 1 && up.Capacity > a.Steps[len(a.Steps)-2].Capacity && up.LimitSeconds != nil {
			in := *up.LimitSeconds
			add(fmt.Sprintf("push-back, adaptive: the limit in force within 10%% of the raised capacity ≤ 5 s after the step up to %d/s", up.Capacity),
				in >= 0 && in <= 5, "%s", followText(in))
		}
	}
	if d := r.Pushback.twoDestinations(); d != nil {
		add("two destinations, one answering 429 Retry-After: 60 to everything: the other delivers ≥ 90% of rate.limit (all of it is its own while the first is held), nothing lost",
			d.BRate >= 0.9*d.Limit && d.Lost == 0, "%.1f/s of %g/s (%.1f%%); %d lost", d.BRate, d.Limit, 100*d.BRate/d.Limit, d.Lost)
	}
	if s := r.Scale; s != nil {
		for _, b := range s.Backlog {
			if b.Backlog >= 1_000_000 {
				add("RSS ≤ 64 MiB with 1M messages of backlog", b.RSSMiB <= 64, "peak %.1f MiB", b.RSSMiB)
			}
		}
	}
	if s := r.Lanes; s != nil {
		goals = append(goals, s.goals()...)
	}
	if s := r.Destinations; s != nil {
		goals = append(goals, s.goals()...)
	}
	if s := r.Peers; s != nil {
		goals = append(goals, s.goals()...)
	}
	return goals
}

func findPrecision(p *PrecisionSection, impl string, limit float64) (PrecisionCase, bool) {
	for _, c := range p.Cases {
		if c.Limiter == impl && c.Limit == limit {
			return c, true
		}
	}
	return PrecisionCase{}, false
}

// write writes benchmarks.json, benchmarks.md and, when the picture and
// the push-back and lanes sections ran, shaping.svg, pushback.svg and
// lanes.svg into dir.
func (r *Report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"benchmarks.json": append(js, '\n'),
		"benchmarks.md":   []byte(r.markdown()),
	}
	if r.Picture != nil {
		files["shaping.svg"] = []byte(renderSVG(r.Picture))
	}
	if r.Pushback != nil {
		files["pushback.svg"] = []byte(renderPushbackSVG(r.Pushback))
	}
	if r.Lanes != nil && r.Lanes.TwoKeys != nil {
		files["lanes.svg"] = []byte(renderLanesSVG(r.Lanes.TwoKeys))
	}
	for _, name := range []string{"benchmarks.md", "benchmarks.json", "shaping.svg", "pushback.svg", "lanes.svg"} {
		data, ok := files[name]
		if !ok {
			continue
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
		r.written = append(r.written, path)
	}
	return nil
}

func (r *Report) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	m := r.Machine
	p("# shaper benchmarks")
	p("")
	p("Written by the benchmark harness (`bench/`), not by hand. To reproduce:")
	p("")
	p("```")
	p("%s", reproducible(r.Command))
	p("```")
	p("")
	p("Measured %s at commit %s on %s, %d cores%s.", r.Date, orDash(m.Commit), m.CPU, m.Cores, map[bool]string{true: " (**-quick: short runs, not for publishing**)"}[r.Quick])
	p("")
	p("`make bench` runs every section. Flags: `-only %s`", strings.Join(sections, ","))
	p("runs some sections; `-quick` checks the harness in a minute or two; `-cpuprofile FILE` profiles the harness")
	p("process (the in-process pipelines); `-shaper BIN` uses a prebuilt binary for the `shaper run` children;")
	p("`-render benchmarks.json` rewrites this page and the pictures from saved figures, measuring nothing. To see")
	p("where a delivered message's CPU goes, profile the same path in one process:")
	p("")
	p("```")
	p("go test -run '^$' -bench 'PipelineCPU/kafka/limit=1000' -benchtime 5000x -cpuprofile cpu.out ./bench/")
	p("go tool pprof -top -cum cpu.out")
	p("```")
	p("")
	p("| machine | |")
	p("|---|---|")
	p("| CPU | %s, %d cores (GOMAXPROCS %d) |", m.CPU, m.Cores, m.GOMAXPROCS)
	p("| memory | %d MiB |", m.MemoryMiB)
	p("| OS | %s |", m.Kernel)
	p("| Go | %s |", m.Go)
	p("| commit | %s |", orDash(m.Commit))
	p("| load average (1 min) | %.2f at the start, %.2f at the end |", m.LoadStart, m.LoadEnd)
	p("")
	p("Everything runs on this one machine: the brokers (an embedded nats-server, kfake), the HTTP sink on")
	p("127.0.0.1 and shaper share its cores. Each section says how much CPU *other* processes took while it")
	p("ran (the machine's busy time minus the harness's and its children's); above %.0f%% its figures are", loadAffected)
	p("marked as load-affected.")
	p("")

	if len(r.Failures) > 0 {
		p("## Sections that failed")
		p("")
		p("These sections are missing below; the errors, as the harness reported them:")
		p("")
		p("```")
		for _, f := range r.Failures {
			p("%s", f)
		}
		p("```")
		p("")
	}
	p("## Goals")
	p("")
	p("Reported, not asserted: the harness never fails on a missed goal. The spacing goals apply to leaky mode;")
	p("token mode promises the average only (bursts up to `burst` are its contract), and its figures are in the")
	p("precision table.")
	p("")
	p("| goal | measured | |")
	p("|---|---|---|")
	for _, g := range r.Goals {
		p("| %s | %s | %s |", g.Goal, g.Measured, map[bool]string{true: "met", false: "**missed**"}[g.Met])
	}
	p("")

	if s := r.Precision; s != nil {
		p("## Precision")
		p("")
		p("Through the real pipeline: %s. Each case publishes a backlog, starts a pipeline and records when every", s.Setup)
		p("request reaches the sink. The steady state is every arrival from 1 s after the first on (2 s of it, 4 s at 10/s).")
		p("The baselines drive the same pipeline through `shaper.Limiter`: **fixed-window** counts N per 1-second")
		p("window and resets at the edge (started 0.3 s before an edge, so its first two windows meet there), and")
		p("**x-time-rate** is `golang.org/x/time/rate` (burst 1) used like its `Wait`. Token mode runs with burst = limit/10.")
		p("")
		p("- *rate error*: steady-state rate vs the limit, (n−1)/(t_n−t_1); per whole window for the fixed window.")
		p("- *most per 100 ms*: the most arrivals in any 100 ms window of the steady state; the goal is limit/10 + 1.")
		p("  *departed* is the same count of the departures, as a probe around the limiter saw the slots taken: what")
		p("  the limiter let go, before the way to the sink (a worker, the HTTP client, the sink's own goroutine) adds its jitter.")
		p("- *most per 1 s*: the most in any 1 s window of the whole run, start included; allowed: limit + 1 (token: limit + burst).")
		p("- *jitter*: p50 / p99 of |gap − 1/limit| between consecutive steady-state arrivals.")
		p("- *scheduler late*: p50 / p99 / mean of how long after the previous slot's time the pipeline's scheduler asked the")
		p("  limiter for the next one (a probe around the limiter): its timer's wake-up lateness. A leaky limiter asked")
		p("  late keeps its schedule up to 2 ms late (the slots owed go together, never more than limit/10 + 1 in 100 ms")
		p("  nor limit + 1 in a second) and loses what is later; a token bucket catches up, in a burst.")
		p("")
		p("%s", loadLine(s.Load))
		p("")
		p("| limit | limiter | rate error | most per 100 ms (goal) | departed | most per 1 s (allowed) | jitter p50 | jitter p99 (goal ≤ 1 ms to 1000/s) | scheduler late p50 / p99 / mean |")
		p("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
		for _, c := range s.Cases {
			name := c.Limiter
			if c.Limiter == implToken {
				name = fmt.Sprintf("%s (burst %d)", c.Limiter, c.Burst)
			}
			departed := "–"
			if c.Departed100ms > 0 {
				departed = mark(strconv.Itoa(c.Departed100ms), c.Departed100ms > c.Allowed100ms)
			}
			p("| %v/s | %s | %+.3f%% | %s | %s | %s | %s | %s | %s / %s / %s |", c.Limit, name, c.RateErrPct,
				mark(fmt.Sprintf("%d (%d)", c.Max100ms, c.Allowed100ms), c.Max100ms > c.Allowed100ms), departed,
				mark(fmt.Sprintf("%d (%d)", c.Max1s, c.Allowed1s), c.Max1s > c.Allowed1s),
				micros(c.JitterP50), micros(c.JitterP99), micros(c.LateP50), micros(c.LateP99), micros(c.LateMean))
		}
		p("")
	}

	if s := r.Overhead; s != nil {
		p("## Overhead")
		p("")
		p("%s", loadLine(s.Load))
		p("")
		p("### One limiter decision")
		p("")
		p("`%s` (from the module root): one sub-benchmark per limiter, medians of %d runs. `Reserve` is one", s.LimiterCommand, runsOf(s.Limiter))
		p("goroutine; `ReserveParallel` is every goroutine on one limiter. Each runs on a fake clock, so `time.Now` is")
		p("not measured; go.uber.org/ratelimit reads its own clock, a fake one that costs an atomic add per call.")
		p("")
		p("| benchmark | ns/op (median) | range | allocs/op | B/op |")
		p("|---|---:|---:|---:|---:|")
		for _, l := range s.Limiter {
			p("| `%s` | %.1f | %.1f–%.1f | %g | %g |", l.Name, l.NsPerOp, l.NsMin, l.NsMax, l.AllocsPerOp, l.BytesPerOp)
		}
		p("")
		if s.Benchstat != "" {
			p("benchstat (`go run golang.org/x/perf/cmd/benchstat@latest`):")
			p("")
			p("```")
			b.WriteString(strings.TrimRight(s.Benchstat, "\n") + "\n")
			p("```")
		} else if s.BenchstatError != "" {
			p("benchstat could not be run: `%s`", s.BenchstatError)
		}
		p("")
		p("### CPU per delivered message")
		p("")
		p("A `shaper run` child process (the real daemon, built from `cmd/shaper`) consumes a Kafka backlog and")
		p("delivers to the HTTP sink at a fixed rate. Its CPU is utime + stime from `/proc/<pid>/stat` (10 ms")
		p("resolution) over the window; the broker (kfake) and the sink run in the harness process, whose CPU")
		p("(getrusage) is shown beside it and is not part of shaper's. Allocations are the child's own, from the")
		p("`go_memstats_mallocs_total` and `go_memstats_alloc_bytes_total` of its `/metrics` over the same window.")
		p("")
		p("| source | limit | window | delivered | shaper CPU per message | shaper CPU | shaper allocations per message | broker + sink CPU per message |")
		p("|---|---:|---:|---:|---:|---:|---:|---:|")
		for _, c := range s.CPUPerMessage {
			p("| %s → HTTP | %v/s | %.1f s | %d (%.0f/s) | %.1f µs | %.1f%% of a core | %.0f (%.1f KiB) | %.1f µs |", c.Source, c.Limit, c.Seconds, c.Delivered, c.Rate, c.ShaperUs, c.ShaperPct, c.Allocs, c.AllocBytes/1024, c.HarnessUs)
		}
		p("")
		p("### Idle daemon")
		p("")
		p("A `shaper run` child per source with an empty topic or stream, ready and connected, measured over")
		p("the window from `/proc/<pid>/stat`. Goal: < 0.5%% of a core.")
		p("")
		p("| source | window | CPU | share of one core |")
		p("|---|---:|---:|---:|")
		for _, i := range s.Idle {
			p("| %s | %.0f s | %.0f ms | %s |", i.Source, i.Seconds, i.CPUms, mark(fmt.Sprintf("%.3f%%", i.Pct), i.Pct >= 0.5))
		}
		p("")
	}

	if s := r.Throughput; s != nil {
		p("## Throughput ceiling")
		p("")
		p("%s. Messages per second at the sink over the window once delivery is under way; CPU per message", s.Setup)
		p("of the shaper child (`/proc/<pid>/stat`) and of the harness (broker + sink, getrusage). Goal: ≥ 20 000 msg/s")
		p("Kafka → HTTP.")
		p("")
		p("%s", loadLine(s.Load))
		p("")
		p("| source → HTTP | max_in_flight | msg/s | shaper CPU per message | shaper CPU | shaper allocations per message | broker + sink CPU per message |")
		p("|---|---:|---:|---:|---:|---:|---:|")
		for _, c := range s.Cases {
			rate := fmt.Sprintf("%.0f", c.Rate)
			if c.Exhausted {
				rate = "≥ " + rate + " (backlog ran out)"
			}
			p("| %s | %d | %s | %.1f µs | %.0f%% of a core | %.0f (%.1f KiB) | %.1f µs |", c.Source, c.MaxInFlight, rate, c.ShaperUs, c.ShaperPct, c.Allocs, c.AllocBytes/1024, c.HarnessUs)
		}
		p("")
	}

	if s := r.Scale; s != nil {
		p("## Scale")
		p("")
		p("%s", loadLine(s.Load))
		p("")
		p("### Memory under a Kafka backlog")
		p("")
		p("A `shaper run` child works through a backlog already in Kafka (kfake, 4 partitions), bucket capacity")
		p("1000, limit off, max_in_flight 64. Heap is the most `go_memstats_heap_inuse_bytes` its `/metrics` showed")
		p("(sampled every 200 ms); RSS is its peak resident set, `VmHWM` of `/proc/<pid>/status`. Goal: RSS ≤ 64 MiB with 1M.")
		p("")
		p("| backlog | delivered | time | msg/s | heap in use (max) | RSS (peak) |")
		p("|---:|---:|---:|---:|---:|---:|")
		for _, bl := range s.Backlog {
			delivered := fmt.Sprintf("%d", bl.Delivered)
			if bl.Capped {
				delivered += " (time cap)"
			}
			p("| %d | %s | %.1f s | %.0f | %.1f MiB | %s |", bl.Backlog, delivered, bl.Seconds, bl.Rate, bl.HeapMiB,
				mark(fmt.Sprintf("%.1f MiB", bl.RSSMiB), bl.Backlog >= 1_000_000 && bl.RSSMiB > 64))
		}
		p("")
		p("### Shared limit through Redis")
		p("")
		p("Three `shaper run` replicas share one JetStream durable and one limit in a real `redis-server`; the sink")
		p("counts what all three send together over the window. Redis calls are the `EVALSHA` + `EVAL` calls in")
		p("`INFO commandstats` over the window (statistics reset at its start), per request the sink received.")
		p("")
		p("| replicas | shared limit | window | aggregate rate | error | most per 100 ms (limit/10 + 1) | Redis calls per request |")
		p("|---:|---:|---:|---:|---:|---:|---:|")
		for _, sh := range s.Shared {
			fallback := ""
			if sh.Fallback {
				fallback = " (a replica fell back to its local limit)"
			}
			p("| %d | %v/s | %.1f s | %.1f/s%s | %+.2f%% | %d (%d) | %.3f |", sh.Replicas, sh.Limit, sh.Seconds, sh.Rate, fallback, sh.RateErrPct, sh.Max100ms, sh.Allowed100ms, sh.CallsPerRequest)
		}
		p("")
	}

	if s := r.Picture; s != nil {
		p("## The picture")
		p("")
		p("![A burst of %d messages shaped to %g/s: leaky mode, token mode and a fixed-window counter](shaping.svg)", s.Burst, s.Limit)
		p("")
		p("A burst of %d messages published at once into three pipelines (embedded JetStream → shaper → HTTP sink,", s.Burst)
		p("in the harness process), each with a different limiter at %g/s, counted in %d ms bins.", s.Limit, s.BinMs)
		p("")
		p("%s", loadLine(s.Load))
		p("")
		p("| limiter | most in any 100 ms | burst delivered after |")
		p("|---|---:|---:|")
		for _, pn := range s.Panels {
			p("| %s | %d | %.1f s |", pn.Label, pn.Max100ms, pn.Took)
		}
		p("")
	}

	if s := r.Pushback; s != nil {
		r.pushbackMarkdown(p, s)
	}
	if s := r.Lanes; s != nil {
		s.markdown(p)
	}
	if s := r.Destinations; s != nil {
		s.markdown(p)
	}
	if s := r.Peers; s != nil {
		s.markdown(p)
	}
	if s := r.Tuning; s != nil {
		s.markdown(p)
	}
	return b.String()
}

func loadLine(l Load) string {
	used := fmt.Sprintf("%.1f%%", l.ForeignPct)
	if l.ForeignPct < 1 {
		used = "under 1%" // /proc/stat counts in 10ms ticks: finer is noise
	}
	s := fmt.Sprintf("*Load: other processes used %s of the machine's CPU during this section (%.0f s; load average %.2f → %.2f).*",
		used, l.Seconds, l.LoadStart, l.LoadEnd)
	if l.ForeignPct > loadAffected {
		s += " **Load-affected: re-run on a quiet machine before quoting these figures.**"
	}
	return s
}

func mark(s string, bad bool) string {
	if bad {
		return "**" + s + "**"
	}
	return s
}

func micros(us float64) string {
	if us >= 1000 {
		return fmt.Sprintf("%.2f ms", us/1000)
	}
	return fmt.Sprintf("%.0f µs", us)
}

// reproducible is a harness command line as a reader would run it again:
// `go run ./bench` and the flags that choose what is measured (-only,
// -peer-cases, -quick), without where the run wrote its files (-out,
// -cpuprofile), the binary it used (-shaper), or any words after the flags.
func reproducible(command string) string {
	keep := map[string]bool{"only": true, "peer-cases": true, "quick": true}
	valued := map[string]bool{"only": true, "peer-cases": true, "out": true, "cpuprofile": true, "shaper": true, "render": true}
	out := []string{"go", "run", "./bench"}
	fields, ok := strings.CutPrefix(strings.TrimSpace(command), "go run ./bench")
	if !ok {
		return strings.Join(out, " ")
	}
	args := strings.Fields(fields)
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !strings.HasPrefix(args[i], "-") || !keep[name] && !valued[name] {
			break // not a flag: a note written after the command
		}
		if valued[name] && !hasValue && i+1 < len(args) {
			value, hasValue = args[i+1], true
			i++
		}
		if keep[name] {
			if hasValue {
				out = append(out, "-"+name, value)
			} else {
				out = append(out, "-"+name)
			}
		}
	}
	return strings.Join(out, " ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func runsOf(l []LimiterBench) int {
	if len(l) == 0 {
		return 0
	}
	return l[0].Runs
}

// pushbackMarkdown writes the push-back section.
func (r *Report) pushbackMarkdown(p func(string, ...any), s *PushbackSection) {
	p("## When the sink pushes back")
	p("")
	p("![The limit in force, the sink's capacity and the delivered rate over time, with rate.adaptive and with a fixed rate](pushback.svg)")
	p("")
	p("A sink that admits *capacity* requests in any sliding second and answers 429 with `Retry-After: 1` above it;")
	p("its capacity steps %s (at %s s from its first request, %.0f s in all). Two pipelines", scheduleText(s.Steps), stepTimes(s.Steps), s.Seconds)
	p("run through the same schedule one after the other (embedded JetStream → shaper.Pipeline → HTTP sink, in the")
	p("harness process; %d messages published first, bucket capacity 500, max_in_flight 8, max_queue_time 5m, so the", s.Messages)
	p("bucket never runs dry and nothing expires): rate.limit %g with `rate.adaptive: {min: 5}` (decrease 0.8, increase", s.Limit)
	p("2/s for three seconds after a push-back, then a step doubling each second), and a fixed %g/s without adaptive,", s.Limit)
	p("which pauses every departure for a `Retry-After` but keeps its limit. Every %d ms the harness samples the", s.SampleMs)
	p("limit in force (`Status().LimitNow`) and the 2xx of the second before.")
	if m := s.MeasuredBy; m.Command != "" {
		p("Measured by `%s` (%s, commit %s).", reproducible(m.Command), m.Date, orDash(m.Commit))
	}
	p("")
	p("- *follows in*: from the step until the delivered rate is within 10%% of the new capacity and stays so for 2 s")
	p("  (—: not before the next step); *limit in force within 10%% in*: until the sampled limit first is.")
	p("- *steady state*: from %.0f s after the step to the next one: the delivered rate, and the share of requests", s.SettleSeconds)
	p("  answered 429.")
	p("")
	p("%s", loadLine(s.Load))
	p("")
	p("| run | capacity | follows in (goal ≤ 5 s) | limit in force within 10%% in | delivered, steady state | 429s, steady state (goal < 5%%) |")
	p("|---|---:|---:|---:|---:|---:|")
	for _, run := range s.Runs {
		for i, f := range run.Steps {
			follow := followText(f.FollowSeconds)
			if f.FollowSeconds < 0 {
				follow = "—"
			}
			if i == 0 {
				follow += " (start)"
			} else {
				follow = mark(follow, f.FollowSeconds < 0 || f.FollowSeconds > 5)
			}
			limit := "—"
			if f.LimitSeconds != nil && *f.LimitSeconds >= 0 {
				limit = fmt.Sprintf("%.1f s", *f.LimitSeconds)
			}
			p("| %s | %d/s from %g s | %s | %s | %.1f/s (%.0f%% of capacity) | %s |", run.Name, f.Capacity, f.At, follow, limit,
				f.SteadyRate, 100*f.SteadyRate/float64(f.Capacity),
				mark(fmt.Sprintf("%.1f%% (%d of %d)", f.SteadyThrottledPct, f.SteadyThrottled, f.SteadyRequests), f.SteadyThrottledPct >= 5))
		}
	}
	p("")
	p("Over the whole run (*delivered*: the 2xx, against what the sink's capacity admits over the %.0f s):", s.Seconds)
	p("")
	p("| run | delivered | requests | 429s | share of requests |")
	p("|---|---:|---:|---:|---:|")
	for _, run := range s.Runs {
		p("| %s | %d of %d (%.0f%%) | %d | %d | %.1f%% |", run.Label, run.Delivered, run.Admissible,
			100*float64(run.Delivered)/math.Max(float64(run.Admissible), 1), run.Requests, run.Throttled, run.ThrottledPct)
	}
	p("")
	if a, f, ok := adaptiveAndFixed(s); ok && a.Throttled > 0 {
		p("The fixed rate drew %.1f× as many 429s as the adaptive one (%d against %d), %.1f× the share of its requests.",
			float64(f.Throttled)/float64(a.Throttled), f.Throttled, a.Throttled, f.ThrottledPct/math.Max(a.ThrottledPct, 1e-9))
		p("")
	}
	if d := s.TwoDestinations; d != nil {
		twoDestinationsMarkdown(p, d)
	}
}

// twoDestinations returns the section's two-destination run, or nil.
func (s *PushbackSection) twoDestinations() *TwoDestinations {
	if s == nil {
		return nil
	}
	return s.TwoDestinations
}

// twoDestinationsMarkdown writes the two-destination run.
func twoDestinationsMarkdown(p func(string, ...any), d *TwoDestinations) {
	p("### Two destinations, one held")
	p("")
	p("One pipeline (embedded JetStream → shaper.Pipeline → HTTP sink, in the harness process), `rate.limit` %g, whose", d.Limit)
	p("%s messages name in turn two destinations (`url_from: json:url`, `allowed_hosts` 127.0.0.1 and 127.0.0.2,", thousands(d.Published))
	p("`allow_private: true`, no `key:`: each destination a lane): A, a sink on 127.0.0.1 that answers 429")
	p("`Retry-After: %d` to every request, and B, one on 127.0.0.2 that answers 204. `bucket: {capacity: %d,", d.RetryAfter, d.Capacity)
	p("max_queue_time: %gs, on_expire: drop}` (`per_key_capacity` %d by default), `retry.max_backoff` above the", d.MaxQueueTime, d.PerKeyCapacity)
	p("Retry-After, max_in_flight 8; %.0f s from the first request. Alone, B would get the whole limit (the stream", d.Seconds)
	p("never runs dry); the goal is at least 90%% of it beside A.")
	p("")
	at := make([]string, len(d.ARequestsAt))
	for i, t := range d.ARequestsAt {
		at[i] = fmt.Sprintf("%.1f", t)
	}
	p("| B delivered (from 1 s on) | A's requests | delivered | dropped at max_queue_time (A's) | unacked in the broker after the stop | lost | duplicates |")
	p("|---:|---:|---:|---:|---:|---:|---:|")
	p("| %s (%.1f/s, %.1f%% of the limit) | %d (at %s s) | %s | %s | %s | %s | %d |", thousands(d.BDelivered), d.BRate, 100*d.BRate/d.Limit,
		len(d.ARequestsAt), strings.Join(at, ", "), thousands(int(d.Delivered)), thousands(int(d.Expired)), thousands(d.Unacked),
		mark(fmt.Sprint(d.Lost), d.Lost != 0), d.Duplicates)
	p("")
}

// adaptiveAndFixed returns the push-back section's two runs.
func adaptiveAndFixed(s *PushbackSection) (adaptive, fixed PushbackRun, ok bool) {
	var fa, ff bool
	for _, r := range s.Runs {
		switch r.Name {
		case "adaptive":
			adaptive, fa = r, true
		case "fixed":
			fixed, ff = r, true
		}
	}
	return adaptive, fixed, fa && ff
}

// stepTimes writes the steps' times as "0, 30 and 60".
func stepTimes(steps []PushbackStep) string {
	var ts []string
	for _, s := range steps {
		ts = append(ts, fmt.Sprint(s.At))
	}
	if len(ts) < 2 {
		return strings.Join(ts, "")
	}
	return strings.Join(ts[:len(ts)-1], ", ") + " and " + ts[len(ts)-1]
}
