package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/kafka-go"

	"github.com/shaper-dev/shaper/shaper"
)

// LanesSection is what keys cost (key.from: a lane of the bucket per key,
// issue 13): one scheduling decision with many lanes, the heap a lane
// takes, the CPU per delivered message with one key and with 10 000, and
// the resident set of a daemon with 100 000 keys in a backlog of 1 000 000.
type LanesSection struct {
	Load Load `json:"load"`
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
	// MeasuredBy is the run that measured the section, which stays with it
	// when it is merged into the report of another run.
	MeasuredBy Provenance `json:"measured_by"`
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
	LanesActive int     `json:"lanes_active"`
	Seconds     float64 `json:"seconds"`
	Delivered   int64   `json:"delivered"`
	Rate        float64 `json:"rate"`
	ChildCost
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

// Kafka topics of the lanes section, created with the cluster.
const (
	topicLanesOne     = "lanes1"
	topicLanesMany    = "lanes10k"
	topicLanesBacklog = "lanesbacklog"
)

// laneHeader is the message header that carries the key.
const laneHeader = "Key"

func runLanes(ctx context.Context, o *options, env *environment) (*LanesSection, error) {
	probe := startLoadProbe()
	sec := &LanesSection{}
	if err := laneBenchmarks(ctx, o, sec); err != nil {
		return nil, err
	}
	cpu, err := laneCPU(ctx, o, env)
	if err != nil {
		return nil, fmt.Errorf("cpu per message: %w", err)
	}
	sec.CPU = cpu
	if cpu[0].ShaperUs > 0 {
		sec.CPURatio = cpu[1].ShaperUs / cpu[0].ShaperUs
	}
	bl, err := laneBacklog(ctx, o, env)
	if err != nil {
		return nil, fmt.Errorf("backlog: %w", err)
	}
	sec.Backlog = bl
	tk, err := laneTwoKeys(ctx, o, env)
	if err != nil {
		return nil, fmt.Errorf("two keys: %w", err)
	}
	sec.TwoKeys = tk
	sec.Load = probe.stop()
	return sec, nil
}

// laneBenchmarks runs BenchmarkTakeWithActiveLanes and BenchmarkLaneMemory
// of package shaper, each in one `go test`.
func laneBenchmarks(ctx context.Context, o *options, sec *LanesSection) error {
	count, benchtime, memCount := "6", "200ms", "3"
	if o.quick {
		count, benchtime, memCount = "2", "50ms", "1"
	}
	args := []string{"test", "-run", "^$", "-bench", "TakeWithActiveLanes", "-benchmem", "-count", count, "-benchtime", benchtime, "./shaper/"}
	sec.DecisionCommand = "go " + strings.Join(args, " ")
	out, err := goTest(ctx, o, args)
	if err != nil {
		return err
	}
	sec.Decisions = parseBenchmarks(out)
	for _, b := range sec.Decisions {
		progress("lanes: %-40s %6.1f ns/op (%.1f–%.1f) %g allocs/op", b.Name, b.NsPerOp, b.NsMin, b.NsMax, b.AllocsPerOp)
	}

	args = []string{"test", "-run", "^$", "-bench", "LaneMemory", "-benchtime", "1x", "-count", memCount, "./shaper/"}
	sec.MemoryCommand = "go " + strings.Join(args, " ")
	if out, err = goTest(ctx, o, args); err != nil {
		return err
	}
	sec.Memory = parseLaneMemory(out)
	for _, m := range sec.Memory {
		progress("lanes: %-28s %6.0f B/lane with %d lanes", m.Name, m.BytesPerLane, m.Lanes)
	}
	if len(sec.Decisions) == 0 || len(sec.Memory) == 0 {
		return errors.New("the lane benchmarks reported nothing")
	}
	return nil
}

// goTest runs `go args...` in the module root and returns its output.
func goTest(ctx context.Context, o *options, args []string) (string, error) {
	progress("lanes: go %s", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = o.root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// parseLaneMemory reads the B/lane of BenchmarkLaneMemory's sub-benchmarks
// (named kind/lanes=N) and returns each one's median, in order of first
// appearance.
func parseLaneMemory(out string) []LaneMemory {
	var order []string
	runs := map[string][]float64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "BenchmarkLaneMemory/") {
			continue
		}
		name := strings.TrimPrefix(f[0], "BenchmarkLaneMemory/")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i] // the -GOMAXPROCS suffix
			}
		}
		for i := 2; i+1 < len(f); i += 2 {
			if f[i+1] != "B/lane" {
				continue
			}
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				if _, seen := runs[name]; !seen {
					order = append(order, name)
				}
				runs[name] = append(runs[name], v)
			}
		}
	}
	var list []LaneMemory
	for _, name := range order {
		kind, lanes, _ := strings.Cut(name, "/lanes=")
		n, _ := strconv.Atoi(lanes)
		list = append(list, LaneMemory{Name: kind, Lanes: n, BytesPerLane: median(runs[name]), Runs: len(runs[name])})
	}
	return list
}

