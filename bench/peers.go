package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/bench/peers/backlog"
	"github.com/shaper-dev/shaper/internal/window"
)

// PeersSection is what shaper costs beside what a user would run instead
// (issue 17): for each source, the loop a user would write by hand, its
// variants, Benthos and a `shaper run` child deliver the same messages to
// the same sink at the same limit, one after the other in one run. Every
// party, the broker and the sink are processes of their own, so each one's
// CPU is measured alone, and every request is timed by the sink's process,
// as a receiver would see it.
type PeersSection struct {
	Load Load `json:"load"`
	// Runs is how many times each party ran in each case, the runs of all
	// parties and cases taken in turn; a party's figures are the medians of
	// its runs. WarmupSeconds is how long a run delivered before its
	// window, from the first arrival at the sink; WindowSeconds how long
	// the window lasted.
	Runs          int     `json:"runs"`
	WarmupSeconds float64 `json:"warmup_seconds"`
	WindowSeconds float64 `json:"window_seconds"`
	// BodyBytes is the size of every message's body.
	BodyBytes int        `json:"body_bytes"`
	Cases     []PeerCase `json:"cases"`
	// CPUClock is where every process's CPU time came from: cpuClockProcess
	// (its process CPU clock, in nanoseconds), or "" (utime + stime of
	// /proc/<pid>/stat, in 10 ms ticks: the harness before this field, or a
	// system whose clock could not be read).
	CPUClock string `json:"cpu_clock,omitempty"`
	// MeasuredBy is the run that measured the section, which stays with it
	// when it is merged into the report of another run.
	MeasuredBy Provenance `json:"measured_by"`
}

// PeerCase is one source delivered to HTTP at one limit by several
// parties.
type PeerCase struct {
	// Name is the source and the limit, such as jetstream-1000: its part
	// before the '-' is peerJetStream, peerKafka or peerCore.
	Name   string  `json:"name"`
	Source string  `json:"source"`
	Limit  float64 `json:"limit"`
	// Backlog is how many messages the broker held before the first run;
	// every run reads them from the start with a consumer or group of its
	// own. A core NATS case has none: FeedRate is the rate of its live
	// feed.
	Backlog  int     `json:"backlog,omitempty"`
	FeedRate float64 `json:"feed_rate,omitempty"`
	// Allowed100ms is the most arrivals in any 100 ms that the goal
	// allows: limit/10 + 2 when measured at a sink in another process
	// (issue 17).
	Allowed100ms int `json:"allowed_per_100ms"`
	// Baseline names the party every ratio is to: the hand-written loop
	// of the case's source.
	Baseline string      `json:"baseline"`
	Parties  []PeerParty `json:"parties"`
}

// PeerParty is one program delivering a case's messages, its runs and
// their medians.
type PeerParty struct {
	Name  string `json:"name"`
	Label string `json:"label"`
	// ReadsBroker is false for a party that generates its messages itself
	// (Benthos): it has no broker CPU.
	ReadsBroker bool      `json:"reads_broker"`
	Runs        []PeerRun `json:"runs"`
	// Median holds the median of each figure over Runs, each on its own.
	Median PeerRun `json:"median"`
	// CPURatio and BrokerRatio are the median CPU per message of this
	// party and of the broker while it ran, over the baseline's (0: not
	// measured).
	CPURatio    float64 `json:"cpu_ratio"`
	BrokerRatio float64 `json:"broker_cpu_ratio"`
}

// PeerRun is one run of a party, over its window: the messages the sink
// received in it and the CPU each process used (see
// PeersSection.CPUClock).
type PeerRun struct {
	Seconds   float64 `json:"seconds"`
	Delivered int     `json:"delivered"`
	// CPUUs is the party's CPU per delivered message in microseconds, and
	// CPUPct its CPU as a share of one core; BrokerUs and SinkUs are the
	// broker's and the sink's CPU per delivered message.
	CPUUs    float64 `json:"cpu_us_per_msg"`
	CPUPct   float64 `json:"cpu_pct_of_core"`
	BrokerUs float64 `json:"broker_cpu_us_per_msg"`
	SinkUs   float64 `json:"sink_cpu_us_per_msg"`
	// The timing of the window's arrivals at the sink's handler, and
	// Wire the same of their wire times (nil: the sink had none).
	PeerTiming
	Wire *PeerTiming `json:"wire,omitempty"`
}

