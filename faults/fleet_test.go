package faults_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/kafkatest"
	"github.com/shaper-dev/shaper/internal/redistest"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
)

// The fleet tests run three `shaper run` replicas sharing one rate through
// a redis-server (rate.shared), consuming one Kafka topic of six partitions
// in one group, into one recording sink. Each replica sends to the sink's
// URL with its own query (?r=0, ?r=1, ?r=2), so the sink tells who sent
// what.
const (
	// fleetJitter is the arrival jitter allowed at the sink: more than the
	// suite's 30ms, since three replicas, kfake, redis-server and the
	// recording sink share two cores (seen: 43 in 100ms at load 15
	// with 30ms allowed, never a doubled lease).
	fleetJitter     = 50 * time.Millisecond
	fleetSize       = 3
	fleetPartitions = 6
	fleetLimit      = 300
	fleetTopic      = "fleet"
	fleetGroup      = "fleet"
	// fleetTimeout is rate.shared.timeout: the default (50ms). A replica
	// stopped longer than it (the stall test stops one for 100ms) must not
	// take the stop for a Redis that does not answer.
	fleetTimeout = 50 * time.Millisecond
)

// fleet is the servers and replicas of one fleet test.
type fleet struct {
	t        *testing.T
	kafka    *kafkatest.Cluster
	redis    *redistest.Server
	sink     *sinktest.Sink
	replicas []*childtest.Process
	admins   []string
	n        int // messages produced
}

// startFleet starts kfake, redis-server, the sink and the replicas;
// replica i reaches Redis at redisAddr(i). It returns once the group is
// stable with every replica in it, before any message is produced, so that
// no rebalance repeats a message.
func startFleet(t *testing.T, fallback int, redisAddr func(i int, redis string) string) *fleet {
	t.Helper()
	f := &fleet{t: t}
	f.kafka = kafkatest.Start(t, kfake.SeedTopics(fleetPartitions, fleetTopic))
	f.redis = redistest.Start(t)
	f.sink = sinktest.Start(t, sinktest.OK)
	for i := range fleetSize {
		config := childtest.WriteConfig(t, childtest.Pipeline{
			Source: kafkatest.SourceYAML(f.kafka.Addr, fleetTopic, fleetGroup, "commit_interval: 200ms"),
			Bucket: "{capacity: 200, max_queue_time: 2m}",
			Rate: fmt.Sprintf(`{limit: %d, shared: {redis: {addr: "%s"}, key: "shaper:fleet", fallback_limit: %d, timeout: %s}}`,
				fleetLimit, redisAddr(i, f.redis.Addr), fallback, fleetTimeout),
			Sink: fmt.Sprintf(`{http: {url: "%s?r=%d", max_in_flight: 8, timeout: 2s}}`, f.sink.URL, i),
		}.YAML())
		p := startShaper(t, fmt.Sprintf("replica %d", i), config)
		f.replicas = append(f.replicas, p)
	}
	for _, p := range f.replicas {
		f.admins = append(f.admins, p.Admin())
	}
	adm := kadm.NewClient(f.kafka.Client())
	defer adm.Close()
	testwait.For(t, time.Minute, "the group stable with every replica and partition", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		gs, err := adm.DescribeGroups(ctx, fleetGroup)
		if err != nil {
			return false
		}
		g := gs[fleetGroup]
		return g.State == "Stable" && len(g.Members) == fleetSize && len(g.AssignedPartitions()[fleetTopic]) == fleetPartitions
	})
	return f
}

