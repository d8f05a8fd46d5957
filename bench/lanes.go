package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"time"

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
	transport := &kafka.Transport{}
	defer transport.CloseIdleConnections()
	w := &kafka.Writer{
		Addr:         kafka.TCP(k.Addrs()...),
		Topic:        topic,
		Balancer:     &kafka.RoundRobin{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 5 * time.Millisecond,
		BatchSize:    10_000,
		BatchBytes:   1 << 20,
		Transport:    transport,
	}
	// A chunk at a time, so a backlog of millions is not all in memory.
	const chunk = 100_000
	msgs := make([]kafka.Message, 0, min(n, chunk))
	var err error
	for from := 0; from < n && err == nil; from += chunk {
		msgs = msgs[:0]
		for i := from; i < min(from+chunk, n); i++ {
			msgs = append(msgs, kafka.Message{
				Value:   payload(i),
				Headers: []kafka.Header{{Key: laneHeader, Value: fmt.Appendf(nil, "key-%06d", i%keys)}},
			})
		}
		err = w.WriteMessages(ctx, msgs...)
	}
	if err = errors.Join(err, w.Close()); err != nil {
		return fmt.Errorf("kafka: produce to %s: %w", topic, err)
	}
	return nil
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
		p("Measured by `%s` (%s, commit %s).", m.Command, m.Date, orDash(m.Commit))
	}
	p("")
	p("%s", loadLine(s.Load))
	p("")
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