// PeerTiming is how a run's arrivals were spread, by one of the sink's
// clocks (see bench/peers/sink): when its handler ran, or when the bytes
// reached its host.
type PeerTiming struct {
	// Rate is (n-1)/(t_n - t_1) over the window's arrivals, and RateErrPct
	// its error against the limit.
	Rate       float64 `json:"rate"`
	RateErrPct float64 `json:"rate_err_pct"`
	// Max100ms is the most arrivals in any 100 ms of the window.
	Max100ms int `json:"max_per_100ms"`
	// JitterP50 and JitterP99 are quantiles of |gap - 1/limit| between
	// consecutive arrivals of the window, in microseconds.
	JitterP50 float64 `json:"jitter_p50_us"`
	JitterP99 float64 `json:"jitter_p99_us"`
}

// The peers section's sources, and the names of the streams, subjects and
// topics the brokers hold for them.
const (
	peerJetStream = "jetstream"
	peerKafka     = "kafka"
	peerCore      = "core"

	peerStream      = "PEERS"
	peerStreamIn    = "PEERS.in"
	peerTopic       = "peers"
	peerCoreSubject = "peers.core"
)

// The parties, by name.
const (
	partyLoop          = "loop"
	partyLoopDoubleAck = "loop-double-ack"
	partyLoopOneP      = "loop-one-p"
	partyBenthos       = "benthos"
	partyShaper        = "shaper"
)

// peerWorkers is every party's requests in flight at once: the loops'
// workers, Benthos's and shaper's max_in_flight.
const peerWorkers = 8

// peerFeedFactor is how much faster than its limit the core NATS feed
// publishes: core NATS keeps nothing, so a party must always have more
// than it may send, as it has with a backlog. The rest is dropped, by
// shaper's source and by the hand-written loop's client alike.
const peerFeedFactor = 1.1

// peerBacklogSeconds is, beyond a run's warm-up and window, how many
// seconds of the fastest limit the brokers hold: room for a slow start and
// for what a party fetches ahead, so that no run reads its backlog dry.
const peerBacklogSeconds = 20

func runPeers(ctx context.Context, o *options, env *environment) (_ *PeersSection, err error) {
	probe := startLoadProbe()
	s := &PeersSection{Runs: 3, WarmupSeconds: 2, WindowSeconds: 8, BodyBytes: backlog.Size}
	if _, err := processCPU(os.Getpid()); err == nil {
		s.CPUClock = cpuClockProcess
	}
	if o.quick {
		s.Runs, s.WarmupSeconds, s.WindowSeconds = 1, 1, 2
	}
	progress("peers: building the peers' programs and Benthos")
	bins := filepath.Join(o.tmp, "peers")
	if err := buildPeers(ctx, o.root, bins, peerPrograms...); err != nil {
		return nil, err
	}
	cases := slices.DeleteFunc([]PeerCase{
		{Name: "jetstream-1000", Source: "NATS JetStream", Limit: 1000},
		{Name: "jetstream-100", Source: "NATS JetStream", Limit: 100},
		{Name: "kafka-1000", Source: "Kafka (kfake)", Limit: 1000},
		{Name: "core-1000", Source: "core NATS", Limit: 1000},
		{Name: "jetstream-5000", Source: "NATS JetStream", Limit: 5000},
	}, func(c PeerCase) bool { return len(o.peerCases) > 0 && !o.peerCases[c.Name] })
	if len(cases) == 0 {
		return nil, fmt.Errorf("-peer-cases: no case named %v", slices.Collect(maps.Keys(o.peerCases)))
	}
	fastest := slices.MaxFunc(cases, func(a, b PeerCase) int { return cmp.Compare(a.Limit, b.Limit) }).Limit
	backlogN := int(fastest * (s.WarmupSeconds + s.WindowSeconds + peerBacklogSeconds))
	progress("peers: starting the sink, nats-server and kfake, each a process; %d messages into each broker", backlogN)
	b, err := startPeerBench(ctx, o, env.bin, bins, backlogN)
	if err != nil {
		return nil, err
	}
	defer b.close() // on an error; closed below before the load is measured
	b.warmup = time.Duration(s.WarmupSeconds * float64(time.Second))
	b.window = time.Duration(s.WindowSeconds * float64(time.Second))
	parties := make([][]peerParty, len(cases))
	for i := range cases {
		c := &cases[i]
		c.Allowed100ms = int(c.Limit/10) + 2
		c.Baseline = partyLoop
		switch peerSource(c.Name) {
		case peerCore:
			c.FeedRate = peerFeedFactor * c.Limit
		default:
			c.Backlog = backlogN
		}
		parties[i] = b.parties(c)
		for _, p := range parties[i] {
			c.Parties = append(c.Parties, PeerParty{Name: p.name, Label: p.label, ReadsBroker: p.readsBroker})
		}
	}
	for rep := 1; rep <= s.Runs; rep++ {
		for i := range cases {
			c := &cases[i]
			for j, p := range parties[i] {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				r, err := b.measure(ctx, c, p, rep)
				if err != nil {
					return nil, fmt.Errorf("%s, %s, run %d: %w", c.Name, p.name, rep, err)
				}
				progress("peers: %s %-16s run %d: %6.1f µs/msg (%4.1f%% of a core), broker %6.1f µs/msg, %.1f/s (%+.2f%%), most %d per 100 ms, jitter p99 %s%s",
					c.Name, p.name, rep, r.CPUUs, r.CPUPct, r.BrokerUs, r.Rate, r.RateErrPct, r.Max100ms, micros(r.JitterP99), wireText(r.Wire))
				c.Parties[j].Runs = append(c.Parties[j].Runs, r)
			}
		}
	}
	for i := range cases {
		cases[i].summarize()
	}
	s.Cases = cases
	b.close()
	s.Load = probe.stop()
	return s, nil
}