// produce writes n records, spread evenly over the partitions.
func (f *fleet) produce(n int) {
	f.t.Helper()
	recs := kafkatest.Records(n)
	for i, r := range recs {
		r.Partition = int32(i % fleetPartitions)
	}
	f.kafka.Produce(fleetTopic, recs, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	f.n += n
}

// ids returns the id of every record produced (topic/partition/offset).
func (f *fleet) ids() []string {
	var ids []string
	for p := range fleetPartitions {
		for o := range (f.n + fleetPartitions - 1 - p) / fleetPartitions {
			ids = append(ids, fmt.Sprintf("%s/%d/%d", fleetTopic, p, o))
		}
	}
	return ids
}

// finish waits for every message to be delivered, stops the replicas
// (each drains and commits), waits for the group to have committed every
// record, and checks that each message was delivered exactly once.
func (f *fleet) finish() outcome {
	f.t.Helper()
	testwait.For(f.t, 3*time.Minute, "every message delivered", func() bool { return f.sink.DeliveredCount() >= f.n })
	for _, p := range f.replicas {
		p.Stop()
	}
	adm := kadm.NewClient(f.kafka.Client())
	defer adm.Close()
	var lag int64
	testwait.For(f.t, 30*time.Second, "the group to commit every record", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		committed, err := adm.FetchOffsets(ctx, fleetGroup)
		if err != nil {
			return false
		}
		ends, err := adm.ListEndOffsets(ctx, fleetTopic)
		if err != nil {
			return false
		}
		lag = 0
		ends.Each(func(o kadm.ListedOffset) {
			c, _ := committed.Lookup(fleetTopic, o.Partition)
			lag += o.Offset - max(c.At, 0)
		})
		return lag == 0
	})
	o := account(f.t, f.ids(), f.sink, nil)
	if o.duplicates > 0 {
		f.t.Errorf("%d duplicates (2xx answers beyond the first of a message): %v; want every message delivered once",
			o.duplicates, f.sink.Duplicates()[:min(10, len(f.sink.Duplicates()))])
	}
	return o
}

// scrape reads the metrics of every replica.
func (f *fleet) scrape() []childtest.Metrics {
	f.t.Helper()
	ms := make([]childtest.Metrics, len(f.admins))
	for i, a := range f.admins {
		m, err := childtest.Scrape(a)
		if err != nil {
			f.t.Fatalf("replica %d: /metrics: %v", i, err)
		}
		ms[i] = m
	}
	return ms
}

// arrivals returns, per replica, the arrival times at the sink of its
// requests in [from, to), and all of them together.
func (f *fleet) arrivals(from, to time.Time) (per [][]time.Time, all []time.Time) {
	per = make([][]time.Time, fleetSize)
	for _, r := range f.sink.Between(from, to) {
		for i := range fleetSize {
			if strings.HasSuffix(r.URI, fmt.Sprintf("?r=%d", i)) {
				per[i] = append(per[i], r.At)
			}
		}
		all = append(all, r.At)
	}
	return per, all
}

// rates returns len(ts)/d for each of ts.
func rates(d time.Duration, ts ...[]time.Time) []float64 {
	out := make([]float64, len(ts))
	for i, t := range ts {
		out[i] = float64(len(t)) / d.Seconds()
	}
	return out
}

// stopEvery stops p with SIGSTOP for off of every period, the way a CPU
// quota throttles a container, until halt is closed; it always leaves p
// running (SIGCONT). It returns when each stop ended.
func stopEvery(p *childtest.Process, off, period time.Duration, halt <-chan struct{}) []time.Time {
	tick := time.NewTicker(period)
	defer tick.Stop()
	var resumed []time.Time
	for {
		p.Signal(syscall.SIGSTOP)
		time.Sleep(off)
		p.Signal(syscall.SIGCONT)
		resumed = append(resumed, time.Now())
		select {
		case <-halt:
			return resumed
		case <-tick.C:
		}
	}
}

var logTime = regexp.MustCompile(`^time=(\S+) `)

// fallbackTimes returns when p logged that it fell back to its own limit.
func fallbackTimes(t *testing.T, p *childtest.Process) []time.Time {
	t.Helper()
	var out []time.Time
	for line := range strings.Lines(p.Stderr.String()) {
		if !strings.Contains(line, "falling back") {
			continue
		}
		m := logTime.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("no time in the log line %q", line)
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatalf("the time of the log line %q: %v", line, err)
		}
		out = append(out, at)
	}
	return out
}

// near reports whether one of ts lies in [at-before, at+after].
func near(ts []time.Time, at time.Time, before, after time.Duration) bool {
	for _, t := range ts {
		if !t.Before(at.Add(-before)) && !t.After(at.Add(after)) {
			return true
		}
	}
	return false
}