// laneCPU runs two `shaper run` children side by side, each delivering a
// Kafka backlog at 1000/s, one with every message of one key and one with
// the messages spread over 10 000 keys, and measures their CPU over the same
// window: whatever else the machine does meanwhile weighs on both alike.
// The bucket (capacity 20 000) holds two messages of each of the 10 000
// keys, so that every key has a lane.
func laneCPU(ctx context.Context, o *options, env *environment) ([]LaneCPU, error) {
	const limit, capacity = 1000.0, 20_000
	window := 10 * time.Second
	if o.quick {
		window = 3 * time.Second
	}
	// Enough for the bucket, the start and the window, with room to spare.
	n := capacity + int(limit*(window.Seconds()+15))
	cases := []struct {
		keys  int
		topic string
	}{{1, topicLanesOne}, {10_000, topicLanesMany}}
	var (
		out      []LaneCPU
		sinks    []*sink
		children []*child
	)
	defer func() {
		killAll(children)
		for _, s := range sinks {
			s.close()
		}
	}()
	for _, c := range cases {
		progress("lanes: publishing %d messages over %d keys to Kafka", n, c.keys)
		if err := publishKeyed(ctx, env.kafka, c.topic, n, c.keys); err != nil {
			return nil, err
		}
		s, err := startSink(false)
		if err != nil {
			return nil, err
		}
		sinks = append(sinks, s)
		ch, err := startChild(env.bin, o.tmp, fmt.Sprintf("lanes-cpu-%d", c.keys), fmt.Sprintf(`
  - name: lanes
    source:%s
    key: {from: "header:%s"}
    bucket: {capacity: %d, max_queue_time: 1m}
    rate: {limit: %v}
    sink:
      http: {url: %q}
`, env.kafka.sourceYAML(c.topic, fmt.Sprintf("shaper-lanes-%d", c.keys), true), laneHeader, capacity, limit, s.URL))
		if err != nil {
			return nil, err
		}
		children = append(children, ch)
		out = append(out, LaneCPU{Keys: c.keys, Limit: limit})
	}
	// Two seconds of steady delivery in both, after the buckets filled.
	for i, s := range sinks {
		if !s.waitCount(ctx, int64(2*limit), time.Minute) {
			return nil, fmt.Errorf("%d keys: no steady delivery within a minute; log:\n%s", cases[i].keys, children[i].tail())
		}
	}
	progress("lanes: CPU per message at %v/s, %d and %d keys side by side, over %v", limit, cases[0].keys, cases[1].keys, window)
	active0 := scrapeEach(children, "shaper_keys_active")
	ws := measureChildren(children, sinks, window)
	active1 := scrapeEach(children, "shaper_keys_active")
	for i, w := range ws {
		c := &out[i]
		c.LanesActive = int(min(active0[i], active1[i]))
		c.Seconds, c.Delivered, c.Rate, c.ChildCost = w.seconds, w.delivered, w.rate, w.cost
		progress("lanes: %5d keys (%d lanes active): %.1f µs/msg in shaper (%.1f%% of a core, %.0f allocs/msg), %d delivered",
			c.Keys, c.LanesActive, c.ShaperUs, c.ShaperPct, c.Allocs, c.Delivered)
	}
	for _, ch := range children {
		ch.stop(10 * time.Second)
	}
	return out, nil
}

// scrapeEach reads one gauge from each child's /metrics (-1 when it could
// not be read).
func scrapeEach(children []*child, name string) []float64 {
	out := make([]float64, len(children))
	for i, ch := range children {
		out[i] = -1
		if m, err := ch.scrape(name); err == nil {
			out[i] = m[name]
		}
	}
	return out
}

// measureChildren is measureChild for children running side by side, each
// with its own sink, over one window. This process's CPU is the brokers'
// and the sinks' of all of them: each child's HarnessUs is it over every
// message delivered in the window.
func measureChildren(children []*child, sinks []*sink, window time.Duration) []childWindow {
	const mallocs, bytes = "go_memstats_mallocs_total", "go_memstats_alloc_bytes_total"
	k := len(children)
	m0, m1 := make([]map[string]float64, k), make([]map[string]float64, k)
	cpu0, cpu1 := make([]time.Duration, k), make([]time.Duration, k)
	n0, n1 := make([]int64, k), make([]int64, k)
	for i, ch := range children {
		m0[i], _ = ch.scrape(mallocs, bytes) // a failed scrape leaves the allocations at 0
	}
	t0, self0 := time.Now(), selfCPU()
	for i, ch := range children {
		cpu0[i], n0[i] = ch.cpu(), sinks[i].count.Load()
	}
	time.Sleep(window)
	t1, self1 := time.Now(), selfCPU()
	for i, ch := range children {
		cpu1[i], n1[i] = ch.cpu(), sinks[i].count.Load()
	}
	var total int64
	for i, ch := range children {
		m1[i], _ = ch.scrape(mallocs, bytes)
		total += n1[i] - n0[i]
	}
	out := make([]childWindow, k)
	for i := range children {
		w := childWindow{seconds: t1.Sub(t0).Seconds(), delivered: n1[i] - n0[i], childCPU: cpu1[i] - cpu0[i], harnessCPU: self1 - self0}
		w.rate = float64(w.delivered) / w.seconds
		w.cost.ShaperPct = 100 * w.childCPU.Seconds() / w.seconds
		if w.delivered > 0 {
			w.cost.ShaperUs = float64(w.childCPU.Microseconds()) / float64(w.delivered)
			if m0[i] != nil && m1[i] != nil {
				w.cost.Allocs = (m1[i][mallocs] - m0[i][mallocs]) / float64(w.delivered)
				w.cost.AllocBytes = (m1[i][bytes] - m0[i][bytes]) / float64(w.delivered)
			}
		}
		if total > 0 {
			w.cost.HarnessUs = float64(w.harnessCPU.Microseconds()) / float64(total)
		}
		out[i] = w
	}
	return out
}

