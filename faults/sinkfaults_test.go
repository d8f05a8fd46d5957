package faults_test

import (
	"cmp"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/freeport"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/shaper"
)

// Shaping under retries. The sink sees arrivals, not departures: the
// limiter spaces departures exactly 1/limit apart, but a request delayed on
// its way (scheduling of the -race built child and of the sink on two busy
// cores, the TCP loopback) arrives closer to the next one. windowSlack is
// how many extra arrivals a 100 ms window may hold for that: departures
// from up to 30 ms outside the window, at most limit × 30 ms (3 at 100/s).
// Without it the check would test the machine, not shaper; with it, a
// retry that skipped the limiter (a burst of them after an error burst)
// still shows, as would twice the rate.
const jitterAllowance = 30 * time.Millisecond

func windowSlack(limit int) int {
	return int(float64(limit) * jitterAllowance.Seconds())
}

// ids returns the ids of JetStream messages 1..n on stream IN.
func streamIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "IN/" + strconv.Itoa(i+1)
	}
	return ids
}

// outcome is where every message ended.
type outcome struct {
	delivered    map[string]int // 2xx answers per id
	deadLettered map[string]deadLetter
	lost         []string
	duplicates   int // 2xx answers beyond the first of each message
}

// account checks that each of ids was delivered or dead-lettered.
func account(t testing.TB, ids []string, sink *sinktest.Sink, dls []deadLetter) outcome {
	t.Helper()
	o := outcome{deadLettered: map[string]deadLetter{}}
	var answers int
	o.delivered, answers = sink.Delivered()
	o.duplicates = answers - len(o.delivered)
	for _, d := range dls {
		o.deadLettered[d.source] = d
	}
	for _, id := range ids {
		if o.delivered[id] == 0 && o.deadLettered[id].source == "" {
			o.lost = append(o.lost, id)
		}
	}
	if len(o.lost) > 0 {
		t.Errorf("%d of %d messages neither delivered nor dead-lettered (lost): %v", len(o.lost), len(ids), o.lost[:min(10, len(o.lost))])
	}
	return o
}

// checkShaping checks what the sink saw against the contract: at most
// maxInFlight requests at once, and the rate held in every 100 ms and 1 s
// window, retries included.
func checkShaping(t testing.TB, sink *sinktest.Sink, limit, maxInFlight int, timeout time.Duration) (most100, most1s int) {
	t.Helper()
	return checkShapingWith(t, sink, limit, maxInFlight, timeout, 0)
}

// checkShapingWith is checkShaping with extra arrivals allowed in a window:
// with rate.shared, one lease of slots (limit × 20 ms), the most docs/operations.md
// lets a replica's leases exceed the limit by.
func checkShapingWith(t testing.TB, sink *sinktest.Sink, limit, maxInFlight int, timeout time.Duration, extra int) (most100, most1s int) {
	t.Helper()
	if peak := sink.PeakInFlight(timeout); peak > maxInFlight {
		t.Errorf("the sink had %d requests in flight at once; want at most max_in_flight = %d", peak, maxInFlight)
		logPeak(t, sink, timeout, maxInFlight)
	}
	at := sinktest.Arrivals(sink.Requests())
	most100 = sinktest.MaxInWindow(at, 100*time.Millisecond)
	most1s = sinktest.MaxInWindow(at, time.Second)
	slack := windowSlack(limit) + extra
	if want := limit/10 + 1 + slack; most100 > want {
		t.Errorf("%d requests arrived within 100 ms; want at most limit/10 + 1 + %d (arrival jitter, leases) = %d", most100, slack, want)
	}
	if want := limit + 1 + slack; most1s > want {
		t.Errorf("%d requests arrived within 1 s; want at most limit + 1 + %d = %d", most1s, slack, want)
	}
	return most100, most1s
}

// sinkFault is one way for an HTTP sink to misbehave.
type sinkFault struct {
	name string
	// rule is the sink's behaviour; start is when the test began.
	rule func(s *faultState) sinktest.Rule
	// refused is how many attempts the sink refuses at first, not
	// listening until the shaper has counted them
	// (shaper_requests_total{code="error"}); 0: it listens from the start.
	refused int
	// breaker is sink.http.breaker: "" for the default (on), or
	// "{failures: 0}" for a fault whose failures come in runs the breaker
	// would take for an outage, when the fault tests the retries.
	breaker string
	// maxQueueTime is bucket.max_queue_time; 0 for 1m.
	maxQueueTime time.Duration
	check        faultCheck
}