// peerSource is the source of the case named name: its name up to the
// first '-'.
func peerSource(name string) string {
	source, _, _ := strings.Cut(name, "-")
	return source
}

// peerParty is how to start one party of a case: a child process whose
// CPU the section measures.
type peerParty struct {
	name, label string
	readsBroker bool
	start       func(id string) (party, error)
}

// party is a running party: a program of bench/peers, Benthos, or a
// `shaper run` child.
type party interface {
	cpu() time.Duration
	stop(timeout time.Duration)
	tail() string
}

// peerBench is the section's fixed parts: the programs, the sink and the
// brokers, each a process that lives through every run, and the harness's
// own NATS connection, which feeds the core NATS case and removes each
// run's JetStream consumer.
type peerBench struct {
	o              *options
	shaper, bins   string
	sink           *peerSink
	natsServer     *process
	kafkaServer    *process
	natsURL, kafka string
	nc             *nats.Conn
	js             jetstream.JetStream
	warmup, window time.Duration
}

func startPeerBench(ctx context.Context, o *options, shaperBin, bins string, backlogN int) (_ *peerBench, err error) {
	b := &peerBench{o: o, shaper: shaperBin, bins: bins}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	if b.sink, err = startPeerSink(ctx, o.tmp, filepath.Join(bins, "sink")); err != nil {
		return nil, err
	}
	n := strconv.Itoa(backlogN)
	if b.natsServer, b.natsURL, err = startReady(ctx, o.tmp, "peers-natsserver", filepath.Join(bins, "broker"),
		"-kind", "nats", "-stream", peerStream, "-subject", peerStreamIn, "-backlog", n); err != nil {
		return nil, err
	}
	if b.kafkaServer, b.kafka, err = startReady(ctx, o.tmp, "peers-kafkaserver", filepath.Join(bins, "broker"),
		"-kind", "kafka", "-topic", peerTopic, "-partitions", strconv.Itoa(kafkaPartitions), "-backlog", n); err != nil {
		return nil, err
	}
	if b.nc, err = nats.Connect(b.natsURL); err != nil {
		return nil, fmt.Errorf("nats connect %s: %w", b.natsURL, err)
	}
	if b.js, err = jetstream.New(b.nc); err != nil {
		return nil, err
	}
	return b, nil
}

