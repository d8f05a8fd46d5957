package shaper

import (
	"errors"
	"slices"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcome is the final outcome of a message, the outcome label of
// shaper_messages_completed_total.
type Outcome string

// Outcomes of a message.
const (
	OutcomeDelivered    Outcome = "delivered"
	OutcomeDeadLettered Outcome = "dead_lettered"
	OutcomeExpired      Outcome = "expired"
	OutcomeDropped      Outcome = "dropped"
)

// outcomes lists every Outcome, in the order of Pipeline.count.
var outcomes = [4]Outcome{OutcomeDelivered, OutcomeDeadLettered, OutcomeExpired, OutcomeDropped}

// NackReason says why a message was handed back to its source, the reason
// label of shaper_messages_nacked_total.
type NackReason string

// Reasons for a nack.
const (
	NackShutdown         NackReason = "shutdown"           // a stop left it without a final outcome
	NackRevoked          NackReason = "revoked"            // the source took it back (a rebalance)
	NackNoDeadLetter     NackReason = "no_dead_letter"     // it failed and there is no dead-letter target
	NackDeadLetterFailed NackReason = "dead_letter_failed" // it failed and so did its dead letter
	NackLaneFull         NackReason = "lane_full"          // its key's lane held per_key_capacity already
)

// RequestCode is the code label of shaper_requests_total for what a Send
// returned: "ok" for success, the status of a *StatusError, "error" for
// any other error, and "" when no request was made (ErrNotSent), which is
// not counted.
func RequestCode(err error) string {
	var status *StatusError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrNotSent):
		return ""
	case errors.As(err, &status):
		return strconv.Itoa(status.Code)
	}
	return "error"
}

// Metrics are the Prometheus metrics of every pipeline in a process (docs/operations.md),
// each labelled with its pipeline. Register them once with NewMetrics and
// pass the same Metrics to every pipeline.
type Metrics struct {
	received        *prometheus.CounterVec
	completed       *prometheus.CounterVec
	nacked          *prometheus.CounterVec
	requests        *prometheus.CounterVec
	requestDuration *prometheus.HistogramVec
	queueWait       *prometheus.HistogramVec
	retries         *prometheus.CounterVec
	depth           *prometheus.GaugeVec
	capacity        *prometheus.GaugeVec
	inFlight        *prometheus.GaugeVec
	dropped         *prometheus.CounterVec
	live            *liveCollector
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns = "shaper"
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help},
			append([]string{"pipeline"}, labels...))
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help}, []string{"pipeline"})
	}
	m := &Metrics{
		received:  counter("messages_received_total", "Messages taken from the source."),
		completed: counter("messages_completed_total", "Messages whose outcome is final, by outcome: delivered, dead_lettered, expired, dropped.", "outcome"),
		nacked: counter("messages_nacked_total", "Messages handed back to the source for redelivery, by reason "+
			"(shutdown, or a dead letter with no target or a target that failed).", "reason"),
		requests: counter("requests_total", "Sink attempts by result: ok, the status code of an answer that is not a success, or error.", "code"),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "request_duration_seconds", Help: "Sink attempt latency.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"pipeline"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "queue_wait_seconds", Help: "Time from entering the bucket to departure.",
			// Fine around the usual max_queue_time values (1s to 30s), where
			// the early overload signal matters.
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, .75, 1, 1.5, 2, 3, 4, 5, 7.5, 10, 15, 20, 30, 60, 120, 300},
		}, []string{"pipeline"}),
		retries:  counter("retries_total", "Attempts scheduled again."),
		depth:    gauge("bucket_depth", "Messages held by the bucket: queued, waiting for a retry, or in flight."),
		capacity: gauge("bucket_capacity", "Effective bucket capacity: min(capacity, limit × max_queue_time)."),
		inFlight: gauge("in_flight", "Sink requests in flight."),
		dropped:  counter("source_dropped_total", "Messages a core NATS source dropped because the bucket was full (at-most-once)."),
		live:     newLiveCollector(),
	}
	reg.MustRegister(m.received, m.completed, m.nacked, m.requests, m.requestDuration, m.queueWait,
		m.retries, m.depth, m.capacity, m.inFlight, m.dropped, m.live)
	return m
}

