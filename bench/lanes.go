package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/segmentio/kafka-go"

	"github.com/shaper-dev/shaper/shaper"
)

// LanesSection is what keys cost (key.from: a lane of the bucket per
// key): one scheduling decision with many lanes, the heap a lane
// takes, the CPU per delivered message with one key and with 10 000, and
// the resident set of a daemon with 100 000 keys in a backlog of 1 000 000.
type LanesSection struct {
	Common
	// DecisionCommand ran BenchmarkTakeWithActiveLanes; Decisions holds
	// each sub-benchmark's median over its runs.
	DecisionCommand string         `json:"decision_command"`
	Decisions       []LimiterBench `json:"decisions"`
	// MemoryCommand ran BenchmarkLaneMemory; Memory is each case's median.
	MemoryCommand string       `json:"memory_command"`
	Memory        []LaneMemory `json:"memory"`
	// CPU is two `shaper run` children side by side, one key and 10 000
	// keys, at the same rate over the same window; CPURatio is the second's
	// CPU per message over the first's.
	CPU      []LaneCPU `json:"cpu_per_message"`
	CPURatio float64   `json:"cpu_ratio"`
	// Backlog is a child working through many keys with max_keys below
	// their number.
	Backlog *LaneBacklog `json:"backlog,omitempty"`
	// TwoKeys is the run behind docs/lanes.svg: one key flooding and one
	// behind it, without lanes and with.
	TwoKeys *LaneTwoKeys `json:"two_keys,omitempty"`
}

// LaneMemory is the heap per lane of one kind of lane, the median over
// Runs runs.
type LaneMemory struct {
	Name         string  `json:"name"`
	Lanes        int     `json:"lanes"`
	BytesPerLane float64 `json:"bytes_per_lane"`
	Runs         int     `json:"runs"`
}

// LaneCPU is a `shaper run` child delivering a Kafka backlog whose messages
// are spread over Keys keys (header Key, key.from: header:Key) at Limit.
type LaneCPU struct {
	Keys  int     `json:"keys"`
	Limit float64 `json:"limit"`
	// LanesActive is the least shaper_keys_active seen at the window's
	// start and end.
	LanesActive int `json:"lanes_active"`
	Window
}

// LaneBacklog is a `shaper run` child working through a Kafka backlog of
// Backlog messages over Keys keys, with key.max_keys MaxKeys, for Seconds
// from its first delivery.
type LaneBacklog struct {
	Backlog  int     `json:"backlog"`
	Keys     int     `json:"keys"`
	MaxKeys  int     `json:"max_keys"`
	Capacity int     `json:"capacity"`
	Limit    float64 `json:"limit"`
	// RunSeconds is how long the run may last from the first delivery, and
	// Seconds how long it did (less when every message was delivered).
	RunSeconds float64 `json:"run_seconds"`
	Seconds    float64 `json:"seconds"`
	Delivered  int64   `json:"delivered"`
	// LanesActive is the most shaper_keys_active, and Overflow the
	// shaper_key_overflow_total at the end: messages put in the "" lane
	// because max_keys lanes existed.
	LanesActive float64 `json:"lanes_active_max"`
	Overflow    float64 `json:"key_overflow"`
	// Held is the most shaper_bucket_depth: messages held, in flight
	// included.
	Held float64 `json:"held_max"`
	// Deepest is the lane holding the most messages at the end (GET
	// /v1/pipelines/{name}/keys?top=1); the "" lane holds every key past
	// max_keys.
	Deepest *shaper.KeyStatus `json:"deepest,omitempty"`
	// HeapMiB is the most go_memstats_heap_inuse_bytes (sampled every
	// 200ms), RSSMiB the peak resident set (VmHWM), and BoundMiB the bound
	// stated for it: the peak plus a quarter, rounded up to 16 MiB.
	HeapMiB  float64 `json:"heap_inuse_mib_max"`
	RSSMiB   float64 `json:"rss_mib_peak"`
	BoundMiB float64 `json:"rss_bound_mib"`
}

// laneHeader is the message header that carries the key.
const laneHeader = "Key"

