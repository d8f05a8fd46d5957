package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

func (r *Report) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	m := r.Machine
	p("# shaper benchmarks\n")
	p("Written by the benchmark harness (`bench/`), not by hand. To reproduce:\n")
	p("```")
	p("%s", reproducible(r.Command))
	p("```\n")
	p("Measured %s on %s, %d cores, %s%s.\n", r.Date, m.CPU, m.Cores, m.Go, map[bool]string{true: " (**-quick: short runs, not for publishing**)"}[r.Quick])
	p("`make bench` runs every section. Flags: `-only %s` runs some sections; `-quick` checks the harness in a minute or two; `-cpuprofile FILE` profiles the harness process (the in-process pipelines); `-shaper BIN` uses a prebuilt binary for the `shaper run` children; `-render benchmarks.json` rewrites this page and the pictures from saved figures, measuring nothing. To see where a delivered message's CPU goes, profile the same path in one process:\n", strings.Join(sectionNames(), ","))
	p("```")
	p("go test -run '^$' -bench 'PipelineCPU/kafka/limit=1000' -benchtime 5000x -cpuprofile cpu.out ./bench/\ngo tool pprof -top -cum cpu.out")
	p("```\n")
	table(p, "machine", "")
	p("| CPU | %s, %d cores (GOMAXPROCS %d) |", m.CPU, m.Cores, m.GOMAXPROCS)
	p("| memory | %d MiB |", m.MemoryMiB)
	p("| OS | %s |", m.Kernel)
	p("| Go | %s |", m.Go)
	p("| load average (1 min) | %.2f at the start, %.2f at the end |\n", m.LoadStart, m.LoadEnd)
	p("Everything runs on this one machine: the brokers (an embedded nats-server, kfake), the HTTP sink on 127.0.0.1 and shaper share its cores. Each section says how much CPU *other* processes took while it ran (the machine's busy time minus the harness's and its children's), and the virtual machine's host (steal); above %.0f%% together its figures are marked as load-affected.\n", loadAffected)

	if len(r.Failures) > 0 {
		p("## Sections that failed\n")
		p("These sections are missing below; the errors, as the harness reported them:\n")
		p("```")
		for _, f := range r.Failures {
			p("%s", f)
		}
		p("```\n")
	}
	p("## Goals\n")
	p("Reported, not asserted: the harness never fails on a missed goal. The spacing goals apply to leaky mode; token mode promises the average only (bursts up to `burst` are its contract), and its figures are in the precision table.\n")
	table(p, "goal", "measured", "")
	for _, g := range r.Goals {
		p("| %s | %s | %s |", g.Goal, g.Measured, map[bool]string{true: "met", false: "**missed**"}[g.Met])
	}
	p("")

	for _, s := range r.measured() {
		s.markdown(p, r)
	}
	return b.String()
}