// close ends every process and the connection; it may be called again.
func (b *peerBench) close() {
	if b.nc != nil {
		b.nc.Close()
		b.nc = nil
	}
	for _, p := range []**process{&b.natsServer, &b.kafkaServer} {
		if *p != nil {
			(*p).stop(10 * time.Second)
			*p = nil
		}
	}
	if b.sink != nil {
		b.sink.close()
		b.sink = nil
	}
}

// parties are the programs that deliver case c, the baseline first.
func (b *peerBench) parties(c *PeerCase) []peerParty {
	limit := strconv.FormatFloat(c.Limit, 'f', -1, 64)
	sink, workers := b.sink.callbackURL(), strconv.Itoa(peerWorkers)
	shaper := peerParty{name: partyShaper, label: "shaper run, leaky, max_in_flight 8, bucket 1000 (GOMAXPROCS as it sets it: 1 up to 500/s)", readsBroker: true,
		start: func(id string) (party, error) {
			return startChild(b.shaper, b.o.tmp, id, b.shaperYAML(c, id))
		}}
	switch peerSource(c.Name) {
	case peerJetStream:
		loop := func(id string, doubleAck bool, env []string) (party, error) {
			args := []string{"-source", "jetstream", "-nats", b.natsURL, "-stream", peerStream, "-consumer", id, "-sink", sink, "-rate", limit, "-workers", workers}
			if doubleAck {
				args = append(args, "-double-ack")
			}
			return startProcessEnv(b.o.tmp, id, filepath.Join(b.bins, "loop"), env, args...)
		}
		return []peerParty{
			{name: partyLoop, label: "hand-written: nats.go jetstream Consume + x/time/rate Wait + net/http, 8 workers, Ack after a 2xx", readsBroker: true,
				start: func(id string) (party, error) { return loop(id, false, nil) }},
			{name: partyLoopDoubleAck, label: "the same with DoubleAck (shaper's ack before issue 17)", readsBroker: true,
				start: func(id string) (party, error) { return loop(id, true, nil) }},
			{name: partyLoopOneP, label: "the same (Ack) at GOMAXPROCS=1, the threads shaper takes up to 500/s", readsBroker: true,
				start: func(id string) (party, error) { return loop(id, false, []string{"GOMAXPROCS=1"}) }},
			{name: partyBenthos, label: fmt.Sprintf("Benthos core %s: generate → local rate_limit (1 per %v) → http_client, max_in_flight 8 (no broker)", benthosVersion, peerInterval(c.Limit)),
				start: func(id string) (party, error) {
					path, err := writeBenthosConfig(b.o.tmp, id, c.Limit, sink)
					if err != nil {
						return nil, err
					}
					return startProcess(b.o.tmp, id, filepath.Join(b.bins, "benthos"), "-c", path)
				}},
			shaper,
		}
	case peerKafka:
		return []peerParty{
			{name: partyLoop, label: "hand-written: kafka-go group Reader (FetchMessage, CommitMessages every 1s) + x/time/rate Wait + net/http, 8 workers", readsBroker: true,
				start: func(id string) (party, error) {
					return startProcess(b.o.tmp, id, filepath.Join(b.bins, "loop"), "-source", "kafka",
						"-brokers", b.kafka, "-topic", peerTopic, "-group", id, "-sink", sink, "-rate", limit, "-workers", workers)
				}},
			shaper,
		}
	default:
		return []peerParty{
			{name: partyLoop, label: "hand-written: nats.go ChanSubscribe (1000 held) + x/time/rate Wait + net/http, 8 workers", readsBroker: true,
				start: func(id string) (party, error) {
					return startProcess(b.o.tmp, id, filepath.Join(b.bins, "loop"), "-source", "nats",
						"-nats", b.natsURL, "-subject", peerCoreSubject, "-sink", sink, "-rate", limit, "-workers", workers, "-buffer", "1000")
				}},
			shaper,
		}
	}
}

