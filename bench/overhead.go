package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// OverheadSection is what shaping costs: one limiter decision, the CPU per
// delivered message end to end, and an idle daemon.
type OverheadSection struct {
	Load Load `json:"load"`
	// LimiterCommand ran the limiter benchmarks; Limiter holds the median
	// of each over its runs, and Benchstat the benchstat summary (empty
	// when benchstat could not be run, with the reason in BenchstatError).
	LimiterCommand string         `json:"limiter_command"`
	Limiter        []LimiterBench `json:"limiter"`
	Benchstat      string         `json:"benchstat,omitempty"`
	BenchstatError string         `json:"benchstat_error,omitempty"`
	// CPUPerMessage is a `shaper run` child delivering Kafka → HTTP at a
	// fixed rate.
	CPUPerMessage []CPUPerMessage `json:"cpu_per_message"`
	// Idle is a `shaper run` child with an empty bucket.
	Idle []IdleCPU `json:"idle"`
}

// LimiterBench is one sub-benchmark's median over -count runs.
type LimiterBench struct {
	Name        string  `json:"name"`
	NsPerOp     float64 `json:"ns_per_op"`
	NsMin       float64 `json:"ns_per_op_min"`
	NsMax       float64 `json:"ns_per_op_max"`
	AllocsPerOp float64 `json:"allocs_per_op"`
	BytesPerOp  float64 `json:"bytes_per_op"`
	Runs        int     `json:"runs"`
}

// CPUPerMessage is the CPU a shaper child used per delivered message.
type CPUPerMessage struct {
	Source    string  `json:"source"`
	Limit     float64 `json:"limit"`
	Seconds   float64 `json:"seconds"`
	Delivered int64   `json:"delivered"`
	Rate      float64 `json:"rate"`
	ChildCost
}

// ChildCost is what a `shaper run` child cost per delivered message over a
// window of steady delivery, beside what the harness cost.
type ChildCost struct {
	// ShaperUs is the child's CPU (utime + stime from /proc/<pid>/stat)
	// per delivered message, in microseconds; ShaperPct the child's CPU as
	// a share of one core, in percent.
	ShaperUs  float64 `json:"shaper_cpu_us_per_msg"`
	ShaperPct float64 `json:"shaper_cpu_pct_of_core"`
	// HarnessUs is the harness process's CPU (getrusage) per message over
	// the same window: the in-process broker, the sink and the harness
	// itself.
	HarnessUs float64 `json:"broker_and_sink_cpu_us_per_msg"`
	// Allocs and AllocBytes are the child's heap allocations per message
	// (go_memstats_mallocs_total and _alloc_bytes_total of its /metrics).
	Allocs     float64 `json:"shaper_allocs_per_msg"`
	AllocBytes float64 `json:"shaper_alloc_bytes_per_msg"`
}

// IdleCPU is what an idle daemon uses.
type IdleCPU struct {
	Source  string  `json:"source"`
	Seconds float64 `json:"seconds"`
	CPUms   float64 `json:"cpu_ms"`
	// Pct is CPU time over wall time, in percent of one core.
	Pct float64 `json:"cpu_pct_of_core"`
}

func runOverhead(ctx context.Context, o *options, env *environment) (*OverheadSection, error) {
	probe := startLoadProbe()
	sec := &OverheadSection{}
	if err := limiterBenchmarks(ctx, o, sec); err != nil {
		return nil, err
	}
	progress("overhead: CPU per message, Kafka → HTTP at 1000/s")
	c, err := cpuPerMessage(ctx, o, env, 1000)
	if err != nil {
		return nil, err
	}
	sec.CPUPerMessage = append(sec.CPUPerMessage, c)
	progress("overhead: %.1f µs/msg in shaper (%.1f%% of a core, %.0f allocs/msg), %.1f µs/msg in broker + sink", c.ShaperUs, c.ShaperPct, c.Allocs, c.HarnessUs)

	idle, err := idleCPU(ctx, o, env)
	if err != nil {
		return nil, err
	}
	sec.Idle = idle
	sec.Load = probe.stop()
	return sec, nil
}