// laneBacklog runs a `shaper run` child through a Kafka backlog of many
// keys at a high rate, with max_keys below the number of keys and a
// bucket large enough to hold a message of every lane max_keys allows, and
// measures its resident set while lanes are active.
func laneBacklog(ctx context.Context, o *options, env *environment) (*LaneBacklog, error) {
	r := &LaneBacklog{Backlog: 1_000_000, Keys: 100_000, MaxKeys: 50_000, Capacity: 100_000, Limit: 50_000}
	run := 20 * time.Second
	if o.quick {
		r.Backlog, r.Keys, r.MaxKeys, r.Capacity, run = 100_000, 10_000, 5_000, 10_000, 8*time.Second
	}
	progress("lanes: publishing %d messages over %d keys to Kafka", r.Backlog, r.Keys)
	if err := publishKeyed(ctx, env.kafka, topicLanesBacklog, r.Backlog, r.Keys); err != nil {
		return nil, err
	}
	sink, err := startSink(false)
	if err != nil {
		return nil, err
	}
	defer sink.close()
	ch, err := startChild(env.bin, o.tmp, "lanes-backlog", fmt.Sprintf(`
  - name: lanes
    source:%s
    key: {from: "header:%s", max_keys: %d}
    bucket: {capacity: %d, max_queue_time: 1m}
    rate: {limit: %v}
    sink:
      http: {url: %q, max_in_flight: 64}
`, env.kafka.sourceYAML(topicLanesBacklog, "shaper-lanes-backlog", true), laneHeader, r.MaxKeys, r.Capacity, r.Limit, sink.URL))
	if err != nil {
		return nil, err
	}
	defer ch.kill()
	if !sink.waitCount(ctx, 1, time.Minute) {
		return nil, fmt.Errorf("nothing delivered within a minute; log:\n%s", ch.tail())
	}
	r.RunSeconds = run.Seconds()
	progress("lanes: %d messages over %d keys, max_keys %d: %v from the first delivery", r.Backlog, r.Keys, r.MaxKeys, run)
	const active, overflow, depth, heap = "shaper_keys_active", "shaper_key_overflow_total", "shaper_bucket_depth", "go_memstats_heap_inuse_bytes"
	start := time.Now()
	sample := func() {
		if m, err := ch.scrape(active, overflow, depth, heap); err == nil {
			r.LanesActive = max(r.LanesActive, m[active])
			r.Overflow = max(r.Overflow, m[overflow])
			r.Held = max(r.Held, m[depth])
			r.HeapMiB = max(r.HeapMiB, m[heap]/(1<<20))
		}
	}
	for time.Since(start) < run && sink.count.Load() < int64(r.Backlog) && ctx.Err() == nil {
		sample()
		time.Sleep(200 * time.Millisecond)
	}
	sample()
	r.Seconds = time.Since(start).Seconds()
	r.Delivered = sink.count.Load()
	if top, err := ch.keys("lanes", 1); err == nil && len(top) > 0 {
		r.Deepest = &top[0]
	} else if err != nil {
		progress("lanes: GET keys: %v", err) // the table goes without it
	}
	_, peak, err := procMemory(ch.pid())
	if err != nil {
		return nil, err
	}
	r.RSSMiB = float64(peak) / (1 << 20)
	r.BoundMiB = math.Ceil(r.RSSMiB*1.25/16) * 16
	progress("lanes: %d delivered in %.1fs, at most %.0f lanes, %.0f messages over max_keys, heap ≤ %.1f MiB, peak RSS %.1f MiB (bound %.0f MiB)",
		r.Delivered, r.Seconds, r.LanesActive, r.Overflow, r.HeapMiB, r.RSSMiB, r.BoundMiB)
	ch.stop(10 * time.Second)
	return r, nil
}

// keys returns the child's top deepest lanes of pipeline name (GET
// /v1/pipelines/{name}/keys).
func (c *child) keys(name string, top int) ([]shaper.KeyStatus, error) {
	resp, err := http.Get(fmt.Sprintf("http://%s/v1/pipelines/%s/keys?top=%d", c.admin, name, top))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/pipelines/%s/keys: %s", name, resp.Status)
	}
	var out []shaper.KeyStatus
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