func runLanes(ctx context.Context, b *bench) (*LanesSection, error) {
	sec := &LanesSection{}
	count, benchtime, memCount := "6", "200ms", "3"
	if b.o.quick {
		count, benchtime, memCount = "2", "50ms", "1"
	}
	var out string
	var err error
	if sec.DecisionCommand, out, err = b.goBench(ctx, "TakeWithActiveLanes", "-benchmem", "-count", count, "-benchtime", benchtime, "./shaper/"); err != nil {
		return nil, err
	}
	sec.Decisions = limiterBenchmarks(parseBenchmarks(out))
	if sec.MemoryCommand, out, err = b.goBench(ctx, "LaneMemory", "-benchtime", "1x", "-count", memCount, "./shaper/"); err != nil {
		return nil, err
	}
	sec.Memory = laneMemory(parseBenchmarks(out))
	if len(sec.Decisions) == 0 || len(sec.Memory) == 0 {
		return nil, errors.New("the lane benchmarks reported nothing")
	}
	if sec.CPU, err = b.laneCPU(ctx); err != nil {
		return nil, fmt.Errorf("cpu per message: %w", err)
	}
	if sec.CPU[0].ShaperUs > 0 {
		sec.CPURatio = sec.CPU[1].ShaperUs / sec.CPU[0].ShaperUs
	}
	if sec.Backlog, err = b.laneBacklog(ctx); err != nil {
		return nil, fmt.Errorf("backlog: %w", err)
	}
	if sec.TwoKeys, err = b.laneTwoKeys(ctx); err != nil {
		return nil, fmt.Errorf("two keys: %w", err)
	}
	return sec, nil
}

// laneMemory is the median B/lane of BenchmarkLaneMemory's sub-benchmarks
// (named LaneMemory/kind/lanes=N).
func laneMemory(list []*benchRuns) []LaneMemory {
	var out []LaneMemory
	for _, r := range list {
		kind, lanes, ok := strings.Cut(strings.TrimPrefix(r.name, "LaneMemory/"), "/lanes=")
		if v := r.values["B/lane"]; ok && len(v) > 0 {
			n, _ := strconv.Atoi(lanes)
			out = append(out, LaneMemory{Name: kind, Lanes: n, BytesPerLane: median(v), Runs: len(v)})
		}
	}
	return out
}

// publishKeyed produces n records to topic, record i with the payload of
// message i and the key "key-" + i mod keys in header Key.
func (b *bench) publishKeyed(ctx context.Context, topic string, n, keys int) error {
	progress("lanes: publishing %d messages over %d keys to Kafka", n, keys)
	return b.kafka.PublishMessages(ctx, topic, n, func(i int) kafka.Message {
		return kafka.Message{Value: payload(i), Headers: []kafka.Header{{Key: laneHeader, Value: fmt.Appendf(nil, "key-%06d", i%keys)}}}
	})
}

// laneCPU runs two `shaper run` children side by side, each delivering a
// Kafka backlog at 1000/s, one with every message of one key and one with
// the messages spread over 10 000 keys, and measures their CPU over the same
// window: whatever else the machine does meanwhile weighs on both alike.
// The bucket (capacity 20 000) holds two messages of each of the 10 000
// keys, so that every key has a lane.
func (b *bench) laneCPU(ctx context.Context) ([]LaneCPU, error) {
	const limit, capacity = 1000.0, 20_000
	window := 10 * time.Second
	if b.o.quick {
		window = 3 * time.Second
	}
	// Enough for the bucket, the start and the window, with room to spare.
	n := capacity + int(limit*(window.Seconds()+15))
	cases := []struct {
		keys  int
		topic string
	}{{1, "lanes1"}, {10_000, "lanes10k"}}
	var configs []string
	var counts []func() int64
	for _, c := range cases {
		if err := b.publishKeyed(ctx, c.topic, n, c.keys); err != nil {
			return nil, err
		}
		s, err := startSink(false)
		if err != nil {
			return nil, err
		}
		defer s.close()
		counts = append(counts, s.count.Load)
		configs = append(configs, pipelineYAML("lanes", b.kafkaYAML(c.topic, fmt.Sprintf("shaper-lanes-%d", c.keys), true),
			fmt.Sprintf("key: {from: \"header:%s\"}", laneHeader), fmt.Sprintf("bucket: {capacity: %d, max_queue_time: 1m}", capacity),
			fmt.Sprintf("rate: {limit: %v}", limit), fmt.Sprintf("sink: {http: {url: %q}}", s.URL)))
	}
	ds, err := b.startDaemons(ctx, "lanes-cpu", configs)
	if err != nil {
		return nil, err
	}
	defer ds.kill()
	// Two seconds of steady delivery in both, after the buckets filled.
	for i, count := range counts {
		if !waitFor(ctx, time.Minute, func() bool { return count() >= 2*limit }) {
			return nil, fmt.Errorf("%d keys: no steady delivery within a minute; log:\n%s", cases[i].keys, ds[i].tail())
		}
	}
	progress("lanes: CPU per message at %v/s, %d and %d keys side by side, over %v", limit, cases[0].keys, cases[1].keys, window)
	var out []LaneCPU
	for i, w := range ds.measure(counts, window, "shaper_keys_active") {
		c := LaneCPU{Keys: cases[i].keys, Limit: limit, Window: w}
		if w.m0 != nil && w.m1 != nil {
			c.LanesActive = int(min(w.m0["shaper_keys_active"], w.m1["shaper_keys_active"]))
		}
		progress("lanes: %5d keys (%d lanes active): %.1f µs/msg in shaper (%.1f%% of a core, %.0f allocs/msg), %d delivered",
			c.Keys, c.LanesActive, c.ShaperUs, c.ShaperPct, c.Allocs, c.Delivered)
		out = append(out, c)
	}
	ds.stop()
	return out, nil
}