func TestFleetHoldsTheSharedRateWhileAReplicaIsStoppedEvery400ms(t *testing.T) {
	t.Parallel()
	const (
		n = 9000 // 30 s at the limit: the backlog outlasts the stalls
		// A small fallback_limit: a replica that falls back (a busy
		// machine) leaves the window bounds nearly as they are.
		fallback = 10
		stallFor = 20 * time.Second
		settle   = time.Second // after the first stop, before measuring
	)
	f := startFleet(t, fallback, func(_ int, redis string) string { return redis })
	f.produce(n)
	testwait.For(t, time.Minute, "the first deliveries", func() bool { return f.sink.DeliveredCount() >= fleetLimit })

	halt := make(chan struct{})
	var resumed []time.Time
	var wg sync.WaitGroup
	// The stalls end, and the replica runs, however the test ends.
	stopStalls := sync.OnceFunc(func() { close(halt); wg.Wait() })
	t.Cleanup(stopStalls)
	stallStart := time.Now()
	wg.Go(func() { resumed = stopEvery(f.replicas[0], 100*time.Millisecond, 400*time.Millisecond, halt) })
	time.Sleep(settle)
	from, before := time.Now(), f.scrape()
	time.Sleep(stallFor - settle)
	to, after := time.Now(), f.scrape()
	stopStalls()
	t.Logf("replica 0 stopped 100ms every 400ms: %d stops in %v", len(resumed), time.Since(stallStart).Round(time.Millisecond))

	o := f.finish()
	window := to.Sub(from)
	per, all := f.arrivals(from, to)
	rs := rates(window, per...)
	unused := make([]float64, fleetSize)
	var unusedAll float64
	fallbacks := make([]int, fleetSize)
	var others []time.Time // when replicas 1 and 2 fell back
	for i := range fleetSize {
		unused[i] = after[i].Sum("shaper_limiter_unused_total") - before[i].Sum("shaper_limiter_unused_total")
		unusedAll += unused[i]
		ts := fallbackTimes(t, f.replicas[i])
		fallbacks[i] = len(ts)
		if i > 0 {
			others = append(others, ts...)
		}
	}
	// A fallback of replica 0 as it resumed from a stop (within 100ms),
	// while the others did not fall back (within 200ms): the stop taken
	// for a Redis that did not answer.
	var byStop []time.Time
	for _, at := range fallbackTimes(t, f.replicas[0]) {
		if near(resumed, at, 100*time.Millisecond, 10*time.Millisecond) && !near(others, at, 200*time.Millisecond, 200*time.Millisecond) {
			byStop = append(byStop, at)
		}
	}
	got := float64(len(all)) / window.Seconds()
	leased := got + unusedAll/window.Seconds()
	everything := sinktest.Arrivals(f.sink.Requests())
	most100 := sinktest.MaxInWindow(everything, 100*time.Millisecond)
	most1s := sinktest.MaxInWindow(everything, time.Second)
	t.Logf("%d replicas sharing %d/s (race=%v) over %v while replica 0 stalls: %.1f/s at the sink (%.1f%%; per replica %.1f), unused slots %.0f (per replica %v, %.1f/s), delivered + unused %.1f/s (%.1f%%); most in 100 ms %d, in 1 s %d over the whole run; fallbacks per replica %v (of replica 0 as it resumed, alone: %d); %d delivered, %d lost, %d duplicates",
		fleetSize, fleetLimit, raceEnabled, window.Round(time.Millisecond), got, 100*got/fleetLimit, rs,
		unusedAll, unused, unusedAll/window.Seconds(), leased, 100*leased/fleetLimit, most100, most1s, fallbacks, len(byStop), len(o.delivered), len(o.lost), o.duplicates)

	slack := int(fleetLimit * fleetJitter.Seconds())
	// At the sink, under -race, the arrivals of a stalled fleet bunch by
	// more than the jitter allowed for one second: 50 in 100 ms against
	// 48 was seen once in CI, while the second around it held 303. The
	// 100 ms bound here only catches a doubled rate (twice limit/10); the
	// exact one is the limiter's own (TestSharedFleetDeliversTheLimitWhileAReplicaStalls
	// counts departures) and the bench's.
	if bound := 2 * fleetLimit / 10; most100 > bound {
		t.Errorf("%d requests arrived within 100 ms; want at most twice limit/10 = %d", most100, bound)
	}
	// The slots a stop strands are handed out again, up to one every
	// 100ms/(replicas − 1), so a second may hold those of the second
	// before it: 10 × (replicas − 1) on top.
	if bound := fleetLimit + fleetSize + 10*(fleetSize-1) + slack; most1s > bound {
		t.Errorf("%d requests arrived within 1 s; want at most limit + replicas + 10 × (replicas − 1) + %d = %d", most1s, slack, bound)
	}
	// Generous lower bounds: what the fleet delivered, and what it
	// leased of the shared schedule (delivered, or counted as unused: a
	// slot a replica let pass is counted, never silently lost).
	// A race-built fleet on a loaded machine wakes late often and lets
	// many slots pass (counted as unused); both tests at once under
	// -race have delivered 58%. The figures belong in the bench.
	if got < 0.45*fleetLimit {
		t.Errorf("the fleet delivered %.1f/s; want at least 45%% of the limit %d", got, fleetLimit)
	}
	if leased < 0.8*fleetLimit {
		t.Errorf("delivered + unused = %.1f/s; want at least 80%% of the limit %d: slots went missing uncounted", leased, fleetLimit)
	}
	// A busy machine can hold Redis or every replica past the timeout
	// (50ms) now and then; replicas then fall back together. A stop must
	// not add to that.
	if len(byStop) > 0 {
		t.Errorf("the stopped replica fell back to its own limit %d times as it resumed from a stop, alone (at %v); want never: a stop is no Redis outage",
			len(byStop), byStop)
	}
}