// publishKeyed produces n records to topic, round robin over its
// partitions, record i with the payload of message i and the key
// "key-" + i mod keys in header Key, and waits until the broker has acked
// every one.
func publishKeyed(ctx context.Context, k *kafkaCluster, topic string, n, keys int) error {
	return k.PublishMessages(ctx, topic, n, func(i int) kafka.Message {
		return kafka.Message{Value: payload(i), Headers: []kafka.Header{{Key: laneHeader, Value: fmt.Appendf(nil, "key-%06d", i%keys)}}}
	})
}

// decision returns the median of the decision sub-benchmark kind (turns or
// per_key) with lanes lanes.
func (s *LanesSection) decision(kind string, lanes int) (LimiterBench, bool) {
	name := fmt.Sprintf("TakeWithActiveLanes/%s/lanes=%d", kind, lanes)
	for _, b := range s.Decisions {
		if b.Name == name {
			return b, true
		}
	}
	return LimiterBench{}, false
}

// laneKinds are the decision benchmark's two kinds, with their labels.
var laneKinds = []struct{ name, label string }{
	{"turns", "keys in turns"},
	{"per_key", "rate.per_key"},
}

// goals are the lanes section's goals, for the report's table.
func (s *LanesSection) goals() []Goal {
	var goals []Goal
	for _, k := range laneKinds {
		if d, ok := s.decision(k.name, 10_000); ok {
			goals = append(goals, Goal{
				Goal:     fmt.Sprintf("lanes: one scheduling decision < 200 ns, 0 allocs, at 10 000 lanes (%s)", k.label),
				Measured: fmt.Sprintf("%.0f ns/op, %g allocs/op", d.NsPerOp, d.AllocsPerOp),
				Met:      d.NsPerOp < 200 && d.AllocsPerOp == 0,
			})
		}
	}
	if len(s.CPU) == 2 && s.CPURatio > 0 {
		goals = append(goals, Goal{
			Goal: "lanes: CPU per message at 1000/s with 10 000 lanes within 20% of 1 lane",
			Measured: fmt.Sprintf("%.2f× (%.1f µs against %.1f µs)",
				s.CPURatio, s.CPU[1].ShaperUs, s.CPU[0].ShaperUs),
			Met: math.Abs(s.CPURatio-1) <= 0.2,
		})
	}
	return goals
}