// laneBacklog runs a `shaper run` child through a Kafka backlog of many
// keys at a high rate, with max_keys below the number of keys and a
// bucket large enough to hold a message of every lane max_keys allows, and
// measures its resident set while lanes are active.
func (b *bench) laneBacklog(ctx context.Context) (*LaneBacklog, error) {
	r := &LaneBacklog{Backlog: 1_000_000, Keys: 100_000, MaxKeys: 50_000, Capacity: 100_000, Limit: 50_000}
	run := 20 * time.Second
	if b.o.quick {
		r.Backlog, r.Keys, r.MaxKeys, r.Capacity, run = 100_000, 10_000, 5_000, 10_000, 8*time.Second
	}
	if err := b.publishKeyed(ctx, "lanesbacklog", r.Backlog, r.Keys); err != nil {
		return nil, err
	}
	s, err := startSink(false)
	if err != nil {
		return nil, err
	}
	defer s.close()
	p, err := b.startShaper("lanes-backlog", pipelineYAML("lanes", b.kafkaYAML("lanesbacklog", "shaper-lanes-backlog", true),
		fmt.Sprintf("key: {from: \"header:%s\", max_keys: %d}", laneHeader, r.MaxKeys), fmt.Sprintf("bucket: {capacity: %d, max_queue_time: 1m}", r.Capacity),
		fmt.Sprintf("rate: {limit: %v}", r.Limit), fmt.Sprintf("sink: {http: {url: %q, max_in_flight: 64}}", s.URL)))
	if err != nil {
		return nil, err
	}
	defer p.kill()
	if !waitFor(ctx, time.Minute, s.reached(1)) {
		return nil, fmt.Errorf("nothing delivered within a minute; log:\n%s", p.tail())
	}
	r.RunSeconds = run.Seconds()
	progress("lanes: %d messages over %d keys, max_keys %d: %v from the first delivery", r.Backlog, r.Keys, r.MaxKeys, run)
	const active, overflow, depth, heap = "shaper_keys_active", "shaper_key_overflow_total", "shaper_bucket_depth", "go_memstats_heap_inuse_bytes"
	start := time.Now()
	sampled(ctx, func() bool { return time.Since(start) < run && s.count.Load() < int64(r.Backlog) }, func() {
		if m, err := p.scrape(active, overflow, depth, heap); err == nil {
			r.LanesActive, r.Overflow = max(r.LanesActive, m[active]), max(r.Overflow, m[overflow])
			r.Held, r.HeapMiB = max(r.Held, m[depth]), max(r.HeapMiB, m[heap]/(1<<20))
		}
	})
	r.Seconds = time.Since(start).Seconds()
	r.Delivered = s.count.Load()
	if top, err := p.keys("lanes", 1); err == nil && len(top) > 0 {
		r.Deepest = &top[0]
	} else if err != nil {
		progress("lanes: GET keys: %v", err) // the table goes without it
	}
	r.RSSMiB = peakRSS(p)
	r.BoundMiB = math.Ceil(r.RSSMiB*1.25/16) * 16
	progress("lanes: %d delivered in %.1fs, at most %.0f lanes, %.0f messages over max_keys, heap ≤ %.1f MiB, peak RSS %.1f MiB (bound %.0f MiB)",
		r.Delivered, r.Seconds, r.LanesActive, r.Overflow, r.HeapMiB, r.RSSMiB, r.BoundMiB)
	p.stop(10 * time.Second)
	return r, nil
}

