package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// OverheadSection is what shaping costs: one limiter decision, the CPU per
// delivered message end to end, and an idle daemon.
type OverheadSection struct {
	Common
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

// CPUPerMessage is the CPU a shaper child used per delivered message.
type CPUPerMessage struct {
	Source string  `json:"source"`
	Limit  float64 `json:"limit"`
	Window
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

// IdleCPU is what an idle daemon uses: Pct is CPU time over wall time, in
// percent of one core.
type IdleCPU struct {
	Source  string  `json:"source"`
	Seconds float64 `json:"seconds"`
	CPUms   float64 `json:"cpu_ms"`
	Pct     float64 `json:"cpu_pct_of_core"`
}

// steadyRun starts a daemon on pipelines, waits until it has delivered
// warm messages (counted by count), and measures it over window; it
// returns the running daemon, which the caller ends.
func (b *bench) steadyRun(ctx context.Context, name, pipelines string, count func() int64, warm int64, window time.Duration) (*proc, Window, error) {
	p, err := b.startShaper(name, pipelines)
	if err != nil {
		return nil, Window{}, err
	}
	if !waitFor(ctx, time.Minute, func() bool { return count() >= warm }) {
		p.kill()
		return nil, Window{}, fmt.Errorf("no steady delivery within a minute; log:\n%s", p.tail())
	}
	return p, daemons{p}.measure([]func() int64{count}, window)[0], nil
}

func runOverhead(ctx context.Context, b *bench) (*OverheadSection, error) {
	sec := &OverheadSection{}
	count, benchtime, window, idle := "10", "300ms", 8*time.Second, 30*time.Second
	if b.o.quick {
		count, benchtime, window, idle = "3", "100ms", 3*time.Second, 5*time.Second
	}
	command, out, err := b.goBench(ctx, ".", "-benchmem", "-count", count, "-benchtime", benchtime, "./bench/limiters/")
	if err != nil {
		return nil, err
	}
	sec.LimiterCommand, sec.Limiter = command, limiterBenchmarks(parseBenchmarks(out))
	sec.Benchstat, sec.BenchstatError = b.benchstat(ctx, out)

	progress("overhead: CPU per message, Kafka → HTTP at 1000/s")
	if err := b.publishKafka(ctx, "steady", 20_000); err != nil {
		return nil, err
	}
	s, err := startSink(false)
	if err != nil {
		return nil, err
	}
	defer s.close()
	// A second of steady delivery after the group formed.
	p, w, err := b.steadyRun(ctx, "cpu-per-message", pipelineYAML("cpu", b.kafkaYAML("steady", "shaper-cpu", true),
		"bucket: {capacity: 1000, max_queue_time: 1m}", "rate: {limit: 1000}", fmt.Sprintf("sink: {http: {url: %q}}", s.URL)), s.count.Load, 1000, window)
	if err != nil {
		return nil, err
	}
	p.stop(10 * time.Second)
	c := CPUPerMessage{Source: "Kafka (kfake)", Limit: 1000, Window: w}
	progress("overhead: %.1f µs/msg in shaper (%.1f%% of a core, %.0f allocs/msg), %.1f µs/msg in broker + sink", c.ShaperUs, c.ShaperPct, c.Allocs, c.HarnessUs)
	sec.CPUPerMessage = []CPUPerMessage{c}

	// One child per source kind, each on an empty topic or stream, side by
	// side. Kafka uses the production default timings (heartbeat 3s,
	// max_wait 500ms, commit_interval 1s); JetStream's idle source asks
	// the server for a message once a second.
	drop, err := b.stream(ctx, "IDLE", 0)
	if err != nil {
		return nil, err
	}
	defer drop()
	kinds := []struct{ name, source string }{
		{"Kafka (kfake), default timings", b.kafkaYAML("idle", "shaper-idle", false)},
		{"NATS JetStream", b.natsYAML("IDLE", "")},
	}
	var configs []string
	for _, k := range kinds {
		configs = append(configs, pipelineYAML("idle", k.source, "bucket: {capacity: 1000, max_queue_time: 5s}", "rate: {limit: 100}", fmt.Sprintf("sink: {http: {url: %q}}", s.URL)))
	}
	ds, err := b.startDaemons(ctx, "idle", configs)
	if err != nil {
		return nil, err
	}
	defer ds.kill()
	time.Sleep(3 * time.Second) // past the start: connections made, group joined, first fetches parked
	progress("overhead: idle CPU of %d children over %v", len(ds), idle)
	t0, cpu0 := time.Now(), []time.Duration{ds[0].cpu(), ds[1].cpu()}
	time.Sleep(idle)
	secs := time.Since(t0).Seconds()
	for i, p := range ds {
		d := p.cpu() - cpu0[i]
		r := IdleCPU{Source: kinds[i].name, Seconds: secs, CPUms: float64(d.Milliseconds()), Pct: 100 * d.Seconds() / secs}
		progress("overhead: idle %s: %.0f ms CPU in %.0fs = %.3f%%", r.Source, r.CPUms, secs, r.Pct)
		sec.Idle = append(sec.Idle, r)
	}
	ds.stop()
	return sec, nil
}

// benchstat summarises the output of `go test -bench` with benchstat, or
// says why it could not.
func (b *bench) benchstat(ctx context.Context, out string) (summary, failure string) {
	path := filepath.Join(b.o.tmp, "limiters.bench")
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		return "", err.Error()
	}
	bctx, cancel := context.WithTimeout(ctx, 90*time.Second) // no proxy: give up, the table stands without it
	defer cancel()
	// Outside the module: benchstat is not one of its dependencies.
	res, err := b.goCmd(bctx, b.o.tmp, "run", "golang.org/x/perf/cmd/benchstat@latest", path)
	if err != nil {
		progress("overhead: %v", err)
		return "", strings.TrimSpace(err.Error())
	}
	return strings.ReplaceAll(res, path, "limiters.bench"), ""
}

// ThroughputSection is the ceiling with the limit out of the way: a very
// high limit, a `shaper run` child, a backlog in the broker and the sink
// on loopback, all on the same machine.
type ThroughputSection struct {
	Common
	Setup string           `json:"setup"`
	Cases []ThroughputCase `json:"cases"`
}

// ThroughputCase is one source at one max_in_flight. Exhausted is set when
// the backlog ran out inside the window: the rate is then a lower bound.
type ThroughputCase struct {
	Source      string `json:"source"`
	MaxInFlight int    `json:"max_in_flight"`
	Window
	Exhausted bool `json:"backlog_exhausted,omitempty"`
}

// throughputBacklog is how many messages each source holds for the
// throughput section; every case starts again from the beginning (a new
// group or durable).
const throughputBacklog = 200_000

func runThroughput(ctx context.Context, b *bench) (*ThroughputSection, error) {
	sec := &ThroughputSection{Setup: "limit 1000000/s (off), bucket capacity 1000, a `shaper run` child; the broker (kfake or embedded nats-server) and the HTTP sink run in the harness process on the same 2 cores"}
	window := 4 * time.Second
	if b.o.quick {
		window = 2 * time.Second
	}
	progress("throughput: publishing %d messages to Kafka and to JetStream", throughputBacklog)
	if err := b.publishKafka(ctx, "through", throughputBacklog); err != nil {
		return nil, err
	}
	drop, err := b.stream(ctx, "THROUGH", throughputBacklog)
	if err != nil {
		return nil, err
	}
	defer drop()
	for _, label := range []string{"Kafka (kfake)", "NATS JetStream"} {
		for _, inFlight := range []int{1, 8, 64} {
			name := fmt.Sprintf("through-%s-%d", strings.Fields(strings.ToLower(label))[0], inFlight)
			source := b.kafkaYAML("through", "shaper-"+name, true)
			if label == "NATS JetStream" {
				source = b.natsYAML("THROUGH", name)
			}
			c, err := b.throughputCase(ctx, name, source, inFlight, window)
			if err != nil {
				return nil, fmt.Errorf("%s max_in_flight %d: %w", label, inFlight, err)
			}
			c.Source = label
			progress("throughput %-14s max_in_flight %2d: %6.0f msg/s, shaper %.1f µs/msg (%.0f%% of a core), broker+sink %.1f µs/msg",
				label, inFlight, c.Rate, c.ShaperUs, c.ShaperPct, c.HarnessUs)
			sec.Cases = append(sec.Cases, c)
		}
	}
	return sec, nil
}

func (b *bench) throughputCase(ctx context.Context, name, source string, inFlight int, window time.Duration) (ThroughputCase, error) {
	s, err := startSink(false)
	if err != nil {
		return ThroughputCase{}, err
	}
	defer s.close()
	// Past the group join and the first fetches.
	p, w, err := b.steadyRun(ctx, name, pipelineYAML("through", source, "bucket: {capacity: 1000, max_queue_time: 1m}", "rate: {limit: 1000000}",
		fmt.Sprintf("sink: {http: {url: %q, max_in_flight: %d}}", s.URL, inFlight)), s.count.Load, 3000, window)
	if err != nil {
		return ThroughputCase{}, err
	}
	p.kill() // a drain would only add time; nothing here needs the commits
	return ThroughputCase{MaxInFlight: inFlight, Window: w, Exhausted: s.count.Load() >= throughputBacklog}, nil
}

// ScaleSection is memory under a large backlog.
type ScaleSection struct {
	Common
	Backlog []BacklogRun `json:"backlog"`
}

// BacklogRun is a `shaper run` child working through a Kafka backlog with
// bucket capacity 1000 and no effective limit.
type BacklogRun struct {
	Backlog   int     `json:"backlog"`
	Delivered int64   `json:"delivered"`
	Seconds   float64 `json:"seconds"`
	Rate      float64 `json:"msgs_per_sec"`
	// HeapMiB is the most go_memstats_heap_inuse_bytes the child's
	// /metrics showed (sampled every 200ms); RSSMiB its peak resident set
	// (VmHWM of /proc/<pid>/status).
	HeapMiB float64 `json:"heap_inuse_mib_max"`
	RSSMiB  float64 `json:"rss_mib_peak"`
	// Capped is set when the run stopped at the time cap before the
	// backlog was through.
	Capped bool `json:"capped,omitempty"`
}

func runScale(ctx context.Context, b *bench) (*ScaleSection, error) {
	sec := &ScaleSection{}
	sizes := []struct {
		topic string
		n     int
		cap   time.Duration
	}{{"backlog100k", 100_000, 2 * time.Minute}, {"backlog1m", 1_000_000, 75 * time.Second}}
	if b.o.quick {
		sizes[1].n, sizes[1].cap = 200_000, 10*time.Second
	}
	for _, s := range sizes {
		progress("scale: publishing a backlog of %d to Kafka", s.n)
		if err := b.publishKafka(ctx, s.topic, s.n); err != nil {
			return nil, err
		}
		r, err := b.backlogRun(ctx, s.topic, s.n, s.cap)
		if err != nil {
			return nil, fmt.Errorf("backlog %d: %w", s.n, err)
		}
		progress("scale: backlog %d: %d delivered in %.1fs (%.0f/s), heap ≤ %.1f MiB, peak RSS %.1f MiB",
			r.Backlog, r.Delivered, r.Seconds, r.Rate, r.HeapMiB, r.RSSMiB)
		sec.Backlog = append(sec.Backlog, r)
	}
	return sec, nil
}

// sampled runs sample every 200 ms while more holds, and once more after.
func sampled(ctx context.Context, more func() bool, sample func()) {
	for more() && ctx.Err() == nil {
		sample()
		time.Sleep(200 * time.Millisecond)
	}
	sample()
}

func (b *bench) backlogRun(ctx context.Context, topic string, n int, limit time.Duration) (BacklogRun, error) {
	r := BacklogRun{Backlog: n}
	s, err := startSink(false)
	if err != nil {
		return r, err
	}
	defer s.close()
	p, err := b.startShaper("backlog-"+topic, pipelineYAML("backlog", b.kafkaYAML(topic, "shaper-backlog", true),
		"bucket: {capacity: 1000, max_queue_time: 1m}", "rate: {limit: 1000000}", fmt.Sprintf("sink: {http: {url: %q, max_in_flight: 64}}", s.URL)))
	if err != nil {
		return r, err
	}
	defer p.kill()
	start := time.Now()
	sampled(ctx, func() bool { return s.count.Load() < int64(n) && time.Since(start) < limit }, func() {
		if m, err := p.scrape("go_memstats_heap_inuse_bytes"); err == nil {
			r.HeapMiB = max(r.HeapMiB, m["go_memstats_heap_inuse_bytes"]/(1<<20))
		}
	})
	r.Seconds = time.Since(start).Seconds()
	r.Delivered = s.count.Load()
	r.Capped = r.Delivered < int64(n)
	r.Rate = float64(r.Delivered) / r.Seconds
	if r.RSSMiB = peakRSS(p); r.Delivered == 0 {
		return r, fmt.Errorf("nothing delivered; log:\n%s", p.tail())
	}
	return r, nil
}