// markdown writes the lanes section.
func (s *LanesSection) markdown(p func(string, ...any)) {
	p("## Keys (lanes)")
	p("")
	p("With `key.from` the bucket holds a lane per key: a ring of the lanes that may have a message ready, which take")
	p("turns, and a heap of the lanes ready at a known time (a per-key slot under `rate.per_key`, a retry's due time).")
	if m := s.MeasuredBy; m.Command != "" {
		p("Measured by `%s` (%s).", reproducible(m.Command), m.Date)
	}
	p("")
	p("%s", loadLine(s.Load))
	p("")
	if tk := s.TwoKeys; tk != nil {
		tk.markdown(p)
	}
	p("### One scheduling decision")
	p("")
	p("`%s` (from the module root), medians of %d runs. One op is the bucket's part of one departure, the task put", s.DecisionCommand, runsOf(s.Decisions))
	p("back instead of sent: `take(now)` (the decision), `spend(t, now)` (the lane's per-key slot) and `retry(t, now)`")
	p("(the task back in its lane, due at once, which stands for admitting a new message without its allocation):")
	p("three acquisitions of the bucket's lock (four under `rate.per_key`). Every lane holds a message. *keys in turns*:")
	p("no `rate.per_key`; every lane stays in the ring. *rate.per_key*: each lane has its own limit of 1/s, the lanes'")
	p("slots spread over the second, and the scheduler waits for each: the op holds a second `take`, as after the")
	p("scheduler's sleep, and each decision moves one lane into the timed heap and one out. Goal: O(1) or O(log n),")
	p("< 200 ns at 10 000 lanes, 0 allocs.")
	p("")
	p("| active lanes | keys in turns: ns/op (range) | vs 1 lane | allocs/op | rate.per_key: ns/op (range) | vs 1 lane | allocs/op |")
	p("|---:|---:|---:|---:|---:|---:|---:|")
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
		p("From 100 lanes to 100 000 (1000×, log₂ n 2.5×) a decision's cost grew %s.", strings.Join(growth, " and "))
		p("")
	}
	p("### Memory per lane")
	p("")
	p("`%s`: the live heap after a GC with the lanes held, less the live heap before the bucket was made, per", s.MemoryCommand)
	p("lane (median of %d runs). The messages and the keys' strings are made before and do not count (a key", runsOfMemory(s.Memory))
	p("costs its own bytes besides). *active*: a lane holding one message (its task included); *active_per_key*: the")
	p("same with its own limiter (`rate.per_key`); *idle_per_key*: a key remembered only for its limiter: its message")
	p("was sent and settled, and its limiter is not yet as new.")
	p("")
	p("| lane | lanes | heap per lane |")
	p("|---|---:|---:|")
	for _, m := range s.Memory {
		p("| %s | %s | %.0f B |", m.Name, thousands(m.Lanes), m.BytesPerLane)
	}
	p("")
	if len(s.CPU) == 2 {
		p("### CPU per delivered message, 1 key against 10 000")
		p("")
		p("Two `shaper run` children side by side over the same window, each consuming its own Kafka backlog (kfake) with")
		p("`key.from: header:%s`, `bucket: {capacity: 20000, max_queue_time: 1m}` and `rate.limit` %v, and delivering", laneHeader, s.CPU[0].Limit)
		p("to its own HTTP sink: one with every message of one key, one with the messages spread over 10 000 keys in")
		p("turn, so the bucket holds two of each and every key has a lane. CPU, allocations and the harness's CPU are")
		p("measured as in *CPU per delivered message* above; the harness's (brokers and both sinks) is over both children's")
		p("messages. *lanes active*: the fewer `shaper_keys_active` of the window's start and end.")
		p("")
		p("| keys | lanes active | window | delivered | shaper CPU per message | shaper CPU | shaper allocations per message | broker + sink CPU per message |")
		p("|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, c := range s.CPU {
			p("| %s | %s | %.1f s | %d (%.0f/s) | %.1f µs | %.1f%% of a core | %.0f (%.1f KiB) | %.1f µs |", thousands(c.Keys), thousands(c.LanesActive),
				c.Seconds, c.Delivered, c.Rate, c.ShaperUs, c.ShaperPct, c.Allocs, c.AllocBytes/1024, c.HarnessUs)
		}
		p("")
		p("With 10 000 lanes a message cost %s the CPU it cost with one (goal: within 20%%).",
			mark(fmt.Sprintf("%.2f×", s.CPURatio), math.Abs(s.CPURatio-1) > 0.2))
		p("")
	}
	if b := s.Backlog; b != nil {
		p("### Memory with %s keys in a backlog of %s", thousands(b.Keys), thousands(b.Backlog))
		p("")
		p("A `shaper run` child consumes a Kafka backlog (kfake, %d partitions) of %s messages whose header `%s` holds", kafkaPartitions, thousands(b.Backlog), laneHeader)
		p("one of %s keys in turn, with `key: {from: \"header:%s\", max_keys: %d}`, `bucket: {capacity: %d, max_queue_time: 1m}`,", thousands(b.Keys), laneHeader, b.MaxKeys, b.Capacity)
		p("`rate.limit` %v and `max_in_flight: 64`, for %.0f s from its first delivery or until every message is delivered. Past", b.Limit, b.RunSeconds)
		p("`max_keys` lanes, messages of a new key go to the \"\" lane and are counted (`shaper_key_overflow_total`). Lanes are the most")
		p("`shaper_keys_active` its `/metrics` showed (sampled every 200 ms), heap the most `go_memstats_heap_inuse_bytes`,")
		p("RSS its peak resident set (`VmHWM`).")
		p("")
		p("| backlog | keys | max_keys | delivered | held (most) | lanes (most) | overflow counted | heap in use (max) | RSS (peak) |")
		p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		p("| %s | %s | %s | %s in %.1f s | %s | %s | %s | %.1f MiB | %.1f MiB |", thousands(b.Backlog), thousands(b.Keys), thousands(b.MaxKeys),
			thousands(int(b.Delivered)), b.Seconds, thousands(int(b.Held)), thousands(int(b.LanesActive)), thousands(int(b.Overflow)), b.HeapMiB, b.RSSMiB)
		p("")
		switch d := b.Deepest; {
		case d == nil:
		case d.Key == "":
			p("At the end the deepest lane was the \"\" lane, where the keys past `max_keys` go: it held %s messages, the oldest", thousands(d.Depth))
			p("queued for %.1f s. It takes one turn per round like any key, however many keys share it.", d.OldestWait)
			p("")
		default:
			p("At the end the deepest lane was %q, holding %s messages, the oldest queued for %.1f s.", d.Key, thousands(d.Depth), d.OldestWait)
			p("")
		}
		if b.Held > 0 {
			p("The heap is mostly the messages held: %.1f KiB of heap in use per message held at the most.", b.HeapMiB*1024/b.Held)
			p("")
		}
		p("**The bound**: with this config the daemon's RSS stays under **%.0f MiB** (the peak measured, plus a quarter,", b.BoundMiB)
		p("rounded up to 16 MiB).")
		p("")
	}
}

func runsOfMemory(m []LaneMemory) int {
	if len(m) == 0 {
		return 0
	}
	return m[0].Runs
}

// LaneTwoKeys is the run behind docs/lanes.svg (issue 13): a stream holds
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