// LaneTwoKeys is the run behind docs/lanes.svg: a stream holds
// A callbacks of merchant A and then B of merchant B (header
// Merchant-Id), and a `shaper run` child delivers them at Limit, once
// with one lane and once with a lane per merchant, each on its own
// stream and durable, one after the other.
type LaneTwoKeys struct {
	Limit          float64 `json:"limit"`
	Capacity       int     `json:"capacity"`
	PerKeyCapacity int     `json:"per_key_capacity"`
	A              int     `json:"a"`
	B              int     `json:"b"`
	// MaxSeconds bounds each run from its first delivery; BinMs is the
	// bin of the runs' ACumulative.
	MaxSeconds float64          `json:"max_seconds"`
	BinMs      int              `json:"bin_ms"`
	Runs       []LaneTwoKeysRun `json:"runs"`
}

// LaneTwoKeysRun is one pipeline's run over the two merchants' backlog.
// Times are seconds from the run's first delivery.
type LaneTwoKeysRun struct {
	Name  string `json:"name"`
	Label string `json:"label"`
	// Seconds is how long the run lasted: until twoKeysTail after every B
	// was delivered, and at least as long as the run before it (so that
	// both panels span the same time); at most MaxSeconds.
	Seconds    float64 `json:"seconds"`
	DeliveredA int     `json:"delivered_a"`
	DeliveredB int     `json:"delivered_b"`
	// FirstB is when the first B arrived and LastB when the last of them
	// did (-1: no B, or not every B, arrived in the run); ABeforeFirstB
	// and ABeforeLastB count the A delivered before each.
	FirstB        float64 `json:"first_b_seconds"`
	LastB         float64 `json:"last_b_seconds"`
	ABeforeFirstB int     `json:"a_before_first_b"`
	ABeforeLastB  int     `json:"a_before_last_b"`
	// ACumulative is the A delivered by the end of each bin; BSeconds is
	// when each B arrived.
	ACumulative []int     `json:"a_cumulative"`
	BSeconds    []float64 `json:"b_seconds"`
}

// merchantHeader carries the key of the two-keys run.
const merchantHeader = "Merchant-Id"

// twoKeysTail is how long a two-keys run goes on after its last B, so
// that the picture shows the end.
const twoKeysTail = 500 * time.Millisecond

// laneTwoKeys runs the two-keys case without lanes and then with them:
// each run publishes the backlog to a new stream, runs a child on it until
// twoKeysTail after every B was delivered and at least as long as the run
// before it, or MaxSeconds from its first delivery, and measures what the
// sink received.
func (b *bench) laneTwoKeys(ctx context.Context) (*LaneTwoKeys, error) {
	r := &LaneTwoKeys{Limit: 100, Capacity: 1000, PerKeyCapacity: 100, A: 2000, B: 50, MaxSeconds: 30, BinMs: 100}
	if b.o.quick {
		r.A = 500
	}
	runs := []struct{ name, label, key, perKey string }{
		{"without", "without lanes", "", ""},
		{"with", "with lanes (key.from: header:" + merchantHeader + ")", fmt.Sprintf("key: {from: \"header:%s\"}", merchantHeader), fmt.Sprintf(", per_key_capacity: %d", r.PerKeyCapacity)},
	}
	span := 0.0
	for i, c := range runs {
		progress("lanes: %d of A then %d of B at %v/s, %s", r.A, r.B, r.Limit, c.label)
		lines := []string{fmt.Sprintf("bucket: {capacity: %d, max_queue_time: 5m%s}", r.Capacity, c.perKey), fmt.Sprintf("rate: {limit: %v, mode: leaky}", r.Limit)}
		if c.key != "" {
			lines = append([]string{c.key}, lines...)
		}
		run, err := b.twoKeysRun(ctx, r, fmt.Sprintf("KEYS%d", i), span, lines)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.label, err)
		}
		run.Name, run.Label = c.name, c.label
		span = max(span, run.Seconds)
		progress("lanes: %s: first B after %.2fs (%d A before it), last B after %.2fs (%d A before it); %d A and %d B delivered in %.1fs",
			c.label, run.FirstB, run.ABeforeFirstB, run.LastB, run.ABeforeLastB, run.DeliveredA, run.DeliveredB, run.Seconds)
		r.Runs = append(r.Runs, run)
	}
	return r, nil
}