// limiterBenchmarks runs the limiter sub-benchmarks of bench/limiters in
// one `go test` and summarises them, with benchstat when it can be run.
func limiterBenchmarks(ctx context.Context, o *options, sec *OverheadSection) error {
	count, benchtime := "10", "300ms"
	if o.quick {
		count, benchtime = "3", "100ms"
	}
	args := []string{"test", "-run", "^$", "-bench", ".", "-benchmem", "-count", count, "-benchtime", benchtime, "./bench/limiters/"}
	sec.LimiterCommand = "go " + strings.Join(args, " ")
	progress("overhead: %s", sec.LimiterCommand)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = o.root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w\n%s", sec.LimiterCommand, err, out.String())
	}
	sec.Limiter = parseBenchmarks(out.String())
	for _, b := range sec.Limiter {
		progress("overhead: %-36s %6.1f ns/op (%.1f–%.1f) %g allocs/op", b.Name, b.NsPerOp, b.NsMin, b.NsMax, b.AllocsPerOp)
	}

	path := filepath.Join(o.tmp, "limiters.bench")
	if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
		return err
	}
	bctx, cancel := context.WithTimeout(ctx, 90*time.Second) // no proxy: give up, the table stands without it
	defer cancel()
	bs := exec.CommandContext(bctx, "go", "run", "golang.org/x/perf/cmd/benchstat@latest", path)
	bs.Dir = o.tmp // outside the module: benchstat is not one of its dependencies
	var bsOut, bsErr bytes.Buffer
	bs.Stdout, bs.Stderr = &bsOut, &bsErr
	if err := bs.Run(); err != nil {
		sec.BenchstatError = fmt.Sprintf("go run golang.org/x/perf/cmd/benchstat@latest: %v: %s", err, strings.TrimSpace(bsErr.String()))
		progress("overhead: %s", sec.BenchstatError)
		return nil
	}
	sec.Benchstat = strings.ReplaceAll(bsOut.String(), path, "limiters.bench")
	return nil
}

// parseBenchmarks reads `go test -bench` output and returns, per
// benchmark in order of first appearance, the median and range of ns/op
// and the median allocs and bytes.
func parseBenchmarks(out string) []LimiterBench {
	type runs struct{ ns, allocs, bytes []float64 }
	var order []string
	byName := map[string]*runs{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i] // the -GOMAXPROCS suffix
			}
		}
		r := byName[name]
		if r == nil {
			r = &runs{}
			byName[name] = r
			order = append(order, name)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				r.ns = append(r.ns, v)
			case "allocs/op":
				r.allocs = append(r.allocs, v)
			case "B/op":
				r.bytes = append(r.bytes, v)
			}
		}
	}
	var list []LimiterBench
	for _, name := range order {
		r := byName[name]
		if len(r.ns) == 0 {
			continue
		}
		list = append(list, LimiterBench{
			Name: name, NsPerOp: median(r.ns), NsMin: slices.Min(r.ns), NsMax: slices.Max(r.ns),
			AllocsPerOp: median(r.allocs), BytesPerOp: median(r.bytes), Runs: len(r.ns),
		})
	}
	return list
}

// cpuPerMessage runs a `shaper run` child from a Kafka backlog to the sink
// at limit, and measures its CPU (from /proc/<pid>/stat) over a window of
// steady delivery.
func cpuPerMessage(ctx context.Context, o *options, env *environment, limit float64) (CPUPerMessage, error) {
	window := 8 * time.Second
	if o.quick {
		window = 3 * time.Second
	}
	c := CPUPerMessage{Source: "Kafka (kfake)", Limit: limit}
	sink, err := startSink(false)
	if err != nil {
		return c, err
	}
	defer sink.close()
	ch, err := startChild(env.bin, o.tmp, "cpu-per-message", fmt.Sprintf(`
  - name: cpu
    source:%s
    bucket: {capacity: 1000, max_queue_time: 1m}
    rate: {limit: %v}
    sink:
      http: {url: %q}
`, env.kafka.sourceYAML(topicSteady, "shaper-cpu", true), limit, sink.URL))
	if err != nil {
		return c, err
	}
	defer ch.kill()
	if !sink.waitCount(ctx, int64(limit), time.Minute) { // a second of steady delivery after the group formed
		return c, fmt.Errorf("no steady delivery within a minute; log:\n%s", ch.tail())
	}
	m := measureChild(ch, sink, window)
	c.Seconds, c.Delivered, c.Rate, c.ChildCost = m.seconds, m.delivered, m.rate, m.cost
	ch.stop(10 * time.Second)
	return c, nil
}