// faultCheck checks what a fault did, from the requests the sink saw and
// the child's last metrics.
type faultCheck func(t *testing.T, s *faultState, reqs []sinktest.Request, m childtest.Metrics)

// faultState is what a fault's rule remembers, for its check.
type faultState struct {
	mu         sync.Mutex
	start      time.Time
	retryAfter map[string]time.Time // id -> the earliest time a Retry-After allowed
	capped     map[string]time.Time // id -> when a Retry-After beyond max_backoff was answered
}

const (
	sfTimeout    = 300 * time.Millisecond
	sfMaxBackoff = 2 * time.Second
)

func TestSinkFaultsEndEveryMessageDeliveredOrDeadLetteredWithinRateAndInFlight(t *testing.T) {
	t.Parallel()
	const n, limit, inFlight = 150, 100, 4
	faults := []sinkFault{
		{
			name: "bursts of 500 502 503",
			// 25 errors in a row at 100/s, over 250 ms: shorter than the
			// default breaker's window, so it stays closed (a degraded
			// sink), and the failures after the fifth in a row spend no
			// attempt: every message is delivered.
			rule: func(s *faultState) sinktest.Rule {
				codes := []int{500, 502, 503}
				return func(r *http.Request, attempt int) sinktest.Action {
					// 250 ms of errors in every 500 ms.
					phase := time.Since(s.start) % (500 * time.Millisecond)
					if phase < 250*time.Millisecond {
						return sinktest.Action{Status: codes[int(time.Since(s.start)/time.Millisecond)%3]}
					}
					return sinktest.Action{}
				}
			},
			check: func(t *testing.T, s *faultState, reqs []sinktest.Request, m childtest.Metrics) {
				if m.Sum("shaper_requests_total", `code="500"`)+m.Sum("shaper_requests_total", `code="503"`) == 0 || m.Sum("shaper_retries_total") == 0 {
					t.Errorf("no 5xx counted or no retry scheduled: the bursts did not happen")
				}
				if dl := m.Sum("shaper_messages_completed_total", `outcome="dead_lettered"`); dl > 0 {
					t.Errorf("%v messages dead-lettered; want every one delivered", dl)
				}
				if open := m.Sum("shaper_breaker_open"); open > 0 {
					t.Errorf("shaper_breaker_open = %v at the end; want the breaker closed", open)
				}
			},
		},
		{
			name:  "hangs until the per-attempt timeout",
			rule:  firstAttemptsOfOneIn(3, 1, sinktest.Action{Hang: true}),
			check: checkGaveUpOnOneIn(3),
		},
		{
			name: "connection refused",
			// Enough to open the default breaker (its failures in a row)
			// and have its first probe refused too.
			refused: shaper.DefaultBreakerFailures + 1,
			rule:    func(s *faultState) sinktest.Rule { return sinktest.OK },
			check:   checkErrorsCounted("the refused attempts"),
		},
		{
			name: "429 with Retry-After in seconds",
			// Each throttle holds every departure: about 45 holds of 1
			// to 2s in all, longer than the default minute of queueing.
			maxQueueTime: 5 * time.Minute,
			rule: func(s *faultState) sinktest.Rule {
				return func(r *http.Request, attempt int) sinktest.Action {
					key := r.Header.Get("Idempotency-Key")
					switch {
					case attempt == 1 && oneIn(5, key):
						s.mu.Lock()
						s.retryAfter[key] = time.Now().Add(time.Second)
						s.mu.Unlock()
						return sinktest.Action{Status: http.StatusTooManyRequests, RetryAfter: "1"}
					case attempt == 1 && oneIn(7, key):
						// An hour: max_backoff caps it.
						s.mu.Lock()
						s.capped[key] = time.Now()
						s.mu.Unlock()
						return sinktest.Action{Status: http.StatusTooManyRequests, RetryAfter: "3600"}
					}
					return sinktest.Action{}
				}
			},
			check: checkRetryAfter,
		},
		{
			name:         "503 with Retry-After as an HTTP date",
			maxQueueTime: 5 * time.Minute,
			rule: func(s *faultState) sinktest.Rule {
				return func(r *http.Request, attempt int) sinktest.Action {
					key := r.Header.Get("Idempotency-Key")
					if attempt == 1 && oneIn(5, key) {
						at := time.Now().Add(2 * time.Second).Truncate(time.Second) // dates have whole seconds
						s.mu.Lock()
						s.retryAfter[key] = at
						s.mu.Unlock()
						return sinktest.Action{Status: http.StatusServiceUnavailable, RetryAfter: at.UTC().Format(http.TimeFormat)}
					}
					return sinktest.Action{}
				}
			},
			check: checkRetryAfter,
		},
		{
			name:  "connection reset mid-response",
			rule:  firstAttemptsOfOneIn(4, 2, sinktest.Action{Reset: true}),
			check: checkErrorsCounted("the reset attempts"),
		},
		{
			name:  "slow sink drips its response",
			rule:  firstAttemptsOfOneIn(5, 1, sinktest.Action{Drip: 50 * time.Millisecond}), // about 4.5 s for the whole response
			check: checkGaveUpOnOneIn(5),
		},
	}

	for _, fault := range faults {
		t.Run(fault.name, func(t *testing.T) {
			t.Parallel()
			f := jetstreamFixture(t, n)
			state := &faultState{start: time.Now(), retryAfter: map[string]time.Time{}, capped: map[string]time.Time{}}
			addr := fmt.Sprintf("127.0.0.1:%d", freeport.Get(t))
			breaker := ""
			if fault.breaker != "" {
				breaker = ", breaker: " + fault.breaker
			}
			config := childtest.WriteConfig(t, childtest.Pipeline{
				Source: f.source,
				Bucket: fmt.Sprintf("{capacity: 1000, max_queue_time: %s}", cmp.Or(fault.maxQueueTime, time.Minute)),
				Rate:   fmt.Sprintf("{limit: %d}", limit),
				Sink: fmt.Sprintf(`{http: {url: "http://%s/notify", max_in_flight: %d, timeout: %s, retry: {max_attempts: 6, initial_backoff: 50ms, max_backoff: %s, max_elapsed: 1m}%s}}`,
					addr, inFlight, sfTimeout, sfMaxBackoff, breaker),
				DeadLetter: f.deadLetter,
			}.YAML())
			// A sink that takes 30 ms to answer keeps about 3 requests in
			// flight at 100/s, so max_in_flight (4) is tested, not idle.
			faulty := fault.rule(state)
			rule := func(r *http.Request, attempt int) sinktest.Action {
				a := faulty(r, attempt)
				if a == (sinktest.Action{}) {
					a.Delay = 30 * time.Millisecond
				}
				return a
			}
			var sink *sinktest.Sink
			if fault.refused == 0 {
				sink = sinktest.StartAt(t, addr, rule)
			}
			p := startShaper(t, "shaper", config)
			if fault.refused > 0 {
				p.WaitMetrics(time.Minute, fmt.Sprintf("%d attempts refused", fault.refused), func(m childtest.Metrics) bool {
					return m.Sum("shaper_requests_total", `code="error"`) >= float64(fault.refused)
				})
				sink = sinktest.StartAt(t, addr, rule)
			}
			m := p.WaitMetrics(2*time.Minute, "every message delivered or dead-lettered", func(m childtest.Metrics) bool {
				return m.Sum("shaper_messages_completed_total") >= n
			})
			p.Stop()
			f.settled(30 * time.Second)
			dls := f.dlq(int(m.Sum("shaper_messages_completed_total", `outcome="dead_lettered"`)))
			o := account(t, streamIDs(n), sink, dls)
			for _, d := range dls {
				if d.reason != "exhausted" {
					t.Errorf("dead letter of %s has reason %q (%s); want exhausted", d.source, d.reason, d.errText)
				}
			}
			most100, most1s := checkShaping(t, sink, limit, inFlight, sfTimeout)
			reqs := sink.Requests()
			fault.check(t, state, reqs, m)
			t.Logf("%s: %d messages, %d requests: %d delivered, %d dead-lettered, %d lost, %d duplicates; peak in flight %d/%d; most in 100 ms %d, in 1 s %d (limit %d/s)",
				fault.name, n, len(reqs), len(o.delivered), len(o.deadLettered), len(o.lost), o.duplicates, sink.PeakInFlight(sfTimeout), inFlight, most100, most1s, limit)
		})
	}
}