// liveCollector reads, at scrape time, what pipelines know better than any
// counter could: the limit in force (it moves during warm-up, fallback and
// with the adaptive rate), whether a shared limiter has fallen back and the
// slots it left unused, the source's lag, and the gate: attempts throttled,
// breaker open, paused.
type liveCollector struct {
	rateLimit, maxQueueTime, fallback, unused, lag *prometheus.Desc
	expired                                        *prometheus.Desc
	throttled, breakerOpen, paused                 *prometheus.Desc
	keysActive, keyOverflow                        *prometheus.Desc

	mu        sync.Mutex
	pipelines []*Pipeline
}

func newLiveCollector() *liveCollector {
	return &liveCollector{
		rateLimit: prometheus.NewDesc("shaper_rate_limit",
			"Rate limit in force, requests per second (after warm-up, a run-time change, a fallback or the adaptive rate).", []string{"pipeline"}, nil),
		throttled: prometheus.NewDesc("shaper_throttled_total",
			"Attempts the sink answered 429 or 503 with Retry-After; they pause their destination's departures and spend no attempt.", []string{"pipeline"}, nil),
		breakerOpen: prometheus.NewDesc("shaper_breaker_open",
			"How many destinations' circuit breakers hold departures now (open, or one probe in flight): 1 or 0 with one destination.", []string{"pipeline"}, nil),
		keysActive: prometheus.NewDesc("shaper_keys_active",
			"Lanes held now: keys with a message in the bucket (1 without key:).", []string{"pipeline"}, nil),
		keyOverflow: prometheus.NewDesc("shaper_key_overflow_total",
			"Messages of a new key put in the \"\" lane because key.max_keys lanes were held.", []string{"pipeline"}, nil),
		paused: prometheus.NewDesc("shaper_paused",
			"1 while the pipeline is paused through the admin API, else 0.", []string{"pipeline"}, nil),
		maxQueueTime: prometheus.NewDesc("shaper_max_queue_time_seconds",
			"The bucket's max_queue_time in force, for alerts on queue wait approaching it.", []string{"pipeline"}, nil),
		fallback: prometheus.NewDesc("shaper_limiter_fallback",
			"1 while the shared limiter has fallen back to its local fallback_limit, else 0.", []string{"pipeline"}, nil),
		unused: prometheus.NewDesc("shaper_limiter_unused_total",
			"Slots the shared limiter and the shared per-key limits leased and then gave back or let pass unused (a replica that stalled, or woke too late for them).", []string{"pipeline"}, nil),
		expired: prometheus.NewDesc("shaper_expired_per_second",
			"Messages expired per second over the last 10s; above the requests sent the pipeline is stalled (not ready).", []string{"pipeline"}, nil),
		lag: prometheus.NewDesc("shaper_source_lag",
			"Messages between the last one fetched and the end of the partition (Kafka).", []string{"pipeline", "partition"}, nil),
	}
}

func (c *liveCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.rateLimit
	ch <- c.maxQueueTime
	ch <- c.fallback
	ch <- c.unused
	ch <- c.lag
	ch <- c.expired
	ch <- c.throttled
	ch <- c.breakerOpen
	ch <- c.paused
	ch <- c.keysActive
	ch <- c.keyOverflow
}

