package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/bench/peers/peer"
)

// PeersSection is what shaper costs beside what a user would run
// instead: for each source, the loop a user would write by hand, its
// variants, Benthos and a `shaper run` child deliver the same messages to
// the same sink at the same limit, one after the other in one run. Every
// party, the broker and the sink are processes of their own, so each one's
// CPU is measured alone, and every request is timed by the sink's process,
// as a receiver would see it.
type PeersSection struct {
	Common
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
}

// PeerCase is one source delivered to HTTP at one limit by several
// parties.
type PeerCase struct {
	// Name is the source and the limit, such as jetstream-1000: its part
	// before the '-' is peerJetStream, peerKafka or peerCore.
	Name   string  `json:"name"`
	Source string  `json:"source"`
	Limit  float64 `json:"limit"`
	// HTTPS is set when the sink is served over TLS (HTTP/1.1): the path
	// most users' callbacks take.
	HTTPS bool `json:"https,omitempty"`
	// Backlog is how many messages the broker held before the first run;
	// every run reads them from the start with a consumer or group of its
	// own. A core NATS case has none: FeedRate is the rate of its live
	// feed.
	Backlog  int     `json:"backlog,omitempty"`
	FeedRate float64 `json:"feed_rate,omitempty"`
	// Allowed100ms is the most arrivals in any 100 ms that the goal
	// allows: limit/10 + 2 when measured at a sink in another process.
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
// received in it and the CPU each process used (its process CPU clock).
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
	Timing
	Wire *Timing `json:"wire,omitempty"`
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
	partyShaperOff     = "shaper-tuning-off"
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

func runPeers(ctx context.Context, b *bench) (_ *PeersSection, err error) {
	s := &PeersSection{Runs: 3, WarmupSeconds: 2, WindowSeconds: 8, BodyBytes: peer.Size}
	if _, err := processCPU(os.Getpid()); err != nil {
		return nil, err // every process's CPU is read from its CPU clock
	}
	if b.o.quick {
		s.Runs, s.WarmupSeconds, s.WindowSeconds = 1, 1, 2
	}
	progress("peers: building the peers' programs and Benthos")
	bins := filepath.Join(b.o.tmp, "peers")
	if err := buildPeers(ctx, b, bins, peerPrograms...); err != nil {
		return nil, err
	}
	cases := slices.DeleteFunc([]PeerCase{
		{Name: "jetstream-1000", Source: "NATS JetStream", Limit: 1000},
		{Name: "jetstream-100", Source: "NATS JetStream", Limit: 100},
		{Name: "kafka-1000", Source: "Kafka (kfake)", Limit: 1000},
		{Name: "core-1000", Source: "core NATS", Limit: 1000},
		{Name: "jetstream-5000", Source: "NATS JetStream", Limit: 5000},
		{Name: "jetstream-https-1000", Source: "NATS JetStream", Limit: 1000, HTTPS: true},
		{Name: "jetstream-https-100", Source: "NATS JetStream", Limit: 100, HTTPS: true},
	}, func(c PeerCase) bool { return len(b.o.peerCases) > 0 && !b.o.peerCases[c.Name] })
	if len(cases) == 0 {
		return nil, fmt.Errorf("-peer-cases: no case named %v", slices.Collect(maps.Keys(b.o.peerCases)))
	}
	fastest := slices.MaxFunc(cases, func(a, b PeerCase) int { return cmp.Compare(a.Limit, b.Limit) }).Limit
	backlogN := int(fastest * (s.WarmupSeconds + s.WindowSeconds + peerBacklogSeconds))
	progress("peers: starting the sink, nats-server and kfake, each a process; %d messages into each broker", backlogN)
	pb, err := startPeerBench(ctx, b, bins, backlogN)
	if err != nil {
		return nil, err
	}
	defer pb.close() // on an error; closed below before the load is measured
	pb.warmup = time.Duration(s.WarmupSeconds * float64(time.Second))
	pb.window = time.Duration(s.WindowSeconds * float64(time.Second))
	parties := make([][]peerParty, len(cases))
	for i := range cases {
		c := &cases[i]
		c.Allowed100ms = int(c.Limit/10) + 2
		c.Baseline = partyLoop
		if peerSource(c.Name) == peerCore {
			c.FeedRate = peerFeedFactor * c.Limit
		} else {
			c.Backlog = backlogN
		}
		parties[i] = pb.parties(c)
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
				r, err := pb.measure(ctx, c, p, rep)
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
	pb.close()
	return s, nil
}

// scheme is how the case's sink is reached: HTTP or HTTPS.
func (c *PeerCase) scheme() string {
	if c.HTTPS {
		return "HTTPS"
	}
	return "HTTP"
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
	start       func(id string) (*proc, error)
}

// peerPrograms are what the peers section runs besides shaper: the
// programs of bench/peers, and Benthos, built from its own module in
// bench/peers/benthos.
var peerPrograms = []string{"sink", "broker", "loop", "benthos"}

// benthosVersion is the Benthos core that bench/peers/benthos/go.mod asks
// for.
const benthosVersion = "v4.60.0"

// buildPeers builds the named programs of peerPrograms into dir, the ones
// of bench/peers with one go build and Benthos with another in its module.
func buildPeers(ctx context.Context, b *bench, dir string, programs ...string) error {
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, p := range programs {
		if p != "benthos" {
			args = append(args, "./bench/peers/"+p)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if _, err := b.goCmd(ctx, b.o.root, args...); err != nil || !slices.Contains(programs, "benthos") {
		return err
	}
	_, err := b.goCmd(ctx, filepath.Join(b.o.root, "bench", "peers", "benthos"), "build", "-o", filepath.Join(dir, "benthos"), ".")
	return err
}

// peerBench is the section's fixed parts: the programs, the sink and the
// brokers, each a process that lives through every run, and the harness's
// own NATS connection, which feeds the core NATS case and removes each
// run's JetStream consumer.
type peerBench struct {
	b              *bench
	bins           string
	sink           *peerSink
	tlsSink        *peerSink // the same served over TLS, its certificate in tlsCA
	tlsCA          string
	natsServer     *proc
	kafkaServer    *proc
	natsURL, kafka string
	nc             *nats.Conn
	js             jetstream.JetStream
	warmup, window time.Duration
}

func startPeerBench(ctx context.Context, b *bench, bins string, backlogN int) (_ *peerBench, err error) {
	pb := &peerBench{b: b, bins: bins}
	defer func() {
		if err != nil {
			pb.close()
		}
	}()
	if pb.sink, err = startPeerSink(ctx, b.o.tmp, filepath.Join(bins, "sink"), ""); err != nil {
		return nil, err
	}
	pb.tlsCA = filepath.Join(b.o.tmp, "peers-sink-ca.pem")
	if pb.tlsSink, err = startPeerSink(ctx, b.o.tmp, filepath.Join(bins, "sink"), pb.tlsCA); err != nil {
		return nil, err
	}
	n, broker := strconv.Itoa(backlogN), filepath.Join(bins, "broker")
	if pb.natsServer, pb.natsURL, err = startReady(ctx, b.o.tmp, "peers-natsserver", broker,
		"-kind", "nats", "-stream", peerStream, "-subject", peerStreamIn, "-backlog", n); err != nil {
		return nil, err
	}
	if pb.kafkaServer, pb.kafka, err = startReady(ctx, b.o.tmp, "peers-kafkaserver", broker,
		"-kind", "kafka", "-topic", peerTopic, "-partitions", strconv.Itoa(kafkaPartitions), "-backlog", n); err != nil {
		return nil, err
	}
	if pb.nc, err = nats.Connect(pb.natsURL); err != nil {
		return nil, fmt.Errorf("nats connect %s: %w", pb.natsURL, err)
	}
	pb.js, err = jetstream.New(pb.nc)
	return pb, err
}

// close ends every process and the connection; it may be called again.
func (pb *peerBench) close() {
	if pb.nc != nil {
		pb.nc.Close()
		pb.nc = nil
	}
	for _, p := range []**proc{&pb.natsServer, &pb.kafkaServer} {
		if *p != nil {
			(*p).stop(10 * time.Second)
			*p = nil
		}
	}
	for _, s := range []**peerSink{&pb.sink, &pb.tlsSink} {
		if *s != nil {
			(*s).close()
			*s = nil
		}
	}
}

// sinkOf is the sink of case c: over TLS for an HTTPS case.
func (pb *peerBench) sinkOf(c *PeerCase) *peerSink {
	if c.HTTPS {
		return pb.tlsSink
	}
	return pb.sink
}

// parties are the programs that deliver case c, the baseline first.
func (pb *peerBench) parties(c *PeerCase) []peerParty {
	limit := strconv.FormatFloat(c.Limit, 'f', -1, 64)
	sink := pb.sinkOf(c)
	// loop starts bench/peers/loop with env and the arguments of its
	// source, which name its consumer or group after the run.
	loop := func(env []string, source func(id string) []string) func(id string) (*proc, error) {
		return func(id string) (*proc, error) {
			args := append([]string{"-sink", sink.callbackURL(), "-rate", limit, "-workers", strconv.Itoa(peerWorkers)}, source(id)...)
			if c.HTTPS {
				args = append(args, "-ca", pb.tlsCA)
			}
			return startProc(pb.b.o.tmp, id, filepath.Join(pb.bins, "loop"), env, args...)
		}
	}
	shaper := peerParty{name: partyShaper, label: "shaper run, leaky, max_in_flight 8, bucket 1000 (GOMAXPROCS as it sets it: 1 up to 500/s)", readsBroker: true,
		start: func(id string) (*proc, error) { return pb.b.startShaper(id, pb.shaperYAML(c, id)) }}
	shaperOff := peerParty{name: partyShaperOff, label: "the same with SHAPER_TUNING=off (Go timers, GOMAXPROCS and GOGC the runtime's, net.Conn as dialled)", readsBroker: true,
		start: func(id string) (*proc, error) {
			return pb.b.startShaper(id, pb.shaperYAML(c, id), "SHAPER_TUNING=off")
		}}
	// js is the loop's arguments for the JetStream stream, and extra.
	js := func(extra ...string) func(string) []string {
		return func(id string) []string {
			return append([]string{"-source", "jetstream", "-nats", pb.natsURL, "-stream", peerStream, "-consumer", id}, extra...)
		}
	}
	if c.HTTPS {
		return []peerParty{{name: partyLoop, label: "hand-written: nats.go jetstream Consume + x/time/rate Wait + net/http over TLS, 8 workers, Ack after a 2xx", readsBroker: true,
			start: loop(nil, js())}, shaper, shaperOff}
	}
	switch peerSource(c.Name) {
	case peerJetStream:
		return []peerParty{
			{name: partyLoop, label: "hand-written: nats.go jetstream Consume + x/time/rate Wait + net/http, 8 workers, Ack after a 2xx", readsBroker: true,
				start: loop(nil, js())},
			{name: partyLoopDoubleAck, label: "the same with DoubleAck (a reply awaited for every ack)", readsBroker: true,
				start: loop(nil, js("-double-ack"))},
			{name: partyLoopOneP, label: "the same (Ack) at GOMAXPROCS=1, the threads shaper takes up to 500/s", readsBroker: true,
				start: loop([]string{"GOMAXPROCS=1"}, js())},
			{name: partyBenthos, label: fmt.Sprintf("Benthos core %s: generate → local rate_limit (1 per %v) → http_client, max_in_flight 8 (no broker)", benthosVersion, peerInterval(c.Limit)),
				start: func(id string) (*proc, error) {
					path, err := writeBenthosConfig(pb.b.o.tmp, id, c.Limit, sink.callbackURL())
					if err != nil {
						return nil, err
					}
					return startProc(pb.b.o.tmp, id, filepath.Join(pb.bins, "benthos"), nil, "-c", path)
				}},
			shaper,
			shaperOff,
		}
	case peerKafka:
		return []peerParty{{name: partyLoop, label: "hand-written: kafka-go group Reader (FetchMessage, CommitMessages every 1s) + x/time/rate Wait + net/http, 8 workers", readsBroker: true,
			start: loop(nil, func(id string) []string {
				return []string{"-source", "kafka", "-brokers", pb.kafka, "-topic", peerTopic, "-group", id}
			})}, shaper}
	}
	return []peerParty{{name: partyLoop, label: "hand-written: nats.go ChanSubscribe (1000 held) + x/time/rate Wait + net/http, 8 workers", readsBroker: true,
		start: loop(nil, func(string) []string {
			return []string{"-source", "nats", "-nats", pb.natsURL, "-subject", peerCoreSubject, "-buffer", "1000"}
		})}, shaper}
}

// shaperYAML is the pipelines block of the `shaper run` child of run id in
// case c: a consumer or group of its own, leaky at the case's limit,
// max_in_flight 8 and a bucket of 1000, as in the other sections.
func (pb *peerBench) shaperYAML(c *PeerCase, id string) string {
	source := natsSourceYAML(pb.natsURL, peerCoreSubject, "", "")
	switch peerSource(c.Name) {
	case peerJetStream:
		source = natsSourceYAML(pb.natsURL, peerStreamIn, peerStream, id)
	case peerKafka:
		// The group timings of the loop's Kafka reader and the other
		// sections' children.
		source = kafkaSourceYAML(pb.kafka, peerTopic, id, true)
	}
	tls := ""
	if c.HTTPS {
		tls = fmt.Sprintf(", tls: {ca_file: %q}", pb.tlsCA)
	}
	return pipelineYAML("peers", source, "bucket: {capacity: 1000, max_queue_time: 1m}", fmt.Sprintf("rate: {mode: leaky, limit: %v}", c.Limit),
		fmt.Sprintf("sink: {http: {url: %q, max_in_flight: %d%s}}", pb.sinkOf(c).callbackURL(), peerWorkers, tls))
}

// measure runs party p of case c once, as run rep: it starts the party
// (and for core NATS the feed), waits for its first request at the sink
// and the warm-up, and measures the window.
func (pb *peerBench) measure(ctx context.Context, c *PeerCase, p peerParty, rep int) (PeerRun, error) {
	id := fmt.Sprintf("%s-%s-%d", c.Name, p.name, rep)
	sink := pb.sinkOf(c)
	if _, err := sink.call(http.MethodPost, "/reset"); err != nil {
		return PeerRun{}, err
	}
	source := peerSource(c.Name)
	if source == peerJetStream && p.readsBroker {
		// After the party has stopped: an idle consumer holding unacked
		// messages would have the server redeliver them in later runs.
		defer func() { _ = pb.js.DeleteConsumer(context.WithoutCancel(ctx), peerStream, id) }()
	}
	pr, err := p.start(id)
	if err != nil {
		return PeerRun{}, err
	}
	defer pr.stop(10 * time.Second)
	broker := pb.natsServer
	switch source {
	case peerKafka:
		broker = pb.kafkaServer
	case peerCore:
		feed := startNATSFeed(pb.nc, peerCoreSubject, c.FeedRate)
		defer func() {
			if err := feed.stop(); err != nil {
				progress("peers: %s: the core NATS feed: %v", id, err)
			}
		}()
	}
	if err := pr.wait(ctx, time.Minute, func() bool { h, _, err := sink.arrivals(); return err == nil && len(h) > 0 }); err != nil {
		return PeerRun{}, fmt.Errorf("%s: no request at the sink: %w", p.label, err)
	}
	time.Sleep(pb.warmup)
	t0, cpu0, broker0, sink0 := time.Now(), pr.cpu(), broker.cpu(), sink.cpu()
	time.Sleep(pb.window)
	t1, cpu1, broker1, sink1 := time.Now(), pr.cpu(), broker.cpu(), sink.cpu()
	arr, wire, err := sink.arrivals()
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
	r := PeerRun{Seconds: span.Seconds(), Delivered: len(st), Timing: timing(limit, st)}
	r.CPUPct = 100 * cpu.Seconds() / r.Seconds
	n := int64(r.Delivered)
	r.CPUUs, r.BrokerUs, r.SinkUs = perMessage(cpu, n), perMessage(broker, n), perMessage(sink, n)
	if wire != nil {
		w := timing(limit, wire)
		r.Wire = &w
	}
	return r
}

// summarize takes each party's medians and their ratios to the baseline's.
func (c *PeerCase) summarize() {
	for i := range c.Parties {
		c.Parties[i].Median = medianRun(c.Parties[i].Runs)
	}
	base, ok := find(c.Parties, c.Baseline)
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

// medianRun holds the median of each figure of runs, each on its own.
func medianRun(runs []PeerRun) PeerRun {
	of := func(f func(PeerRun) float64) float64 { return medianOf(runs, f) }
	handler := make([]Timing, len(runs))
	var wire []Timing
	for i, r := range runs {
		handler[i] = r.Timing
		if r.Wire != nil {
			wire = append(wire, *r.Wire)
		}
	}
	m := PeerRun{
		Seconds:   of(func(r PeerRun) float64 { return r.Seconds }),
		Delivered: int(of(func(r PeerRun) float64 { return float64(r.Delivered) })),
		CPUUs:     of(func(r PeerRun) float64 { return r.CPUUs }),
		CPUPct:    of(func(r PeerRun) float64 { return r.CPUPct }),
		BrokerUs:  of(func(r PeerRun) float64 { return r.BrokerUs }),
		SinkUs:    of(func(r PeerRun) float64 { return r.SinkUs }),
		Timing:    medianTiming(handler),
	}
	if len(wire) > 0 && len(wire) == len(runs) { // a median of wire times needs them in every run
		w := medianTiming(wire)
		m.Wire = &w
	}
	return m
}

// medianTiming holds the median of each figure of ts, each on its own.
func medianTiming(ts []Timing) Timing {
	of := func(f func(Timing) float64) float64 { return medianOf(ts, f) }
	return Timing{
		Rate:       of(func(t Timing) float64 { return t.Rate }),
		RateErrPct: of(func(t Timing) float64 { return t.RateErrPct }),
		Max100ms:   int(of(func(t Timing) float64 { return float64(t.Max100ms) })),
		JitterP50:  of(func(t Timing) float64 { return t.JitterP50 }),
		JitterP99:  of(func(t Timing) float64 { return t.JitterP99 }),
	}
}

// peerSink is the sink program (bench/peers/sink) running as a child, and
// the client that reads and clears its record of arrivals.
type peerSink struct {
	*proc
	url    string // its base URL
	client *http.Client
}

// startPeerSink starts bench/peers/sink; with caFile, over TLS, writing
// the certificate to trust there.
func startPeerSink(ctx context.Context, dir, bin, caFile string) (*peerSink, error) {
	name, args := "peers-sink", []string(nil)
	if caFile != "" {
		name, args = "peers-sink-tls", []string{"-tls", caFile}
	}
	p, url, err := startReady(ctx, dir, name, bin, args...)
	if err != nil {
		return nil, err
	}
	// Its own transport, so that closing it leaves no connection behind.
	t := &http.Transport{}
	if caFile != "" {
		ca, err := os.ReadFile(caFile)
		roots := x509.NewCertPool()
		if err != nil || !roots.AppendCertsFromPEM(ca) {
			p.stop(10 * time.Second)
			return nil, fmt.Errorf("the TLS sink's certificate in %s: %v", caFile, err)
		}
		t.TLSClientConfig = &tls.Config{RootCAs: roots}
	}
	return &peerSink{proc: p, url: url, client: &http.Client{Timeout: 30 * time.Second, Transport: t}}, nil
}

// callbackURL is where the parties send their requests.
func (s *peerSink) callbackURL() string { return s.url + "/callback" }

// call sends a request to one of the sink's record endpoints and returns
// the body of its 2xx answer.
func (s *peerSink) call(method, path string) ([]byte, error) {
	req, err := http.NewRequest(method, s.url+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("sink %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("sink %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("sink %s %s: %s", method, path, resp.Status)
	}
	return body, nil
}

// arrivals returns the arrivals the sink holds, in order: their handler
// times, and their wire times (nil unless the sink had one for every
// arrival; see bench/peers/sink).
func (s *peerSink) arrivals() (handler, wire []time.Time, err error) {
	body, err := s.call(http.MethodGet, "/arrivals")
	if err != nil {
		return nil, nil, err
	}
	stamped := true
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		at, w, _ := strings.Cut(sc.Text(), " ")
		ns, err := strconv.ParseInt(at, 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("sink /arrivals: %w", err)
		}
		wns, err := strconv.ParseInt(w, 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("sink /arrivals: %w", err)
		}
		handler = append(handler, time.Unix(0, ns))
		wire = append(wire, time.Unix(0, wns))
		stamped = stamped && wns != 0
	}
	if !stamped {
		wire = nil
	}
	sortTimes(handler) // the handlers record concurrently
	sortTimes(wire)
	return handler, wire, nil
}

func (s *peerSink) close() {
	s.client.CloseIdleConnections()
	s.stop(10 * time.Second)
}

// natsFeed publishes backlog bodies to a core NATS subject at a steady
// rate from the harness, whose CPU is no party's: core NATS keeps nothing,
// so the core NATS case's parties read a live feed.
type natsFeed struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // the publish that failed, if one did; read after done
}

// feedTick is how often the feed publishes what has come due.
const feedTick = 5 * time.Millisecond

func startNATSFeed(nc *nats.Conn, subject string, rate float64) *natsFeed {
	ctx, cancel := context.WithCancel(context.Background())
	f := &natsFeed{cancel: cancel, done: make(chan struct{})}
	go f.run(ctx, nc, subject, rate)
	return f
}

// run publishes, every feedTick, the messages due by then at rate since
// it started.
func (f *natsFeed) run(ctx context.Context, nc *nats.Conn, subject string, rate float64) {
	defer close(f.done)
	start := time.Now()
	timer := time.NewTimer(feedTick)
	defer timer.Stop()
	for sent, tick := 0, 1; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		for due := int(rate * time.Since(start).Seconds()); sent < due; sent++ {
			if err := nc.Publish(subject, peer.Body(sent)); err != nil {
				f.err = fmt.Errorf("publish to %s: %w", subject, err)
				return
			}
		}
		timer.Reset(time.Until(start.Add(time.Duration(tick+1) * feedTick)))
	}
}

// stop ends the feed and returns its error, if it had one.
func (f *natsFeed) stop() error {
	f.cancel()
	<-f.done
	return f.err
}

// peerInterval is one request's share of a second at limit: the interval
// of a local rate limit of count 1.
func peerInterval(limit float64) time.Duration {
	return time.Duration(float64(time.Second) / limit)
}

// writeBenthosConfig writes the config of the Benthos party of run id to
// dir and returns its path: the generate input producing peer.Body(0)
// as fast as the output takes it, a local rate_limit resource of one
// request per 1/limit, and the http_client output with 8 requests in
// flight. Its HTTP server (which would listen on 0.0.0.0:4195) is off.
func writeBenthosConfig(dir, id string, limit float64, url string) (string, error) {
	config := fmt.Sprintf(`http:
  enabled: false
logger:
  level: WARN
shutdown_timeout: 2s
input:
  generate:
    interval: ""
    mapping: 'root = %s'
rate_limit_resources:
  - label: sink
    local:
      count: 1
      interval: %v
output:
  http_client:
    url: %q
    verb: POST
    headers:
      Content-Type: application/json
    rate_limit: sink
    max_in_flight: %d
`, strconv.Quote(string(peer.Body(0))), peerInterval(limit), url, peerWorkers)
	path := filepath.Join(dir, id+".yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return "", err
	}
	return path, nil
}