// oneIn reports whether the message of id key ("IN/7") is one in k.
func oneIn(k int, key string) bool {
	i, _ := strconv.Atoi(key[len("IN/"):])
	return i%k == 0
}

// firstAttemptsOfOneIn is a fault that answers a to the first attempts
// attempts of one message in k, and the others as a healthy sink would.
func firstAttemptsOfOneIn(k, attempts int, a sinktest.Action) func(*faultState) sinktest.Rule {
	return func(*faultState) sinktest.Rule {
		return func(r *http.Request, attempt int) sinktest.Action {
			if attempt <= attempts && oneIn(k, r.Header.Get("Idempotency-Key")) {
				return a
			}
			return sinktest.Action{}
		}
	}
}

// checkGaveUpOnOneIn checks that the client gave up on the first attempt of
// one message in k at the per-attempt timeout (checkGaveUpWithinTimeout).
func checkGaveUpOnOneIn(k int) faultCheck {
	return func(t *testing.T, _ *faultState, reqs []sinktest.Request, _ childtest.Metrics) {
		t.Helper()
		checkGaveUpWithinTimeout(t, reqs, func(r sinktest.Request) bool { return r.Attempt == 1 && oneIn(k, r.Key) })
	}
}

// checkErrorsCounted checks that failed attempts, which names, were counted
// in shaper_requests_total{code="error"}.
func checkErrorsCounted(which string) faultCheck {
	return func(t *testing.T, _ *faultState, _ []sinktest.Request, m childtest.Metrics) {
		t.Helper()
		if m.Sum("shaper_requests_total", `code="error"`) == 0 {
			t.Errorf("shaper_requests_total{code=\"error\"} = 0; want %s counted as errors", which)
		}
	}
}