func (b *bench) twoKeysRun(ctx context.Context, r *LaneTwoKeys, name string, minSeconds float64, lines []string) (LaneTwoKeysRun, error) {
	drop, err := b.stream(ctx, name, 0)
	if err != nil {
		return LaneTwoKeysRun{}, err
	}
	defer drop()
	if err := b.js.PublishMsgs(ctx, name+".in", r.A+r.B, merchantMsg(name+".in", r.A)); err != nil {
		return LaneTwoKeysRun{}, err
	}
	s, err := serveSink(&sink{record: true, keyed: true}, "127.0.0.1")
	if err != nil {
		return LaneTwoKeysRun{}, err
	}
	defer s.close()
	lines = append(lines, fmt.Sprintf("sink: {http: {url: %q}}", s.URL))
	p, err := b.startShaper("lanes-"+strings.ToLower(name), pipelineYAML("keys", b.natsYAML(name, "shaper-keys"), lines...))
	if err != nil {
		return LaneTwoKeysRun{}, err
	}
	defer p.kill()
	if !waitFor(ctx, time.Minute, s.reached(1)) {
		return LaneTwoKeysRun{}, fmt.Errorf("nothing delivered within a minute; log:\n%s", p.tail())
	}
	first := s.received()[0].at
	var allB time.Time // when every B had arrived
	waitFor(ctx, time.Duration(r.MaxSeconds*float64(time.Second)), func() bool {
		now := time.Now()
		if allB.IsZero() && s.keyCount("B") >= r.B {
			allB = now
		}
		return !allB.IsZero() && now.Sub(allB) >= twoKeysTail && now.Sub(first).Seconds() >= minSeconds
	})
	if err := ctx.Err(); err != nil {
		return LaneTwoKeysRun{}, err
	}
	end := time.Now()
	p.stop(10 * time.Second)
	return measureTwoKeys(s.received(), first, end, r.B, time.Duration(r.BinMs)*time.Millisecond), nil
}

// measureTwoKeys turns the deliveries of one run, from first (the first
// delivery) to end, into its figures; want is how many B were published.
func measureTwoKeys(got []arrival, first, end time.Time, want int, bin time.Duration) LaneTwoKeysRun {
	run := LaneTwoKeysRun{Seconds: round2(end.Sub(first).Seconds()), FirstB: -1, LastB: -1}
	nbins := int(math.Ceil(float64(end.Sub(first)) / float64(bin)))
	run.ACumulative = make([]int, nbins)
	for _, a := range got {
		if a.at.After(end) {
			break
		}
		at := a.at.Sub(first).Seconds()
		switch a.key {
		case "A":
			run.DeliveredA++
			if i := int(a.at.Sub(first) / bin); i < nbins {
				run.ACumulative[i]++
			}
		case "B":
			run.DeliveredB++
			run.BSeconds = append(run.BSeconds, round3(at))
			if run.DeliveredB == 1 {
				run.FirstB, run.ABeforeFirstB = round3(at), run.DeliveredA
			}
			if run.DeliveredB == want {
				run.LastB, run.ABeforeLastB = round3(at), run.DeliveredA
			}
		}
	}
	for i := 1; i < nbins; i++ {
		run.ACumulative[i] += run.ACumulative[i-1]
	}
	return run
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// merchantMsg is message i of the two-keys backlog on subject: the first
// a with header Merchant-Id: A and bodies, ..., then those with
// Merchant-Id: B and bodies B-0, ...
func merchantMsg(subject string, a int) func(i int) *nats.Msg {
	return func(i int) *nats.Msg {
		m := nats.NewMsg(subject)
		key, k := "A", i
		if i >= a {
			key, k = "B", i-a
		}
		m.Header.Set(merchantHeader, key)
		m.Data = fmt.Appendf(nil, "%s-%d", key, k)
		return m
	}
}