func (s *PrecisionSection) markdown(p func(string, ...any), r *Report) {
	p("## Precision\n")
	p("Through the real pipeline: %s. Each case publishes a backlog, starts a pipeline and records when every request reaches the sink. The steady state is every arrival from 1 s after the first on (2 s of it, 4 s at 10/s). The baselines drive the same pipeline through `shaper.Limiter`: **fixed-window** counts N per 1-second window and resets at the edge (started 0.3 s before an edge, so its first two windows meet there), and **x-time-rate** is `golang.org/x/time/rate` (burst 1) used like its `Wait`. Token mode runs with burst = limit/10.\n", s.Setup)
	p("- *rate error*: steady-state rate vs the limit, (n−1)/(t_n−t_1); per whole window for the fixed window.")
	p("- *most per 100 ms*: the most arrivals in any 100 ms window of the steady state; the goal is limit/10 + 1. *departed* is the same count of the departures, as a probe around the limiter saw the slots taken: what the limiter let go, before the way to the sink (a worker, the HTTP client, the sink's own goroutine) adds its jitter.")
	p("- *most per 1 s*: the most in any 1 s window of the whole run, start included; allowed: limit + 1 (token: limit + burst).")
	p("- *jitter*: p50 / p99 of |gap − 1/limit| between consecutive steady-state arrivals.")
	p("- *scheduler late*: p50 / p99 / mean of how long after the previous slot's time the pipeline's scheduler asked the limiter for the next one (a probe around the limiter): its timer's wake-up lateness. A leaky limiter asked late keeps its schedule up to 2 ms late (the slots owed go together, never more than limit/10 + 1 in 100 ms nor limit + 1 in a second) and loses what is later; a token bucket catches up, in a burst.\n")
	p("%s\n", loadLine(s.Load))
	table(p, ">limit", "limiter", ">rate error", ">most per 100 ms (goal)", ">departed", ">most per 1 s (allowed)", ">jitter p50", ">jitter p99 (goal ≤ 1 ms to 1000/s)", ">scheduler late p50 / p99 / mean")
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

func (s *OverheadSection) markdown(p func(string, ...any), r *Report) {
	p("## Overhead\n")
	p("%s\n", loadLine(s.Load))
	p("### One limiter decision\n")
	p("`%s` (from the module root): one sub-benchmark per limiter, medians of %d runs. `Reserve` is one goroutine; `ReserveParallel` is every goroutine on one limiter. Each runs on a fake clock, so `time.Now` is not measured; go.uber.org/ratelimit reads its own clock, a fake one that costs an atomic add per call.\n", s.LimiterCommand, runsOf(s.Limiter, func(l LimiterBench) int { return l.Runs }))
	table(p, "benchmark", ">ns/op (median)", ">range", ">allocs/op", ">B/op")
	for _, l := range s.Limiter {
		p("| `%s` | %.1f | %.1f–%.1f | %g | %g |", l.Name, l.NsPerOp, l.NsMin, l.NsMax, l.AllocsPerOp, l.BytesPerOp)
	}
	p("")
	if s.Benchstat != "" {
		p("benchstat (`go run golang.org/x/perf/cmd/benchstat@latest`):\n")
		p("```")
		p("%s", strings.TrimRight(s.Benchstat, "\n"))
		p("```")
	} else if s.BenchstatError != "" {
		p("benchstat could not be run: `%s`", s.BenchstatError)
	}
	p("")
	p("### CPU per delivered message\n")
	p("A `shaper run` child process (the real daemon, built from `cmd/shaper`) consumes a Kafka backlog and delivers to the HTTP sink at a fixed rate. Its CPU is utime + stime from `/proc/<pid>/stat` (10 ms resolution) over the window; the broker (kfake) and the sink run in the harness process, whose CPU (getrusage) is shown beside it and is not part of shaper's. Allocations are the child's own, from the `go_memstats_mallocs_total` and `go_memstats_alloc_bytes_total` of its `/metrics` over the same window.\n")
	table(p, "source", ">limit", ">window", ">delivered", ">shaper CPU per message", ">shaper CPU", ">shaper allocations per message", ">broker + sink CPU per message")
	for _, c := range s.CPUPerMessage {
		p("| %s → HTTP | %v/s | %.1f s | %d (%.0f/s) | %s |", c.Source, c.Limit, c.Seconds, c.Delivered, c.Rate, c.cells("%.1f"))
	}
	p("")
	p("### Idle daemon\n")
	p("A `shaper run` child per source with an empty topic or stream, ready and connected, measured over the window from `/proc/<pid>/stat`. Goal: < 0.5%% of a core.\n")
	table(p, "source", ">window", ">CPU", ">share of one core")
	for _, i := range s.Idle {
		p("| %s | %.0f s | %.0f ms | %s |", i.Source, i.Seconds, i.CPUms, mark(fmt.Sprintf("%.3f%%", i.Pct), i.Pct >= 0.5))
	}
	p("")
}

func (s *ThroughputSection) markdown(p func(string, ...any), r *Report) {
	p("## Throughput ceiling\n")
	p("%s. Messages per second at the sink over the window once delivery is under way; CPU per message", s.Setup)
	p("of the shaper child (`/proc/<pid>/stat`) and of the harness (broker + sink, getrusage). Goal: ≥ 20 000 msg/s Kafka → HTTP.\n")
	p("%s\n", loadLine(s.Load))
	table(p, "source → HTTP", ">max_in_flight", ">msg/s", ">shaper CPU per message", ">shaper CPU", ">shaper allocations per message", ">broker + sink CPU per message")
	for _, c := range s.Cases {
		rate := fmt.Sprintf("%.0f", c.Rate)
		if c.Exhausted {
			rate = "≥ " + rate + " (backlog ran out)"
		}
		p("| %s | %d | %s | %s |", c.Source, c.MaxInFlight, rate, c.cells("%.0f"))
	}
	p("")
}

func (s *ScaleSection) markdown(p func(string, ...any), r *Report) {
	p("## Scale\n")
	p("%s\n", loadLine(s.Load))
	p("### Memory under a Kafka backlog\n")
	p("A `shaper run` child works through a backlog already in Kafka (kfake, 4 partitions), bucket capacity 1000, limit off, max_in_flight 64. Heap is the most `go_memstats_heap_inuse_bytes` its `/metrics` showed (sampled every 200 ms); RSS is its peak resident set, `VmHWM` of `/proc/<pid>/status`. Goal: RSS ≤ 64 MiB with 1M.\n")
	table(p, ">backlog", ">delivered", ">time", ">msg/s", ">heap in use (max)", ">RSS (peak)")
	for _, bl := range s.Backlog {
		delivered := fmt.Sprintf("%d", bl.Delivered)
		if bl.Capped {
			delivered += " (time cap)"
		}
		p("| %d | %s | %.1f s | %.0f | %.1f MiB | %s |", bl.Backlog, delivered, bl.Seconds, bl.Rate, bl.HeapMiB,
			mark(fmt.Sprintf("%.1f MiB", bl.RSSMiB), bl.Backlog >= 1_000_000 && bl.RSSMiB > 64))
	}
	p("")
}

func (s *PictureSection) markdown(p func(string, ...any), r *Report) {
	p("## The picture\n")
	p("![A burst of %d messages shaped to %g/s: leaky mode, token mode and a fixed-window counter](shaping.svg)\n", s.Burst, s.Limit)
	p("A burst of %d messages published at once into three pipelines (embedded JetStream → shaper → HTTP sink, in the harness process), each with a different limiter at %g/s, counted in %d ms bins.\n", s.Burst, s.Limit, s.BinMs)
	p("%s\n", loadLine(s.Load))
	table(p, "limiter", ">most in any 100 ms", ">burst delivered after")
	for _, pn := range s.Panels {
		p("| %s | %d | %.1f s |", pn.Label, pn.Max100ms, pn.Took)
	}
	p("")
}

// table writes the head of a markdown table: its columns, each aligned
// right when it starts with '>'.
func table(p func(string, ...any), cols ...string) {
	head, align := "|", "|"
	for _, c := range cols {
		c, right := strings.CutPrefix(c, ">")
		head += strings.TrimRight(" "+c, " ") + " |"
		align += map[bool]string{false: "---|", true: "---:|"}[right]
	}
	p("%s", head)
	p("%s", align)
}

// measuredBy says which run measured section c when it is not the
// report's own: a section kept from an earlier run of `-only`.
func measuredBy(p func(string, ...any), c Common, r *Report) {
	if m := c.MeasuredBy; m != nil && (m.Command != r.Command || m.Date != r.Date) {
		p("Measured by `%s` (%s).", reproducible(m.Command), m.Date)
	}
}

// cells are a child's costs in the columns of every CPU table, its share of
// a core written with pct.
func (c ChildCost) cells(pct string) string {
	return fmt.Sprintf("%.1f µs | "+pct+"%% of a core | %.0f (%.1f KiB) | %.1f µs", c.ShaperUs, c.ShaperPct, c.Allocs, c.AllocBytes/1024, c.HarnessUs)
}

func loadLine(l Load) string {
	used := fmt.Sprintf("%.1f%%", l.ForeignPct)
	if l.ForeignPct < 1 {
		used = "under 1%" // /proc/stat counts in 10ms ticks: finer is noise
	}
	if l.StealPct >= 1 {
		used += fmt.Sprintf(" and the virtual machine's host took %.1f%% (steal)", l.StealPct)
	}
	s := fmt.Sprintf("*Load: other processes used %s of the machine's CPU during this section (%.0f s; load average %.2f → %.2f).*",
		used, l.Seconds, l.LoadStart, l.LoadEnd)
	if l.ForeignPct+l.StealPct > loadAffected {
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
// -peer-cases, -fleet-cases, -quick), without where the run wrote its files (-out,
// -cpuprofile), the binary it used (-shaper), or any words after the flags.
func reproducible(command string) string {
	keep := map[string]bool{"only": true, "peer-cases": true, "fleet-cases": true, "quick": true}
	valued := map[string]bool{"only": true, "peer-cases": true, "fleet-cases": true, "out": true, "cpuprofile": true, "shaper": true, "render": true}
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

// markdown writes the push-back section.
func (s *PushbackSection) markdown(p func(string, ...any), r *Report) {
	p("## When the sink pushes back\n")
	p("![The limit in force, the sink's capacity and the delivered rate over time, with rate.adaptive and with a fixed rate](pushback.svg)\n")
	p("A sink that admits *capacity* requests in any sliding second and answers 429 with `Retry-After: 1` above it; its capacity steps %s (at %s s from its first request, %.0f s in all). Two pipelines run through the same schedule one after the other (embedded JetStream → shaper.Pipeline → HTTP sink, in the harness process; %d messages published first, bucket capacity 500, max_in_flight 8, max_queue_time 5m, so the bucket never runs dry and nothing expires): rate.limit %g with `rate.adaptive: {min: 5}` (decrease 0.8, increase 2/s per second for two seconds after a push-back, then a rise growing fivefold each second, applied every 250 ms), and a fixed %g/s without adaptive, which pauses every departure for a `Retry-After` but keeps its limit. Every %d ms the harness samples the limit in force (`Status().LimitNow`) and the 2xx of the second before.", scheduleText(s.Steps), stepTimes(s.Steps), s.Seconds, s.Messages, s.Limit, s.Limit, s.SampleMs)
	measuredBy(p, s.Common, r)
	p("")
	p("- *follows in*: from the step until the delivered rate is within 10%% of the new capacity and stays so for 2 s (—: not before the next step); *limit in force within 10%% in*: until the sampled limit first is.")
	p("- *steady state*: from %.0f s after the step to the next one: the delivered rate, and the share of requests answered 429.\n", s.SettleSeconds)
	p("%s\n", loadLine(s.Load))
	table(p, "run", ">capacity", ">follows in (goal ≤ 5 s)", ">limit in force within 10% in", ">delivered, steady state", ">429s, steady state (goal < 5%)")
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
	p("Over the whole run (*delivered*: the 2xx, against what the sink's capacity admits over the %.0f s):\n", s.Seconds)
	table(p, "run", ">delivered", ">requests", ">429s", ">share of requests")
	for _, run := range s.Runs {
		p("| %s | %d of %d (%.0f%%) | %d | %d | %.1f%% |", run.Label, run.Delivered, run.Admissible,
			100*float64(run.Delivered)/math.Max(float64(run.Admissible), 1), run.Requests, run.Throttled, run.ThrottledPct)
	}
	p("")
	a, okA := find(s.Runs, "adaptive")
	f, okF := find(s.Runs, "fixed")
	if okA && okF && a.Throttled > 0 {
		p("The fixed rate drew %.1f× as many 429s as the adaptive one (%d against %d), %.1f× the share of its requests.",
			float64(f.Throttled)/float64(a.Throttled), f.Throttled, a.Throttled, f.ThrottledPct/math.Max(a.ThrottledPct, 1e-9))
		p("")
	}
	if d := s.TwoDestinations; d != nil {
		twoDestinationsMarkdown(p, d)
	}
}

// twoDestinationsMarkdown writes the two-destination run.
func twoDestinationsMarkdown(p func(string, ...any), d *TwoDestinations) {
	p("### Two destinations, one held\n")
	p("One pipeline (embedded JetStream → shaper.Pipeline → HTTP sink, in the harness process), `rate.limit` %g, whose", d.Limit)
	p("%s messages name in turn two destinations (`url_from: json:url`, `allowed_hosts` 127.0.0.1 and 127.0.0.2,", thousands(d.Published))
	p("`allow_private: true`, no `key:`: each destination a lane): A, a sink on 127.0.0.1 that answers 429 `Retry-After: %d` to every request, and B, one on 127.0.0.2 that answers 204. `bucket: {capacity: %d, max_queue_time: %gs, on_expire: drop}` (`per_key_capacity` %d by default), `retry.max_backoff` above the Retry-After, max_in_flight 8; %.0f s from the first request. Alone, B would get the whole limit (the stream never runs dry); the goal is at least 90%% of it beside A.\n", d.RetryAfter, d.Capacity, d.MaxQueueTime, d.PerKeyCapacity, d.Seconds)
	at := make([]string, len(d.ARequestsAt))
	for i, t := range d.ARequestsAt {
		at[i] = fmt.Sprintf("%.1f", t)
	}
	table(p, ">B delivered (from 1 s on)", ">A's requests", ">delivered", ">dropped at max_queue_time (A's)", ">unacked in the broker after the stop", ">lost", ">duplicates")
	p("| %s (%.1f/s, %.1f%% of the limit) | %d (at %s s) | %s | %s | %s | %s | %d |", thousands(d.BDelivered), d.BRate, 100*d.BRate/d.Limit,
		len(d.ARequestsAt), strings.Join(at, ", "), thousands(int(d.Delivered)), thousands(int(d.Expired)), thousands(d.Unacked),
		mark(fmt.Sprint(d.Lost), d.Lost != 0), d.Duplicates)
	p("")
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

// decision returns the median of the decision sub-benchmark kind (turns or
// per_key) with lanes lanes.
func (s *LanesSection) decision(kind string, lanes int) (LimiterBench, bool) {
	return find(s.Decisions, fmt.Sprintf("TakeWithActiveLanes/%s/lanes=%d", kind, lanes))
}

// laneKinds are the decision benchmark's two kinds, with their labels.
var laneKinds = []struct{ name, label string }{
	{"turns", "keys in turns"},
	{"per_key", "rate.per_key"},
}

// markdown writes the lanes section.
func (s *LanesSection) markdown(p func(string, ...any), r *Report) {
	p("## Keys (lanes)\n")
	p("With `key.from` the bucket holds a lane per key: a ring of the lanes that may have a message ready, which take turns, and a heap of the lanes ready at a known time (a per-key slot under `rate.per_key`, a retry's due time).")
	measuredBy(p, s.Common, r)
	p("")
	p("%s\n", loadLine(s.Load))
	if tk := s.TwoKeys; tk != nil {
		tk.markdown(p)
	}
	p("### One scheduling decision\n")
	p("`%s` (from the module root), medians of %d runs. One op is the bucket's part of one departure, the task put back instead of sent: `take(now)` (the decision), `spend(t, now)` (the lane's per-key slot) and `retry(t, now)` (the task back in its lane, due at once, which stands for admitting a new message without its allocation): three acquisitions of the bucket's lock (four under `rate.per_key`). Every lane holds a message. *keys in turns*: no `rate.per_key`; every lane stays in the ring. *rate.per_key*: each lane has its own limit of 1/s, the lanes' slots spread over the second, and the scheduler waits for each: the op holds a second `take`, as after the scheduler's sleep, and each decision moves one lane into the timed heap and one out. Goal: O(1) or O(log n), < 200 ns at 10 000 lanes, 0 allocs.\n", s.DecisionCommand, runsOf(s.Decisions, func(l LimiterBench) int { return l.Runs }))
	table(p, ">active lanes", ">keys in turns: ns/op (range)", ">vs 1 lane", ">allocs/op", ">rate.per_key: ns/op (range)", ">vs 1 lane", ">allocs/op")
	for _, n := range []int{1, 100, 10_000, 100_000} {
		row := fmt.Sprintf("| %s |", thousands(n))
		for _, k := range laneKinds {
			d, ok := s.decision(k.name, n)
			one, ok1 := s.decision(k.name, 1)
			if !ok {
				row += " – | – | – |"
				continue
			}
			vs := "–"
			if ok1 && one.NsPerOp > 0 {
				vs = fmt.Sprintf("%.2f×", d.NsPerOp/one.NsPerOp)
			}
			row += fmt.Sprintf(" %s | %s | %s |",
				mark(fmt.Sprintf("%.1f (%.1f–%.1f)", d.NsPerOp, d.NsMin, d.NsMax), n == 10_000 && d.NsPerOp >= 200), vs,
				mark(fmt.Sprintf("%g", d.AllocsPerOp), d.AllocsPerOp > 0))
		}
		p("%s", row)
	}
	p("")
	var growth []string
	for _, k := range laneKinds {
		from, ok1 := s.decision(k.name, 100)
		to, ok2 := s.decision(k.name, 100_000)
		if ok1 && ok2 && from.NsPerOp > 0 {
			growth = append(growth, fmt.Sprintf("%.2f× (%s)", to.NsPerOp/from.NsPerOp, k.label))
		}
	}
	if len(growth) > 0 {
		p("From 100 lanes to 100 000 (1000×, log₂ n 2.5×) a decision's cost grew %s.\n", strings.Join(growth, " and "))
	}
	p("### Memory per lane\n")
	p("`%s`: the live heap after a GC with the lanes held, less the live heap before the bucket was made, per lane (median of %d runs). The messages and the keys' strings are made before and do not count (a key costs its own bytes besides). *active*: a lane holding one message (its task included); *active_per_key*: the same with its own limiter (`rate.per_key`); *idle_per_key*: a key remembered only for its limiter: its message was sent and settled, and its limiter is not yet as new.\n", s.MemoryCommand, runsOf(s.Memory, func(m LaneMemory) int { return m.Runs }))
	table(p, "lane", ">lanes", ">heap per lane")
	for _, m := range s.Memory {
		p("| %s | %s | %.0f B |", m.Name, thousands(m.Lanes), m.BytesPerLane)
	}
	p("")
	if len(s.CPU) == 2 {
		p("### CPU per delivered message, 1 key against 10 000\n")
		p("Two `shaper run` children side by side over the same window, each consuming its own Kafka backlog (kfake) with `key.from: header:%s`, `bucket: {capacity: 20000, max_queue_time: 1m}` and `rate.limit` %v, and delivering to its own HTTP sink: one with every message of one key, one with the messages spread over 10 000 keys in turn, so the bucket holds two of each and every key has a lane. CPU, allocations and the harness's CPU are measured as in *CPU per delivered message* above; the harness's (brokers and both sinks) is over both children's messages. *lanes active*: the fewer `shaper_keys_active` of the window's start and end.\n", laneHeader, s.CPU[0].Limit)
		table(p, ">keys", ">lanes active", ">window", ">delivered", ">shaper CPU per message", ">shaper CPU", ">shaper allocations per message", ">broker + sink CPU per message")
		for _, c := range s.CPU {
			p("| %s | %s | %.1f s | %d (%.0f/s) | %s |", thousands(c.Keys), thousands(c.LanesActive), c.Seconds, c.Delivered, c.Rate, c.cells("%.1f"))
		}
		p("")
		p("With 10 000 lanes a message cost %s the CPU it cost with one (goal: within 20%%).",
			mark(fmt.Sprintf("%.2f×", s.CPURatio), math.Abs(s.CPURatio-1) > 0.2))
		p("")
	}
	if b := s.Backlog; b != nil {
		p("### Memory with %s keys in a backlog of %s\n", thousands(b.Keys), thousands(b.Backlog))
		p("A `shaper run` child consumes a Kafka backlog (kfake, %d partitions) of %s messages whose header `%s` holds one of %s keys in turn, with `key: {from: \"header:%s\", max_keys: %d}`, `bucket: {capacity: %d, max_queue_time: 1m}`, `rate.limit` %v and `max_in_flight: 64`, for %.0f s from its first delivery or until every message is delivered. Past `max_keys` lanes, messages of a new key go to the \"\" lane and are counted (`shaper_key_overflow_total`). Lanes are the most `shaper_keys_active` its `/metrics` showed (sampled every 200 ms), heap the most `go_memstats_heap_inuse_bytes`, RSS its peak resident set (`VmHWM`).\n", kafkaPartitions, thousands(b.Backlog), laneHeader, thousands(b.Keys), laneHeader, b.MaxKeys, b.Capacity, b.Limit, b.RunSeconds)
		table(p, ">backlog", ">keys", ">max_keys", ">delivered", ">held (most)", ">lanes (most)", ">overflow counted", ">heap in use (max)", ">RSS (peak)")
		p("| %s | %s | %s | %s in %.1f s | %s | %s | %s | %.1f MiB | %.1f MiB |", thousands(b.Backlog), thousands(b.Keys), thousands(b.MaxKeys),
			thousands(int(b.Delivered)), b.Seconds, thousands(int(b.Held)), thousands(int(b.LanesActive)), thousands(int(b.Overflow)), b.HeapMiB, b.RSSMiB)
		p("")
		switch d := b.Deepest; {
		case d == nil:
		case d.Key == "":
			p("At the end the deepest lane was the \"\" lane, where the keys past `max_keys` go: it held %s messages, the oldest queued for %.1f s. It takes one turn per round like any key, however many keys share it.\n", thousands(d.Depth), d.OldestWait)
		default:
			p("At the end the deepest lane was %q, holding %s messages, the oldest queued for %.1f s.\n", d.Key, thousands(d.Depth), d.OldestWait)
		}
		if b.Held > 0 {
			p("The heap is mostly the messages held: %.1f KiB of heap in use per message held at the most.\n", b.HeapMiB*1024/b.Held)
		}
		p("**The bound**: with this config the daemon's RSS stays under **%.0f MiB** (the peak measured, plus a quarter, rounded up to 16 MiB).\n", b.BoundMiB)
	}
}

// twoKeysSummary is a run's first and last B, in a few words.
func twoKeysSummary(tk *LaneTwoKeys, run LaneTwoKeysRun) string {
	switch {
	case run.FirstB < 0:
		return fmt.Sprintf("no B delivered in %s s", secondsText(run.Seconds))
	case run.LastB < 0:
		return fmt.Sprintf("first B after %s s; %d of %d B in %s s", secondsText(run.FirstB), run.DeliveredB, tk.B, secondsText(run.Seconds))
	}
	return fmt.Sprintf("first B after %s s · all %d after %s s", secondsText(run.FirstB), tk.B, secondsText(run.LastB))
}

// secondsText writes s to the millisecond below 0.1, to the hundredth
// below 1 and to the tenth above: 0.012, 0.48, 1.3, 20.6.
func secondsText(s float64) string { return decimals(s, 1, 1, 3) }

// decimals writes v with digits decimals less one for each power of ten
// it reaches, within lo and hi.
func decimals(v float64, digits, lo, hi int) string {
	d := hi
	if v > 0 {
		d = min(max(digits-int(math.Floor(math.Log10(v))), lo), hi)
	}
	return strconv.FormatFloat(v, 'f', d, 64)
}

// markdown writes the two-keys subsection.
func (tk *LaneTwoKeys) markdown(p func(string, ...any)) {
	p("### Two keys, one flooding\n")
	p("![%s](lanes.svg)\n", tk.altText())
	p("A JetStream stream (embedded nats-server) holds %s messages with header `%s: A` (bodies `A-0`, `A-1`, ...) and then %d with `%s: B`. A `shaper run` child delivers them to an HTTP sink on 127.0.0.1 (which answers 200 and records each request's arrival and key) at `rate: {limit: %g, mode: leaky}` with `bucket: {capacity: %d, max_queue_time: 5m}`: once without `key:`, once with `key: {from: \"header:%s\"}` and `bucket.per_key_capacity: %d`, each on its own stream and durable, one after the other. A run lasts until %g s after the last B and, for the second, at least as long as the first did, at most %.0f s from its first delivery. Times are from the run's first delivery.\n", thousands(tk.A), merchantHeader, tk.B, merchantHeader, tk.Limit, tk.Capacity, merchantHeader, tk.PerKeyCapacity, twoKeysTail.Seconds(), tk.MaxSeconds)
	table(p, "run", ">first B after", ">A delivered before it", ">last B after", ">A delivered before it", ">delivered in the run")
	for _, r := range tk.Runs {
		first, last := "none", fmt.Sprintf("not all: %d of %d", r.DeliveredB, tk.B)
		if r.FirstB >= 0 {
			first = secondsText(r.FirstB) + " s"
		}
		if r.LastB >= 0 {
			last = secondsText(r.LastB) + " s"
		}
		p("| %s | %s | %s | %s | %s | %s A, %d B in %.1f s |", r.Label, first, thousands(r.ABeforeFirstB), last, thousands(r.ABeforeLastB),
			thousands(r.DeliveredA), r.DeliveredB, r.Seconds)
	}
	p("")
	if len(tk.Runs) == 2 && tk.Runs[0].LastB >= 0 && tk.Runs[1].LastB >= 0 {
		without, with := tk.Runs[0], tk.Runs[1]
		p("Without lanes the bucket is one queue in stream order: the first B waited %s s, behind the %s A before it in the stream, and the last %s s. With a lane per merchant the lanes take turns: the first B arrived after %s s, the last after %s s (%s A meanwhile), and A went on at the rest of the rate.\n", secondsText(without.FirstB), thousands(without.ABeforeFirstB), secondsText(without.LastB), secondsText(with.FirstB), secondsText(with.LastB), thousands(with.ABeforeLastB))
	}
}

// altText is the picture's alt text, from what was measured.
func (tk *LaneTwoKeys) altText() string {
	s := fmt.Sprintf("%s callbacks of merchant A and then %d of merchant B delivered at %g/s", thousands(tk.A), tk.B, tk.Limit)
	var parts []string
	for _, r := range tk.Runs {
		if r.LastB >= 0 {
			parts = append(parts, fmt.Sprintf("%s the last B arrives after %s s", r.Label, secondsText(r.LastB)))
		}
	}
	if len(parts) > 0 {
		s += ": " + strings.Join(parts, ", ")
	}
	return s
}

// perText writes a ratio to two decimals below 10, to one below 100,
// else whole, its digits grouped.
func perText(v float64) string {
	if v >= 100 {
		return thousands(int(math.Round(v)))
	}
	return decimals(v, 2, 0, 2)
}

// markdown writes the destinations section.
func (s *DestinationsSection) markdown(p func(string, ...any), r *Report) {
	p("## Per-message destinations (url_from)\n")
	p("`shaper run` children one after the other, each consuming its own Kafka backlog (kfake) whose header `%s` names in turn the hosts of its run, with `rate.limit` %g, `bucket: {capacity: %d, max_queue_time: 1m}` and `sink.http` `{max_in_flight: %d, max_in_flight_per_host: %d, timeout: 2s}`. Each host is an HTTP server in the harness on its own loopback address (127.0.1.1, 127.0.1.2, ...: Linux routes all of 127.0.0.0/8 to `lo`) that answers 200 at once and counts its requests, the connections it accepts (a wrapped `net.Listener`) and the most it holds open at once.\n", destinationsHeader, s.Limit, s.Capacity, s.MaxInFlight, s.MaxInFlightPerHost)
	if r, ok := find(s.Runs, destinationsMany); ok {
		p("- *%s*: `url_from: header:%s`, `key: {from: host}` (each host a lane), `allowed_hosts` listing the %s addresses and `allow_private: true` (they are loopback).", r.Label, destinationsHeader, thousands(r.Hosts))
	}
	if r, ok := find(s.Runs, destinationsOne); ok {
		p("- *%s*: the same, every message naming one host.", r.Label)
	}
	if r, ok := find(s.Runs, destinationsFixed); ok {
		p("- *%s*: a fixed `url:` to one host, no key: what a pipeline with one destination does.", r.Label)
	}
	p("")
	p("CPU, allocations and the harness's CPU (the broker and the servers) are measured as in *CPU per delivered message* above, over a window after two seconds of steady delivery. Connections are counted from the child's start to the window's end. The children run one after the other, so that each has the machine's cores to itself.")
	measuredBy(p, s.Common, r)
	p("")
	p("%s\n", loadLine(s.Load))
	table(p, "run", ">window", ">delivered", ">shaper CPU per message", ">shaper CPU", ">shaper allocations per message", ">broker + servers CPU per message")
	for _, r := range s.Runs {
		p("| %s | %.1f s | %s (%.0f/s) | %s |", r.Label, r.Seconds, thousands(int(r.Delivered)), r.Rate, r.cells("%.1f"))
	}
	p("")
	table(p, "run", ">requests", ">hosts reached", ">connections opened", ">of them in the window",
		fmt.Sprintf(">most opened to one host (goal ≤ %d)", s.MaxInFlightPerHost), ">most open at once on one host", ">requests per connection")
	for _, r := range s.Runs {
		p("| %s | %s | %s of %s | %s | %s | %s | %d | %s |", r.Label, thousands(int(r.Requests)), thousands(r.HostsReached), thousands(r.Hosts),
			thousands(int(r.Connections)), thousands(int(r.WindowConnections)),
			mark(strconv.FormatInt(r.MaxConnections, 10), r.MaxConnections > int64(s.MaxInFlightPerHost)), r.MaxOpen,
			perText(float64(r.Requests)/math.Max(float64(r.Connections), 1)))
	}
	p("")
	if s.CPURatio > 0 {
		line := fmt.Sprintf("With %s hosts a message cost %.2f× the CPU it cost with one fixed `url`", thousands(s.Hosts), s.CPURatio)
		if s.URLFromRatio > 0 {
			line += fmt.Sprintf(", %.2f× what it cost with `url_from` naming one host", s.URLFromRatio)
		}
		p("%s.", line)
	}
	if r, ok := find(s.Runs, destinationsMany); ok && r.HostsReached > 0 {
		if r.MaxConnections <= int64(s.MaxInFlightPerHost) {
			p("Each host's connections were kept and reused: at most %d opened to one host, %s requests per connection.",
				r.MaxConnections, perText(float64(r.Requests)/math.Max(float64(r.Connections), 1)))
		} else {
			p("**More connections were opened than the goal allows**: %s for %s requests (%s requests per connection; %s in the",
				thousands(int(r.Connections)), thousands(int(r.Requests)), perText(float64(r.Requests)/math.Max(float64(r.Connections), 1)), thousands(int(r.WindowConnections)))
			p("window, %.0f/s), up to %d to one host against a goal of %d. No host had more than %d open at once.",
				float64(r.WindowConnections)/math.Max(r.Seconds, 1e-9), r.MaxConnections, s.MaxInFlightPerHost, r.MaxOpen)
		}
	}
	p("")
}

// precision is the timing of r that the precision goal holds shaper to,
// and where it was taken: the wire times when the sink had them, which
// are when each request reached the sink's host; else the handler times,
// which add however late the system scheduled the sink's process.
func (r PeerRun) precision() (Timing, string) {
	if r.Wire != nil {
		return *r.Wire, "on the wire at the sink's host"
	}
	return r.Timing, "at the sink's handler"
}

// text writes t's rate error, most per 100 ms and jitter p99, as the
// goal and the table give them.
func (t Timing) text() string {
	return fmt.Sprintf("%s, %d, %s", signedPct(t.RateErrPct), t.Max100ms, micros(t.JitterP99))
}

// markdown writes the peers section.
func (s *PeersSection) markdown(p func(string, ...any), r *Report) {
	p("## Peers\n")
	p("What shaper costs beside what a user would run instead. For each source, the loop a user would write by hand (`bench/peers/loop`, one `-source` per broker), its variants, Benthos and a `shaper run` child deliver the same %d-byte bodies to the same HTTP sink at the same limit, %d requests in flight at most: one party at a time, every party of every case in turn, %d %s; the figures are the medians of a party's runs. Every party, the broker (`bench/peers/broker`: nats-server with JetStream, or kfake) and the sink", s.BodyBytes, peerWorkers, s.Runs, map[bool]string{true: "time", false: "times"}[s.Runs == 1])
	p("(`bench/peers/sink`, answering 200) are processes of their own. CPU is each process's CPU clock (clock_gettime of its CPUCLOCK, every thread, in ns) over a window of %.0f s that starts %.0f s after the sink's first request, per request the sink received in the window; rate, spacing and jitter are of the arrivals that the sink's process recorded in it, by two clocks. *On the wire* is the kernel's receive timestamp of each request's first bytes (SO_TIMESTAMPNS): when it reached the sink's host, as a packet capture would show it; the precision goals are held to it. *At the handler* is when the sink's handler ran: that adds however late the system scheduled the sink's process, which no party controls (– where the sink had no wire times).", s.WindowSeconds, s.WarmupSeconds)
	measuredBy(p, s.Common, r)
	p("")
	p("- *× loop*: the ratio to the hand-written loop of the same source, measured in the same run (the case's first row).")
	p("- *broker CPU per message*: the broker's CPU while the party ran, per request; – for Benthos, which reads no broker.")
	p("- *rate error*: (n−1)/(t_n−t_1) over the window's arrivals, against the limit.")
	p("- *most per 100 ms*: the most arrivals in any 100 ms of the window; the goal is limit/10 + 2, at a sink in another process.")
	p("- *jitter p99*: the p99 of |gap − 1/limit| between consecutive arrivals.\n")
	p("Each JetStream run reads the stream from its start with a durable consumer of its own (deleted after the run), each Kafka run with a group of its own. Core NATS keeps nothing: the harness publishes a live feed at %.1f× the limit, and what a party cannot hold is dropped, by shaper's source (bucket 1000) and by the loop's client (a channel of 1000) alike. Benthos core (%s) has no NATS or Kafka input (those are in Redpanda Connect), so its party generates its messages: it has no broker behind it, and its ratio is to a loop that has one. kfake is not Kafka: its CPU per message is kfake's own, and only its ratio between parties tells something.\n", peerFeedFactor, benthosVersion)
	p("%s\n", loadLine(s.Load))
	table(p, "case", "party", ">CPU per message (share of a core)", ">× loop", ">broker CPU per message", ">× loop", ">rate error", ">most per 100 ms (goal)", ">jitter p99 (goal ≤ 1 ms)", ">at the handler: rate error, most per 100 ms, jitter p99")
	sinkLow, sinkHigh := math.Inf(1), 0.0
	us := func(v float64) string { return fmt.Sprintf("%.0f µs", v) }
	for _, c := range s.Cases {
		for i, pt := range c.Parties {
			name := ""
			if i == 0 {
				name = fmt.Sprintf("%s → %s, %v/s", c.Source, c.scheme(), c.Limit)
			}
			m := pt.Median
			broker, brokerRatio := "–", "–"
			if pt.ReadsBroker {
				broker, brokerRatio = us(m.BrokerUs), ratioText(pt.BrokerRatio)
			}
			t, _ := m.precision()
			handler := "–"
			if m.Wire != nil {
				handler = m.Timing.text()
			}
			p("| %s | %s | %s (%.0f%%) | %s | %s | %s | %s | %s | %s | %s |", name, pt.Label, us(m.CPUUs), m.CPUPct, ratioText(pt.CPURatio),
				broker, brokerRatio, signedPct(t.RateErrPct),
				mark(fmt.Sprintf("%d (%d)", t.Max100ms, c.Allowed100ms), t.Max100ms > c.Allowed100ms),
				mark(micros(t.JitterP99), t.JitterP99 > 1000), handler)
			sinkLow, sinkHigh = math.Min(sinkLow, m.SinkUs), math.Max(sinkHigh, m.SinkUs)
		}
	}
	p("")
	if sinkHigh > 0 {
		p("The sink's own CPU per request ranged from %.0f to %.0f µs over the parties' medians (each party's is in benchmarks.json, beside every run's figures).\n", sinkLow, sinkHigh)
	}
	s.sideBySide(p)
}

// sideBySide writes, for each JetStream case with shaper run both ways,
// the CPU per message of the hand-written loop and of shaper with tuning
// on and off, HTTP and HTTPS, from the table above.
func (s *PeersSection) sideBySide(p func(string, ...any)) {
	var rows []string
	for _, c := range s.Cases {
		loop, ok1 := find(c.Parties, partyLoop)
		on, ok2 := find(c.Parties, partyShaper)
		off, ok3 := find(c.Parties, partyShaperOff)
		if !ok1 || !ok2 || !ok3 || peerSource(c.Name) != peerJetStream {
			continue
		}
		us := func(pt PeerParty) string {
			return fmt.Sprintf("%.0f µs (%s)", pt.Median.CPUUs, ratioText(pt.CPURatio))
		}
		rows = append(rows, fmt.Sprintf("| %s | %v/s | %.0f µs | %s | %s |", c.scheme(), c.Limit, loop.Median.CPUUs, us(on), us(off)))
	}
	if len(rows) == 0 {
		return
	}
	p("### Side by side: tuning on and off, HTTP and HTTPS\n")
	p("CPU per message of each party from the table above (JetStream → the sink, the same run), with its ratio to the hand-written loop: shaper as it runs by default (`tuning: on`), with `SHAPER_TUNING=off`, and the loop, over plain HTTP and over TLS ([tuning.md](tuning.md)).\n")
	table(p, "sink", ">limit", ">hand-written loop", ">shaper, tuning on (× loop)", ">shaper, tuning off (× loop)")
	for _, r := range rows {
		p("%s", r)
	}
	p("")
}

// signedPct writes a percentage to two decimals with its sign, and one
// that rounds to zero as 0.00%.
func signedPct(v float64) string {
	s := fmt.Sprintf("%+.2f%%", v)
	if s == "+0.00%" || s == "-0.00%" {
		return "0.00%"
	}
	return s
}

// wireText writes the figures of wire times for a progress line, or
// nothing when there are none.
func wireText(w *Timing) string {
	if w == nil {
		return ""
	}
	return fmt.Sprintf("; on the wire %+.2f%%, most %d, p99 %s", w.RateErrPct, w.Max100ms, micros(w.JitterP99))
}

// ratioText writes a ratio to two decimals, or – when it was not measured.
func ratioText(r float64) string {
	if r == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", r)
}

// thousands writes n with a thin space between groups of three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "\u2009" + s[i:]
	}
	return s
}