// laneTwoKeys runs the two-keys case without lanes and then with them.
func laneTwoKeys(ctx context.Context, o *options, env *environment) (*LaneTwoKeys, error) {
	r := &LaneTwoKeys{Limit: 100, Capacity: 1000, PerKeyCapacity: 100, A: 2000, B: 50, MaxSeconds: 30, BinMs: 100}
	if o.quick {
		r.A = 500
	}
	runs := []struct {
		name, label, key, bucket string
	}{
		{"without", "without lanes", "", ""},
		{"with", "with lanes (key.from: header:" + merchantHeader + ")",
			fmt.Sprintf("\n    key: {from: \"header:%s\"}", merchantHeader), fmt.Sprintf(", per_key_capacity: %d", r.PerKeyCapacity)},
	}
	span := 0.0
	for i, c := range runs {
		progress("lanes: %d of A then %d of B at %v/s, %s", r.A, r.B, r.Limit, c.label)
		name := fmt.Sprintf("KEYS%d", i)
		config := func(sinkURL string) string {
			return fmt.Sprintf(`
  - name: keys
    source:
      nats: {url: %q, subject: %s.in, stream: %s, durable: shaper-keys}%s
    bucket: {capacity: %d, max_queue_time: 5m%s}
    rate: {limit: %v, mode: leaky}
    sink:
      http: {url: %q}
`, env.js.URL(), name, name, c.key, r.Capacity, c.bucket, r.Limit, sinkURL)
		}
		run, err := laneTwoKeysRun(ctx, o, env, r, name, config, span)
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

// laneTwoKeysRun publishes the backlog to a new stream name, runs a child
// on the pipelines config returns for the sink's URL until twoKeysTail
// after every B was delivered and at least minSeconds from the first
// delivery, or r.MaxSeconds from it, and measures what the sink received.
func laneTwoKeysRun(ctx context.Context, o *options, env *environment, r *LaneTwoKeys, name string, config func(sinkURL string) string, minSeconds float64) (LaneTwoKeysRun, error) {
	var run LaneTwoKeysRun
	if err := env.js.stream(ctx, name); err != nil {
		return run, err
	}
	defer env.js.deleteStream(context.WithoutCancel(ctx), name)
	if err := publishMerchants(ctx, env.js.URL(), name+".in", r.A, r.B); err != nil {
		return run, err
	}
	sink, err := startKeySink()
	if err != nil {
		return run, err
	}
	defer sink.close()
	ch, err := startChild(env.bin, o.tmp, "lanes-"+strings.ToLower(name), config(sink.URL))
	if err != nil {
		return run, err
	}
	defer ch.kill()
	if !sink.waitCount(ctx, 1, time.Minute) {
		return run, fmt.Errorf("nothing delivered within a minute; log:\n%s", ch.tail())
	}
	first := sink.first()
	limit := time.Duration(r.MaxSeconds * float64(time.Second))
	var allB time.Time // when every B had arrived
	for ctx.Err() == nil {
		now := time.Now()
		if allB.IsZero() && sink.countB.Load() >= int64(r.B) {
			allB = now
		}
		since := now.Sub(first)
		if since >= limit || !allB.IsZero() && now.Sub(allB) >= twoKeysTail && since.Seconds() >= minSeconds {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := ctx.Err(); err != nil {
		return run, err
	}
	end := time.Now()
	ch.stop(10 * time.Second)
	return measureTwoKeys(sink.received(), first, end, r.B, time.Duration(r.BinMs)*time.Millisecond), nil
}

// measureTwoKeys turns the deliveries of one run, from first (the first
// delivery) to end, into its figures; want is how many B were published.
func measureTwoKeys(got []keyedArrival, first, end time.Time, want int, bin time.Duration) LaneTwoKeysRun {
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
			run.BSeconds = append(run.BSeconds, math.Round(at*1000)/1000)
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

// publishMerchants publishes a messages with header Merchant-Id: A and
// bodies, ..., then b with Merchant-Id: B and bodies B-0, ...,
// to subject in that order, and waits for every ack.
func publishMerchants(ctx context.Context, url, subject string, a, b int) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return fmt.Errorf("nats connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	for i := range a + b {
		key, n := "A", i
		if i >= a {
			key, n = "B", i-a
		}
		m := nats.NewMsg(subject)
		m.Header.Set(merchantHeader, key)
		m.Data = fmt.Appendf(nil, "%s-%d", key, n)
		if _, err := js.PublishMsgAsync(m); err != nil {
			return fmt.Errorf("jetstream: publish to %s: %w", subject, err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Minute):
		return fmt.Errorf("jetstream: publish to %s: acks still pending after a minute", subject)
	}
}

// keySink is a real HTTP server on 127.0.0.1 that answers 200 to every
// request and records when it arrived and its body's key: what comes
// before the first '-' ("A" of "A-17").
type keySink struct {
	URL    string
	srv    *http.Server
	wg     sync.WaitGroup
	count  atomic.Int64
	countB atomic.Int64

	mu  sync.Mutex
	got []keyedArrival
}

// keyedArrival is one request the key sink received.
type keyedArrival struct {
	at  time.Time
	key string
}

func startKeySink() (*keySink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &keySink{URL: "http://" + ln.Addr().String() + "/callback"}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	s.wg.Go(func() {
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			progress("key sink: %v", err)
		}
	})
	return s, nil
}

func (s *keySink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now() // as the sink's: when the headers have been read
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<10))
	key, _, _ := strings.Cut(string(body), "-")
	s.mu.Lock()
	s.got = append(s.got, keyedArrival{at: at, key: key})
	s.mu.Unlock()
	if key == "B" {
		s.countB.Add(1)
	}
	s.count.Add(1)
	w.WriteHeader(http.StatusOK)
}

// first returns when the first request arrived (zero: none yet).
func (s *keySink) first() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := time.Time{}
	for _, a := range s.got {
		if t.IsZero() || a.at.Before(t) {
			t = a.at
		}
	}
	return t
}

// received returns every request received, in order of arrival.
func (s *keySink) received() []keyedArrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.got)
	// Handlers run concurrently; appends may interleave.
	slices.SortStableFunc(out, func(a, b keyedArrival) int { return a.at.Compare(b.at) })
	return out
}