func (c *liveCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	pipelines := append([]*Pipeline(nil), c.pipelines...)
	c.mu.Unlock()
	for _, p := range pipelines {
		now := p.clock.Now()
		name := p.cfg.Name
		ch <- prometheus.MustNewConstMetric(c.rateLimit, prometheus.GaugeValue, p.limitNow(now), name)
		ch <- prometheus.MustNewConstMetric(c.maxQueueTime, prometheus.GaugeValue, p.settings.Load().bucket.MaxQueueTime.Seconds(), name)
		fallback := 0.0
		if fr, ok := p.lim.(FallbackReporter); ok && fr.Fallback() {
			fallback = 1
		}
		ch <- prometheus.MustNewConstMetric(c.fallback, prometheus.GaugeValue, fallback, name)
		var unused int64
		if ur, ok := p.lim.(UnusedReporter); ok {
			unused = ur.Unused()
		}
		ch <- prometheus.MustNewConstMetric(c.unused, prometheus.CounterValue, float64(unused), name)
		_, expired := p.recent.counts(now)
		ch <- prometheus.MustNewConstMetric(c.expired, prometheus.GaugeValue, float64(expired)/recentWindow, name)
		throttled, open := p.bucket.gateCounts() // summed over the destinations
		ch <- prometheus.MustNewConstMetric(c.throttled, prometheus.CounterValue, float64(throttled), name)
		ch <- prometheus.MustNewConstMetric(c.breakerOpen, prometheus.GaugeValue, float64(open), name)
		ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, b2f(p.paused.on()), name)
		active, overflow := p.bucket.keys()
		ch <- prometheus.MustNewConstMetric(c.keysActive, prometheus.GaugeValue, float64(active), name)
		ch <- prometheus.MustNewConstMetric(c.keyOverflow, prometheus.CounterValue, float64(overflow), name)
		if lr, ok := p.src.(LagReporter); ok {
			for partition, lag := range lr.Lag() {
				ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(lag), name, partition)
			}
		}
	}
}

// b2f is a gauge's 1 for true, 0 for false.
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (c *liveCollector) add(p *Pipeline) {
	c.mu.Lock()
	c.pipelines = append(c.pipelines, p)
	c.mu.Unlock()
}

func (c *liveCollector) remove(p *Pipeline) {
	c.mu.Lock()
	c.pipelines = slices.DeleteFunc(c.pipelines, func(q *Pipeline) bool { return q == p })
	c.mu.Unlock()
}

// Forget deletes every series of a pipeline that no longer exists (a
// reload removed it), so dashboards do not show it frozen at its last value.
func (m *Metrics) Forget(pipeline string) {
	l := prometheus.Labels{"pipeline": pipeline}
	for _, v := range []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{m.received, m.completed, m.nacked, m.requests, m.requestDuration, m.queueWait, m.retries, m.depth, m.capacity, m.inFlight, m.dropped} {
		v.DeletePartialMatch(l)
	}
}

// pipelineMetrics are the metrics of one pipeline, with its label bound, so
// the hot path does no label lookups.
type pipelineMetrics struct {
	received, retries          prometheus.Counter
	completed                  map[Outcome]prometheus.Counter
	nacked                     *prometheus.CounterVec
	requests                   *prometheus.CounterVec
	requestDuration, queueWait prometheus.Observer
	depth, capacity, inFlight  prometheus.Gauge
	dropped                    prometheus.Counter
}

func (m *Metrics) forPipeline(name string) *pipelineMetrics {
	l := prometheus.Labels{"pipeline": name}
	pm := &pipelineMetrics{
		received:        m.received.With(l),
		retries:         m.retries.With(l),
		completed:       map[Outcome]prometheus.Counter{},
		nacked:          m.nacked.MustCurryWith(l),
		requests:        m.requests.MustCurryWith(l),
		requestDuration: m.requestDuration.With(l),
		queueWait:       m.queueWait.With(l),
		depth:           m.depth.With(l),
		capacity:        m.capacity.With(l),
		inFlight:        m.inFlight.With(l),
		dropped:         m.dropped.With(l),
	}
	for _, o := range outcomes {
		pm.completed[o] = m.completed.With(prometheus.Labels{"pipeline": name, "outcome": string(o)})
	}
	return pm
}