// shaperYAML is the pipelines block of the `shaper run` child of run id in
// case c: a consumer or group of its own, leaky at the case's limit,
// max_in_flight 8 and a bucket of 1000, as in the other sections.
func (b *peerBench) shaperYAML(c *PeerCase, id string) string {
	var source string
	switch peerSource(c.Name) {
	case peerJetStream:
		source = fmt.Sprintf("\n      nats: {url: %q, subject: %s, stream: %s, durable: %s}", b.natsURL, peerStreamIn, peerStream, id)
	case peerKafka:
		// The group timings of the loop's Kafka reader and the other sections'
		// children: a group on kfake forms in a second or two.
		source = fmt.Sprintf(`
      kafka:
        brokers: [%q]
        topic: %s
        group: %s
        session_timeout: 6s
        heartbeat_interval: 100ms
        rebalance_timeout: 2s
        max_wait: 200ms`, b.kafka, peerTopic, id)
	default:
		source = fmt.Sprintf("\n      nats: {url: %q, subject: %s}", b.natsURL, peerCoreSubject)
	}
	return fmt.Sprintf(`
  - name: peers
    source:%s
    bucket: {capacity: 1000, max_queue_time: 1m}
    rate: {mode: leaky, limit: %v}
    sink:
      http: {url: %q, max_in_flight: %d}
`, source, c.Limit, b.sink.callbackURL(), peerWorkers)
}

// measure runs party p of case c once, as run rep: it starts the party
// (and for core NATS the feed), waits for its first request at the sink
// and the warm-up, and measures the window.
func (b *peerBench) measure(ctx context.Context, c *PeerCase, p peerParty, rep int) (PeerRun, error) {
	id := fmt.Sprintf("%s-%s-%d", c.Name, p.name, rep)
	if err := b.sink.reset(); err != nil {
		return PeerRun{}, err
	}
	source := peerSource(c.Name)
	if source == peerJetStream && p.readsBroker {
		// After the party has stopped: an idle consumer holding unacked
		// messages would have the server redeliver them in later runs.
		defer func() { _ = b.js.DeleteConsumer(context.WithoutCancel(ctx), peerStream, id) }()
	}
	pr, err := p.start(id)
	if err != nil {
		return PeerRun{}, err
	}
	defer pr.stop(10 * time.Second)
	broker := b.natsServer
	switch source {
	case peerKafka:
		broker = b.kafkaServer
	case peerCore:
		feed := startNATSFeed(b.nc, peerCoreSubject, c.FeedRate)
		defer func() {
			if err := feed.stop(); err != nil {
				progress("peers: %s: the core NATS feed: %v", id, err)
			}
		}()
	}
	if err := b.sink.waitCount(ctx, 1, time.Minute); err != nil {
		return PeerRun{}, fmt.Errorf("%s: %w; its output:\n%s", p.label, err, pr.tail())
	}
	time.Sleep(b.warmup)
	t0, cpu0, broker0, sink0 := time.Now(), pr.cpu(), broker.cpu(), b.sink.cpu()
	time.Sleep(b.window)
	t1, cpu1, broker1, sink1 := time.Now(), pr.cpu(), broker.cpu(), b.sink.cpu()
	arr, wire, err := b.sink.arrivals()
	if err != nil {
		return PeerRun{}, err
	}
	if !p.readsBroker {
		broker1 = broker0
	}
	return peerRun(c.Limit, between(arr, t0, t1), between(wire, t0, t1), t1.Sub(t0), cpu1-cpu0, broker1-broker0, sink1-sink0), nil
}

// peerRun is the figures of a run from the sorted arrivals of its window
// (wire: their wire times, or nil), the window's length span and the CPU
// the party, the broker and the sink used in it.
func peerRun(limit float64, st, wire []time.Time, span, cpu, broker, sink time.Duration) PeerRun {
	r := PeerRun{Seconds: span.Seconds(), Delivered: len(st), PeerTiming: peerTiming(limit, st)}
	r.CPUPct = 100 * cpu.Seconds() / r.Seconds
	if r.Delivered > 0 {
		per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(r.Delivered) }
		r.CPUUs, r.BrokerUs, r.SinkUs = per(cpu), per(broker), per(sink)
	}
	if wire != nil {
		w := peerTiming(limit, wire)
		r.Wire = &w
	}
	return r
}

// peerTiming is the timing of the sorted arrivals st against limit.
func peerTiming(limit float64, st []time.Time) PeerTiming {
	t := PeerTiming{Rate: pacedRate(st)}
	t.RateErrPct = 100 * (t.Rate - limit) / limit
	t.Max100ms = window.Most(st, 100*time.Millisecond)
	t.JitterP50, t.JitterP99 = jitter(st, time.Duration(float64(time.Second)/limit))
	return t
}