// checkGaveUpWithinTimeout checks that the requests picked by which were
// abandoned by the client within the per-attempt timeout (plus 1 s for a
// loaded machine): the timeout fired.
func checkGaveUpWithinTimeout(t *testing.T, reqs []sinktest.Request, which func(sinktest.Request) bool) {
	t.Helper()
	var seen int
	var longest time.Duration
	for _, r := range reqs {
		if !which(r) {
			continue
		}
		seen++
		held := r.End.Sub(r.At)
		longest = max(longest, held)
		if !r.GaveUp {
			t.Errorf("request %s attempt %d: the client waited for the whole answer (%v); want it to give up at the %v timeout", r.Key, r.Attempt, held, sfTimeout)
		} else if held > sfTimeout+time.Second {
			t.Errorf("request %s attempt %d was held %v; want the client to give up after the %v timeout", r.Key, r.Attempt, held, sfTimeout)
		}
	}
	if seen == 0 {
		t.Errorf("no request met the fault")
	}
	t.Logf("%d faulty attempts; the longest was abandoned after %v (timeout %v)", seen, longest.Round(time.Millisecond), sfTimeout)
}

// checkRetryAfter checks that each message answered with a Retry-After
// was not tried again before the time it asked for, and that one asking
// for an hour was tried again within max_backoff.
func checkRetryAfter(t *testing.T, s *faultState, reqs []sinktest.Request, m childtest.Metrics) {
	t.Helper()
	next := map[string]time.Time{} // id -> arrival of attempt 2
	for _, r := range reqs {
		if r.Attempt == 2 {
			next[r.Key] = r.At
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.retryAfter) == 0 {
		t.Fatalf("no Retry-After was answered")
	}
	var early time.Duration
	for key, notBefore := range s.retryAfter {
		at, ok := next[key]
		if !ok {
			t.Errorf("%s: answered with Retry-After but never tried again", key)
			continue
		}
		if at.Before(notBefore) {
			t.Errorf("%s: tried again %v before its Retry-After allowed", key, notBefore.Sub(at))
		}
		early = max(early, notBefore.Sub(at))
	}
	// A Retry-After holds every departure, so a message may wait for a
	// later throttle too: the cap shows in the hold, which ends (some
	// request goes) by max_backoff after the answer, or by the end of a
	// throttle of 1s answered meanwhile.
	var longest time.Duration
	for key, answered := range s.capped {
		if _, ok := next[key]; !ok {
			t.Errorf("%s: answered Retry-After: 3600 but never tried again", key)
			continue
		}
		resumed := time.Duration(math.MaxInt64)
		for _, r := range reqs {
			if d := r.At.Sub(answered); d > 100*time.Millisecond && d < resumed {
				resumed = d
			}
		}
		longest = max(longest, resumed)
		if resumed > sfMaxBackoff+time.Second {
			t.Errorf("%s: after its Retry-After: 3600 the next request went %v later; want the hold capped at max_backoff %v", key, resumed, sfMaxBackoff)
		}
	}
	t.Logf("%d Retry-After answers honoured, none tried early", len(s.retryAfter))
	if len(s.capped) > 0 {
		t.Logf("%d Retry-After: 3600 capped at max_backoff %v: the longest hold after one was %v", len(s.capped), sfMaxBackoff, longest.Round(time.Millisecond))
	}
}