// waitCount waits until the sink has received n requests, and reports
// whether it did within timeout.
func (s *keySink) waitCount(ctx context.Context, n int64, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for s.count.Load() < n {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

func (s *keySink) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx) // bounded; a slow client is not our problem here
	s.wg.Wait()
}

// The two-keys picture, in the style of shaping.svg and pushback.svg: one
// panel per run on one time axis, each with the A delivered so far (left
// axis) and the B delivered so far (right axis, of the B published), and
// a dashed line where the last B arrived.
const (
	lanesPanelH = 150
	lanesRight  = 60 // room for the right-hand axis
)

var (
	lanesColourA = "#1f77b4"
	lanesColourB = "#e07b00"
)

func renderLanesSVG(tk *LaneTwoKeys) string {
	var b strings.Builder
	n := len(tk.Runs)
	height := svgTop + n*lanesPanelH + (n-1)*svgPanelGap + svgBottom
	plotW := float64(svgWidth - svgLeft - lanesRight)
	right := float64(svgWidth - lanesRight)
	total := 1.0
	for _, r := range tk.Runs {
		total = max(total, r.Seconds)
	}
	x := func(s float64) float64 { return svgLeft + plotW*math.Min(s, total)/total }
	stepA := 500
	if tk.A < 1000 {
		stepA = 100
	}
	tick := 2.0
	if total > 30 {
		tick = 5
	}

	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="11">`+"\n",
		svgWidth, height, svgWidth, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">Two merchants at %g requests/s: %s callbacks of A in the stream, then %d of B</text>`+"\n",
		svgLeft, tk.Limit, thousands(tk.A), tk.B)
	lx := float64(svgLeft)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="38" x2="%.0f" y2="38" stroke="%s" stroke-width="2"/><text x="%.0f" y="42">A delivered (left axis)</text>`+"\n", lx, lx+18, lanesColourA, lx+22)
	lx += 160
	fmt.Fprintf(&b, `<line x1="%.0f" y1="38" x2="%.0f" y2="38" stroke="%s" stroke-width="2"/><text x="%.0f" y="42">B delivered, of %d (right axis)</text>`+"\n", lx, lx+18, lanesColourB, lx+22, tk.B)
	lx += 200
	fmt.Fprintf(&b, `<line x1="%.0f" y1="32" x2="%.0f" y2="44" stroke="%s" stroke-dasharray="3 2"/><text x="%.0f" y="42">the last B delivered</text>`+"\n", lx, lx, lanesColourB, lx+6)

	for i, run := range tk.Runs {
		top := float64(svgTop + i*(lanesPanelH+svgPanelGap))
		bottom := top + lanesPanelH
		yA := func(v int) float64 { return bottom - lanesPanelH*float64(v)/float64(max(tk.A, 1)) }
		yB := func(v int) float64 { return bottom - lanesPanelH*float64(v)/float64(max(tk.B, 1)) }

		fmt.Fprintf(&b, `<text x="%d" y="%.0f" font-size="12" font-weight="bold" fill="#333">%s</text>`+"\n", svgLeft, top-6, xmlEscape(run.Label))
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end" fill="#555">%s</text>`+"\n", right, top-6, xmlEscape(twoKeysSummary(tk, run)))
		// Grid on A's ticks; B's ticks on the right.
		for v := 0; v <= tk.A; v += stepA {
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#e6e6e6"/>`+"\n", svgLeft, yA(v), right, yA(v))
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="%s">%s</text>`+"\n", svgLeft-6, yA(v)+4, lanesColourA, thousands(v))
		}
		for _, v := range []int{0, tk.B / 2, tk.B} {
			fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#333"/>`+"\n", right, yB(v), right+4, yB(v))
			fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" fill="%s">%d</text>`+"\n", right+7, yB(v)+4, lanesColourB, v)
		}
		// A: cumulative at the end of each bin.
		binSec := float64(tk.BinMs) / 1000
		var pathA strings.Builder
		fmt.Fprintf(&pathA, "M%.1f,%.1f", x(0), yA(0))
		for j, c := range run.ACumulative {
			fmt.Fprintf(&pathA, " L%.1f,%.1f", x(float64(j+1)*binSec), yA(c))
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.6" stroke-linejoin="round"/>`+"\n", pathA.String(), lanesColourA)
		// B: a step at each arrival.
		var pathB strings.Builder
		fmt.Fprintf(&pathB, "M%.1f,%.1f", x(0), yB(0))
		for j, t := range run.BSeconds {
			fmt.Fprintf(&pathB, " L%.1f,%.1f L%.1f,%.1f", x(t), yB(j), x(t), yB(j+1))
		}
		fmt.Fprintf(&pathB, " L%.1f,%.1f", x(run.Seconds), yB(len(run.BSeconds)))
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.6" stroke-linejoin="round"/>`+"\n", pathB.String(), lanesColourB)
		// The last B.
		if run.LastB >= 0 {
			lx := x(run.LastB)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="3 2"/>`+"\n", lx, top, lx, bottom, lanesColourB)
			// Beside the line, where the curves are not: to its right
			// halfway up when it is early, to its left near the bottom when
			// late (A is high by then, and B still at 0 before it).
			anchor, dx, ly := "start", 4.0, top+lanesPanelH/2
			if lx > svgLeft+plotW/2 {
				anchor, dx, ly = "end", -4, bottom-8
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="%s" fill="%s" stroke="#ffffff" stroke-width="3" paint-order="stroke">last B: %s s</text>`+"\n",
				lx+dx, ly, anchor, lanesColourB, secondsText(run.LastB))
		}
		// Axes.
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#333"/>`+"\n", svgLeft, bottom, right, bottom)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#333"/>`+"\n", svgLeft, top, svgLeft, bottom)
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#333"/>`+"\n", right, top, right, bottom)
		for s := 0.0; s <= total; s += tick {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", x(s), bottom, x(s), bottom+4)
			if i == n-1 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%g</text>`+"\n", x(s), bottom+16, s)
			}
		}
	}
	mid := svgTop + (n*lanesPanelH+(n-1)*svgPanelGap)/2
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">seconds from the first delivery</text>`+"\n", svgLeft+plotW/2, height-10)
	fmt.Fprintf(&b, `<text transform="translate(14 %d) rotate(-90)" text-anchor="middle" fill="%s">A delivered</text>`+"\n", mid, lanesColourA)
	fmt.Fprintf(&b, `<text transform="translate(%d %d) rotate(90)" text-anchor="middle" fill="%s">B delivered (of %d)</text>`+"\n", svgWidth-14, mid, lanesColourB, tk.B)
	b.WriteString("</svg>\n")
	return b.String()
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
func secondsText(s float64) string {
	switch {
	case s < 0.1:
		return fmt.Sprintf("%.3f", s)
	case s < 1:
		return fmt.Sprintf("%.2f", s)
	}
	return fmt.Sprintf("%.1f", s)
}