// summarize takes each party's medians and their ratios to the baseline's.
func (c *PeerCase) summarize() {
	for i := range c.Parties {
		c.Parties[i].Median = medianRun(c.Parties[i].Runs)
	}
	base, ok := c.party(c.Baseline)
	if !ok {
		return
	}
	for i := range c.Parties {
		p := &c.Parties[i]
		if base.Median.CPUUs > 0 {
			p.CPURatio = p.Median.CPUUs / base.Median.CPUUs
		}
		if p.ReadsBroker && base.Median.BrokerUs > 0 {
			p.BrokerRatio = p.Median.BrokerUs / base.Median.BrokerUs
		}
	}
}

// party returns the case's party of that name.
func (c *PeerCase) party(name string) (PeerParty, bool) {
	for _, p := range c.Parties {
		if p.Name == name {
			return p, true
		}
	}
	return PeerParty{}, false
}

// medianRun holds the median of each figure of runs, each on its own.
func medianRun(runs []PeerRun) PeerRun {
	of := func(f func(PeerRun) float64) float64 { return medianOf(runs, f) }
	handler := make([]PeerTiming, len(runs))
	var wire []PeerTiming
	for i, r := range runs {
		handler[i] = r.PeerTiming
		if r.Wire != nil {
			wire = append(wire, *r.Wire)
		}
	}
	m := PeerRun{
		Seconds:    of(func(r PeerRun) float64 { return r.Seconds }),
		Delivered:  int(of(func(r PeerRun) float64 { return float64(r.Delivered) })),
		CPUUs:      of(func(r PeerRun) float64 { return r.CPUUs }),
		CPUPct:     of(func(r PeerRun) float64 { return r.CPUPct }),
		BrokerUs:   of(func(r PeerRun) float64 { return r.BrokerUs }),
		SinkUs:     of(func(r PeerRun) float64 { return r.SinkUs }),
		PeerTiming: medianTiming(handler),
	}
	if len(wire) > 0 && len(wire) == len(runs) { // a median of wire times needs them in every run
		w := medianTiming(wire)
		m.Wire = &w
	}
	return m
}

// medianTiming holds the median of each figure of ts, each on its own.
func medianTiming(ts []PeerTiming) PeerTiming {
	of := func(f func(PeerTiming) float64) float64 { return medianOf(ts, f) }
	return PeerTiming{
		Rate:       of(func(t PeerTiming) float64 { return t.Rate }),
		RateErrPct: of(func(t PeerTiming) float64 { return t.RateErrPct }),
		Max100ms:   int(of(func(t PeerTiming) float64 { return float64(t.Max100ms) })),
		JitterP50:  of(func(t PeerTiming) float64 { return t.JitterP50 }),
		JitterP99:  of(func(t PeerTiming) float64 { return t.JitterP99 }),
	}
}

// peerCPUGoalMaxLimit is the highest limit whose case has CPU goals: issue
// 17 sets them at 100/s and 1000/s, and at 5000/s only the precision's.
const peerCPUGoalMaxLimit = 1000