// proxy is a TCP proxy on loopback in front of one address, which the test
// can cut (every connection closed, new ones refused) and mend (listening
// again on the same address).
type proxy struct {
	t      *testing.T
	Addr   string
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	p := &proxy{t: t, target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: listen: %v", err)
	}
	p.Addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(func() { p.cut(); p.wg.Wait() })
	return p
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // cut
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			if !p.track(c, up) {
				continue
			}
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				_ = dst.Close()
				_ = src.Close()
			}
			p.wg.Go(func() { pipe(up, c) })
			p.wg.Go(func() { pipe(c, up) })
		}
	})
}

// track records a proxied pair of connections, or closes them if the
// proxy was cut meanwhile.
func (p *proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = true
	}
	return true
}

// cut closes the listener and every connection: the replica behind the
// proxy has lost Redis (new connections are refused).
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// mend listens again on the proxy's address.
func (p *proxy) mend() {
	p.t.Helper()
	var ln net.Listener
	var err error
	if !testwait.Until(5*time.Second, func() bool { ln, err = net.Listen("tcp", p.Addr); return err == nil }) {
		p.t.Fatalf("proxy: listen again on %s: %v", p.Addr, err)
	}
	p.serve(ln)
}

func TestFleetKeepsTheSharedRateWhenAReplicaLosesRedisAndItFallsBack(t *testing.T) {
	t.Parallel()
	const (
		n        = 9000
		fallback = 50
		cutFor   = 8 * time.Second        // measured
		settle   = 500 * time.Millisecond // after the fallback, before measuring
	)
	var px *proxy
	f := startFleet(t, fallback, func(i int, redis string) string {
		if i > 0 {
			return redis
		}
		px = startProxy(t, redis)
		return px.Addr
	})
	f.produce(n)
	testwait.For(t, time.Minute, "the first deliveries", func() bool { return f.sink.DeliveredCount() >= 2*fleetLimit })

	px.cut()
	cutAt := time.Now()
	f.replicas[0].WaitMetrics(10*time.Second, "replica 0 on its fallback limit", func(m childtest.Metrics) bool {
		return m.Sum("shaper_limiter_fallback") == 1
	})
	fellBack := time.Since(cutAt)
	if code, body := readyz(f.admins[0]); code != http.StatusOK {
		t.Errorf("replica 0's /readyz on its fallback limit = %d %q; want 200: it still delivers", code, body)
	}
	// Measured from a while after the fallback, not from the cut.
	time.Sleep(time.Until(cutAt.Add(fellBack).Add(settle)))
	from := time.Now()
	time.Sleep(time.Until(from.Add(cutFor)))
	to, during := time.Now(), f.scrape()
	// Replicas 1 and 2 may fall back for a moment now and then on a busy
	// machine (Redis or they held past the 50ms timeout); their rate is
	// checked below. Replica 0 must still be on its own limit.
	if got := during[0].Sum("shaper_limiter_fallback"); got != 1 {
		t.Errorf("replica 0: shaper_limiter_fallback = %v while cut off from Redis; want 1", got)
	}

	px.mend()
	mended := time.Now()
	f.replicas[0].WaitMetrics(15*time.Second, "replica 0 back on the shared limit", func(m childtest.Metrics) bool {
		return m.Sum("shaper_limiter_fallback") == 0
	})
	back := time.Since(mended)
	o := f.finish()

	window := to.Sub(from)
	per, all := f.arrivals(from, to)
	rs := rates(window, per...)
	shared := append(append([]time.Time(nil), per[1]...), per[2]...)
	unused := during[1].Sum("shaper_limiter_unused_total") + during[2].Sum("shaper_limiter_unused_total")
	most100Shared := sinktest.MaxInWindow(shared, 100*time.Millisecond)
	most100Cut := sinktest.MaxInWindow(per[0], 100*time.Millisecond)
	most1sCut := sinktest.MaxInWindow(per[0], time.Second)
	most1s := sinktest.MaxInWindow(all, time.Second)
	t.Logf("replica 0 cut off from Redis: on its fallback limit after %v, back on the shared limit %v after Redis was reachable again; over %v of the cut: replica 0 %.1f/s (fallback_limit %d), replicas 1 and 2 %.1f/s together (%.1f, %.1f; limit %d), fleet %.1f/s; most in 100 ms: replica 0 %d, replicas 1 and 2 %d; replica 0 most in 1 s %d; fleet most in 1 s %d; unused slots of replicas 1 and 2 over the run %.0f; %d delivered, %d lost, %d duplicates",
		fellBack.Round(time.Millisecond), back.Round(time.Millisecond), window.Round(time.Millisecond), rs[0], fallback,
		rs[1]+rs[2], rs[1], rs[2], fleetLimit, float64(len(all))/window.Seconds(), most100Cut, most100Shared, most1sCut, most1s, unused,
		len(o.delivered), len(o.lost), o.duplicates)

	slack := int(fleetLimit * fleetJitter.Seconds())
	catchUp := (fleetLimit*2 + 999) / 1000 // a replica sends the slots of a wake-up up to 2 ms late at once
	if bound := fleetLimit/10 + fleetSize - 1 + catchUp + slack; most100Shared > bound {
		t.Errorf("replicas 1 and 2 sent %d requests within 100 ms; want at most limit/10 + 2 + %d (2 ms of catch-up) + %d (arrival jitter) = %d", most100Shared, catchUp, slack, bound)
	}
	// Replica 0 alone at 50/s: a busy machine bunches its arrivals at
	// the sink by more than a 100ms window's 5, so its bound is per second.
	if bound := fallback + 1 + slack; most1sCut > bound {
		t.Errorf("replica 0 sent %d requests within 1 s on its fallback limit; want at most fallback_limit + 1 + %d = %d", most1sCut, slack, bound)
	}
	// Slots replicas 1 and 2 let pass are handed out again, as in the
	// stalled fleet: a second may hold 10 × (replicas − 1) more.
	if bound := fleetLimit + fallback + fleetSize + 10*(fleetSize-1) + slack; most1s > bound {
		t.Errorf("the fleet sent %d requests within 1 s with replica 0 on its fallback; want at most limit + fallback_limit + replicas + 10 × (replicas − 1) + %d = %d", most1s, slack, bound)
	}
	if rs[0] < 0.7*fallback || rs[0] > 1.1*fallback {
		t.Errorf("replica 0 sent %.1f/s cut off from Redis; want its fallback_limit %d (-30%% +10%%)", rs[0], fallback)
	}
	if rs[1]+rs[2] < 0.45*fleetLimit {
		t.Errorf("replicas 1 and 2 sent %.1f/s together; want at least 45%% of the limit %d", rs[1]+rs[2], fleetLimit)
	}
}