// markdown writes the two-keys subsection.
func (tk *LaneTwoKeys) markdown(p func(string, ...any)) {
	p("### Two keys, one flooding")
	p("")
	p("![%s](lanes.svg)", tk.altText())
	p("")
	p("A JetStream stream (embedded nats-server) holds %s messages with header `%s: A` (bodies `A-0`, `A-1`, ...)", thousands(tk.A), merchantHeader)
	p("and then %d with `%s: B`. A `shaper run` child delivers them to an HTTP sink on 127.0.0.1 (which answers 200 and", tk.B, merchantHeader)
	p("records each request's arrival and key) at `rate: {limit: %g, mode: leaky}` with `bucket: {capacity: %d, max_queue_time: 5m}`:", tk.Limit, tk.Capacity)
	p("once without `key:`, once with `key: {from: \"header:%s\"}` and `bucket.per_key_capacity: %d`, each on its own", merchantHeader, tk.PerKeyCapacity)
	p("stream and durable, one after the other. A run lasts until %g s after the last B and, for the second, at least as", twoKeysTail.Seconds())
	p("long as the first did, at most %.0f s from its first delivery. Times are from the run's first delivery.", tk.MaxSeconds)
	p("")
	p("| run | first B after | A delivered before it | last B after | A delivered before it | delivered in the run |")
	p("|---|---:|---:|---:|---:|---:|")
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
		p("Without lanes the bucket is one queue in stream order: the first B waited %s s, behind the %s A before it in", secondsText(without.FirstB), thousands(without.ABeforeFirstB))
		p("the stream, and the last %s s. With a lane per merchant the lanes take turns: the first B arrived after %s s, the", secondsText(without.LastB), secondsText(with.FirstB))
		p("last after %s s (%s A meanwhile), and A went on at the rest of the rate.", secondsText(with.LastB), thousands(with.ABeforeLastB))
		p("")
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