// goals are the peers section's goals (issue 17), for the report's table:
// for every case up to peerCPUGoalMaxLimit, shaper's CPU per message at
// most 0.6× the hand-written loop's and the broker's for shaper at most
// 1.2× the broker's for the loop; for every case, shaper's precision as the
// sink's process saw it.
func (s *PeersSection) goals() []Goal {
	var goals []Goal
	for _, c := range s.Cases {
		sh, ok := c.party(partyShaper)
		if !ok || len(sh.Runs) == 0 {
			continue
		}
		where := fmt.Sprintf("%s → HTTP at %v/s", c.Source, c.Limit)
		if base, ok := c.party(c.Baseline); ok && base.Median.CPUUs > 0 && c.Limit <= peerCPUGoalMaxLimit {
			goals = append(goals, Goal{
				Goal:     fmt.Sprintf("peers, %s: shaper's CPU per message ≤ 0.6× the hand-written loop's", where),
				Measured: fmt.Sprintf("%.2f× (%.0f µs against %.0f µs)", sh.CPURatio, sh.Median.CPUUs, base.Median.CPUUs),
				Met:      sh.CPURatio <= 0.6,
			})
			if base.Median.BrokerUs > 0 {
				measured := fmt.Sprintf("%.2f× (%.0f µs against %.0f µs)", sh.BrokerRatio, sh.Median.BrokerUs, base.Median.BrokerUs)
				if s.coarse(sh.Median.BrokerUs, sh.Median) || s.coarse(base.Median.BrokerUs, base.Median) {
					measured += "; under 10 clock ticks of CPU in the window, within their resolution"
				}
				goals = append(goals, Goal{
					Goal:     fmt.Sprintf("peers, %s: the broker's CPU per message for shaper ≤ 1.2× for the loop", where),
					Measured: measured,
					Met:      sh.BrokerRatio <= 1.2,
				})
			}
		}
		m, clock := sh.Median.precision()
		measured := m.text()
		if sh.Median.Wire != nil {
			measured += " (at the sink's handler: " + sh.Median.PeerTiming.text() + ")"
		}
		goals = append(goals, Goal{
			Goal:     fmt.Sprintf("peers, %s: shaper's rate error ≤ 0.1%%, at most %d in any 100 ms, jitter p99 ≤ 1 ms (%s)", where, c.Allowed100ms, clock),
			Measured: measured,
			Met:      math.Abs(m.RateErrPct) <= 0.1 && m.Max100ms <= c.Allowed100ms && m.JitterP99 <= 1000,
		})
	}
	return goals
}

// precision is the timing of r that the precision goal holds shaper to,
// and where it was taken: the wire times when the sink had them, which
// are when each request reached the sink's host; else the handler times,
// which add however late the system scheduled the sink's process.
func (r PeerRun) precision() (PeerTiming, string) {
	if r.Wire != nil {
		return *r.Wire, "on the wire at the sink's host"
	}
	return r.PeerTiming, "at the sink's handler"
}

// text writes t's rate error, most per 100 ms and jitter p99, as the
// goal and the table give them.
func (t PeerTiming) text() string {
	return fmt.Sprintf("%s, %d, %s", signedPct(t.RateErrPct), t.Max100ms, micros(t.JitterP99))
}