// childWindow is what a child and this process used over a window.
type childWindow struct {
	seconds              float64
	delivered            int64
	rate                 float64
	cost                 ChildCost
	childCPU, harnessCPU time.Duration
}

// measureCounted samples the child's CPU, this process's CPU and the
// deliveries count gives, waits window, and samples them again.
func measureCounted(ch *child, count func() int64, window time.Duration) childWindow {
	const mallocs, bytes = "go_memstats_mallocs_total", "go_memstats_alloc_bytes_total"
	m0, _ := ch.scrape(mallocs, bytes) // a failed scrape leaves the allocations at 0
	t0, cpu0, self0, n0 := time.Now(), ch.cpu(), selfCPU(), count()
	time.Sleep(window)
	t1, cpu1, self1, n1 := time.Now(), ch.cpu(), selfCPU(), count()
	m1, _ := ch.scrape(mallocs, bytes)
	w := childWindow{
		seconds: t1.Sub(t0).Seconds(), delivered: n1 - n0,
		childCPU: cpu1 - cpu0, harnessCPU: self1 - self0,
	}
	w.rate = float64(w.delivered) / w.seconds
	w.cost.ShaperPct = 100 * w.childCPU.Seconds() / w.seconds
	if w.delivered > 0 {
		w.cost.ShaperUs = float64(w.childCPU.Microseconds()) / float64(w.delivered)
		w.cost.HarnessUs = float64(w.harnessCPU.Microseconds()) / float64(w.delivered)
		if m0 != nil && m1 != nil {
			w.cost.Allocs = (m1[mallocs] - m0[mallocs]) / float64(w.delivered)
			w.cost.AllocBytes = (m1[bytes] - m0[bytes]) / float64(w.delivered)
		}
	}
	return w
}

// measureChild samples the child's CPU, this process's CPU and the sink's
// count, waits window, and samples them again.
func measureChild(ch *child, sink *sink, window time.Duration) childWindow {
	return measureCounted(ch, sink.count.Load, window)
}

// idleCPU runs one `shaper run` child per source kind, each on an empty
// topic or stream, side by side, and measures their CPU over 30s once they
// are ready. Kafka uses the production default timings (heartbeat 3s,
// max_wait 500ms, commit_interval 1s); JetStream's idle source asks the
// server for a message once a second.
func idleCPU(ctx context.Context, o *options, env *environment) ([]IdleCPU, error) {
	window := 30 * time.Second
	if o.quick {
		window = 5 * time.Second
	}
	sink, err := startSink(false)
	if err != nil {
		return nil, err
	}
	defer sink.close()
	if err := env.js.stream(ctx, "IDLE"); err != nil {
		return nil, err
	}
	kinds := []struct{ name, source string }{
		{"Kafka (kfake), default timings", env.kafka.sourceYAML(topicIdle, "shaper-idle", false)},
		{"NATS JetStream", fmt.Sprintf(`
      nats: {url: %q, subject: IDLE.in, stream: IDLE}`, env.js.URL())},
	}
	var configs []string
	for _, k := range kinds {
		configs = append(configs, fmt.Sprintf(`
  - name: idle
    source:%s
    bucket: {capacity: 1000, max_queue_time: 5s}
    rate: {limit: 100}
    sink:
      http: {url: %q}
`, k.source, sink.URL))
	}
	children, err := startChildren(ctx, env.bin, o.tmp, "idle", configs, 2*time.Minute)
	if err != nil {
		return nil, err
	}
	defer killAll(children)
	time.Sleep(3 * time.Second) // past the start: connections made, group joined, first fetches parked
	progress("overhead: idle CPU of %d children over %v", len(children), window)
	t0 := time.Now()
	cpu0 := make([]time.Duration, len(children))
	for i, ch := range children {
		cpu0[i] = ch.cpu()
	}
	time.Sleep(window)
	secs := time.Since(t0).Seconds()
	var out []IdleCPU
	for i, ch := range children {
		d := ch.cpu() - cpu0[i]
		r := IdleCPU{Source: kinds[i].name, Seconds: secs, CPUms: float64(d.Milliseconds()), Pct: 100 * d.Seconds() / secs}
		progress("overhead: idle %s: %.0f ms CPU in %.0fs = %.3f%%", r.Source, r.CPUms, secs, r.Pct)
		out = append(out, r)
	}
	for _, ch := range children {
		ch.stop(10 * time.Second)
	}
	return out, nil
}