// markdown writes the peers section.
func (s *PeersSection) markdown(p func(string, ...any)) {
	p("## Peers")
	p("")
	p("What shaper costs beside what a user would run instead (issue 17). For each source, the loop a user would write by")
	p("hand (`bench/peers/loop`, one `-source` per broker), its variants, Benthos and a `shaper run` child deliver the")
	p("same %d-byte bodies to the same HTTP sink at the same limit, %d requests in flight at most: one party at a time,", s.BodyBytes, peerWorkers)
	p("every party of every case in turn, %d %s; the figures are the medians of a party's runs. Every party, the broker", s.Runs, map[bool]string{true: "time", false: "times"}[s.Runs == 1])
	p("(`bench/peers/broker`: nats-server with JetStream, or kfake) and the sink")
	cpuFrom := "utime + stime from `/proc/<pid>/stat`"
	if s.CPUClock == cpuClockProcess {
		cpuFrom = "CPU clock (clock_gettime of its CPUCLOCK, every thread, in ns)"
	}
	p("(`bench/peers/sink`, answering 200) are processes of their own. CPU is each process's %s", cpuFrom)
	p("over a window of %.0f s that starts %.0f s after the sink's first request, per request the sink", s.WindowSeconds, s.WarmupSeconds)
	p("received in the window; rate, spacing and jitter are of the arrivals that the sink's process recorded in it, by")
	p("two clocks. *On the wire* is the kernel's receive timestamp of each request's first bytes (SO_TIMESTAMPNS): when")
	p("it reached the sink's host, as a packet capture would show it; the precision goals are held to it. *At the handler*")
	p("is when the sink's handler ran: that adds however late the system scheduled the sink's process, which no party")
	p("controls (– where the sink had no wire times).")
	if m := s.MeasuredBy; m.Command != "" {
		p("Measured by `%s` (%s).", reproducible(m.Command), m.Date)
	}
	p("")
	p("- *× loop*: the ratio to the hand-written loop of the same source, measured in the same run (the case's first row).")
	p("- *broker CPU per message*: the broker's CPU while the party ran, per request; – for Benthos, which reads no broker.")
	p("- *rate error*: (n−1)/(t_n−t_1) over the window's arrivals, against the limit.")
	p("- *most per 100 ms*: the most arrivals in any 100 ms of the window; the goal is limit/10 + 2, at a sink in another process.")
	p("- *jitter p99*: the p99 of |gap − 1/limit| between consecutive arrivals.")
	p("")
	p("Each JetStream run reads the stream from its start with a durable consumer of its own (deleted after the run), each")
	p("Kafka run with a group of its own. Core NATS keeps nothing: the harness publishes a live feed at %.1f× the limit, and", peerFeedFactor)
	p("what a party cannot hold is dropped, by shaper's source (bucket 1000) and by the loop's client (a channel of 1000)")
	p("alike. Benthos core (%s) has no NATS or Kafka input (those are in Redpanda Connect), so its party generates its", benthosVersion)
	p("messages: it has no broker behind it, and its ratio is to a loop that has one. kfake is not Kafka: its CPU per")
	p("message is kfake's own, and only its ratio between parties tells something.")
	p("")
	p("%s", loadLine(s.Load))
	p("")
	p("| case | party | CPU per message (share of a core) | × loop | broker CPU per message | × loop | rate error | most per 100 ms (goal) | jitter p99 (goal ≤ 1 ms) | at the handler: rate error, most per 100 ms, jitter p99 |")
	p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	sinkLow, sinkHigh := math.Inf(1), 0.0
	flagged := false
	ticks := func(us float64, m PeerRun) string {
		if s.coarse(us, m) {
			flagged = true
			return fmt.Sprintf("%.0f µs†", us)
		}
		return fmt.Sprintf("%.0f µs", us)
	}
	for _, c := range s.Cases {
		for i, pt := range c.Parties {
			name := ""
			if i == 0 {
				name = fmt.Sprintf("%s → HTTP, %v/s", c.Source, c.Limit)
			}
			m := pt.Median
			broker, brokerRatio := "–", "–"
			if pt.ReadsBroker {
				broker, brokerRatio = ticks(m.BrokerUs, m), ratioText(pt.BrokerRatio)
			}
			t, _ := m.precision()
			handler := "–"
			if m.Wire != nil {
				handler = m.PeerTiming.text()
			}
			p("| %s | %s | %s (%.0f%%) | %s | %s | %s | %s | %s | %s | %s |", name, pt.Label, ticks(m.CPUUs, m), m.CPUPct, ratioText(pt.CPURatio),
				broker, brokerRatio, signedPct(t.RateErrPct),
				mark(fmt.Sprintf("%d (%d)", t.Max100ms, c.Allowed100ms), t.Max100ms > c.Allowed100ms),
				mark(micros(t.JitterP99), t.JitterP99 > 1000), handler)
			sinkLow, sinkHigh = math.Min(sinkLow, m.SinkUs), math.Max(sinkHigh, m.SinkUs)
		}
	}
	p("")
	if flagged {
		p("†: fewer than 10 clock ticks (%v) of CPU in the window. `/proc/<pid>/stat` counts in ticks of %v, so such a", fewTicks, clockTick)
		p("figure, and a ratio to it, is only as good as a tick either way.")
		p("")
	}
	if sinkHigh > 0 {
		p("The sink's own CPU per request ranged from %.0f to %.0f µs over the parties' medians (each party's is in", sinkLow, sinkHigh)
		p("benchmarks.json, beside every run's figures).")
		p("")
	}
}

// cpuClockProcess is PeersSection.CPUClock for figures read from each
// process's CPU clock (processCPU).
const cpuClockProcess = "process"

// fewTicks is the least CPU time a figure of the section is taken from
// before it is flagged: /proc/<pid>/stat counts in clock ticks, so below
// ten a figure is only as good as a tick either way.
const fewTicks = 10 * clockTick

// coarse reports whether us microseconds per message over run m's
// deliveries come to less than fewTicks of CPU counted in clock ticks
// (never for figures of the process CPU clock).
func (s *PeersSection) coarse(us float64, m PeerRun) bool {
	return s.CPUClock == "" && us*float64(m.Delivered) < float64(fewTicks.Microseconds())
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
func wireText(w *PeerTiming) string {
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
