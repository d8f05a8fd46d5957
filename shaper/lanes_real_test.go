package shaper_test

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/shaper"
)

// One merchant's flood of 2000 published before another's 50, leaky
// 100/s, per_key_capacity 100: the flood's further messages wait in
// JetStream (handed back, no attempt), the other merchant's get in and
// take every other departure, and nothing is lost.
func TestAFloodingKeyDoesNotHoldBackAnotherOnJetStream(t *testing.T) {
	t.Parallel()
	const flood, few = 2000, 50
	e := newEnv(t)
	rec := sinktest.Start(t, sinktest.OK)
	e.publishKeyed("A", flood)
	e.publishKeyed("B", few)
	p := e.start(e.config(rec.URL, func(c *config.Pipeline) {
		c.Rate.Limit = 100
		c.Key = &shaper.KeyConfig{From: "header:Merchant-Id"}
		c.Bucket.PerKeyCapacity = 100
		c.Bucket.MaxQueueTime = 5 * time.Minute
	}))
	rec.CheckNotHeldBack(t, "B", few, flood+few, func(after, spread time.Duration) {
		t.Logf("first B %v after the first delivery; every B within %v of the first B; lanes %v, %v handed back (lane full)",
			after.Round(time.Millisecond), spread.Round(time.Millisecond), p.Keys(10), p.metric("shaper_messages_nacked_total"))
	})
	e.noDeadLetters()
}

// bodiesByKey returns, per key (the body's prefix before "-"), the index
// in the body of each request, in arrival order; ok: only answered 2xx.
func bodiesByKey(reqs []sinktest.Request, ok bool) map[string][]int {
	out := map[string][]int{}
	for _, r := range reqs {
		if ok && r.Status != 200 {
			continue
		}
		key, n, _ := strings.Cut(string(r.Body), "-")
		i, _ := strconv.Atoi(n)
		out[key] = append(out[key], i)
	}
	return out
}

// The two-level limit: 100/s for the pipeline and 10/s for each key. Three
// keys of 60 messages each go at 10/s each, side by side, never two of one
// key closer than the per-key interval allows.
func TestEachKeyKeepsItsOwnLimitUnderThePipelines(t *testing.T) {
	t.Parallel()
	const each = 60
	e := newEnv(t)
	rec := sinktest.Start(t, sinktest.OK)
	for _, k := range []string{"A", "B", "C"} {
		e.publishKeyed(k, each)
	}
	p := e.start(e.config(rec.URL, func(c *config.Pipeline) {
		c.Rate.Limit = 100
		c.Rate.PerKey = &shaper.PerKeyRate{Limit: 10}
		c.Key = &shaper.KeyConfig{From: "header:Merchant-Id"}
	}))
	testwait.For(t, 30*time.Second, "every message delivered", func() bool { return rec.DeliveredCount() == 3*each })
	byKey := map[string][]time.Time{}
	for _, r := range rec.Requests() {
		k, _, _ := strings.Cut(string(r.Body), "-")
		byKey[k] = append(byKey[k], r.At)
	}
	for _, k := range []string{"A", "B", "C"} {
		at := byKey[k]
		rate := float64(len(at)-1) / at[len(at)-1].Sub(at[0]).Seconds()
		most := sinktest.MaxInWindow(at, 100*time.Millisecond)
		t.Logf("key %s: %d requests at %.2f/s, at most %d in any 100ms", k, len(at), rate, most)
		// Above the limit is a broken contract; below it, a loaded
		// machine's late wake-ups, which a leaky bucket does not catch
		// up: the lower bound is generous (the exact spacing is the fake
		// clock's tests').
		if rate < 8.5 || rate > 10.5 {
			t.Errorf("key %s went at %.2f/s; want 10/s (8.5 to 10.5)", k, rate)
		}
		if most > 2 {
			t.Errorf("key %s: %d requests in one 100ms window; want at most 2", k, most)
		}
	}
	// The sink answers before the ack settles the last messages: wait for
	// the settlements, then no lane may hold anything.
	testwait.For(t, 10*time.Second, "every message settled", func() bool {
		return p.Status().Outcomes[shaper.OutcomeDelivered] == 3*each
	})
	if keys := p.Keys(10); len(keys) != 0 {
		t.Errorf("lanes after every message was settled: %v; want none listed", keys)
	}
	e.noDeadLetters()
}

// key.ordered: five keys of 40 messages, a sink that refuses a fifth of
// first attempts with 503. Each key's requests, retries included, come in
// source order: a retry holds back its own key, and only its key.
func TestAnOrderedKeySendsInSourceOrderThroughRetries(t *testing.T) {
	t.Parallel()
	const keys, each = 5, 40
	e := newEnv(t)
	rec := sinktest.Start(t, sinktest.RefusingSome)
	for k := range keys {
		e.publishKeyed(string(rune('A'+k)), each)
	}
	e.start(e.config(rec.URL, func(c *config.Pipeline) {
		c.Rate.Limit = 100
		c.Key = &shaper.KeyConfig{From: "header:Merchant-Id", Ordered: true}
		c.Sink.HTTP.Retry = shaper.RetryConfig{InitialBackoff: 50 * time.Millisecond}
	}))
	testwait.For(t, 30*time.Second, "every message delivered", func() bool { return rec.DeliveredCount() == keys*each })
	refused := 0
	for _, r := range rec.Requests() {
		if r.Status == http.StatusServiceUnavailable {
			refused++
		}
	}
	for key, seq := range bodiesByKey(rec.Requests(), false) {
		if !slices.IsSorted(seq) {
			t.Errorf("key %s: requests in order %v; want source order (a retry first)", key, seq)
		}
	}
	for key, seq := range bodiesByKey(rec.Requests(), true) {
		if len(seq) != each || !slices.IsSorted(seq) {
			t.Errorf("key %s: delivered %v; want 0..%d in order", key, seq, each-1)
		}
	}
	t.Logf("%d requests, %d refused with 503 and retried; every key in source order", len(rec.Requests()), refused)
	if refused == 0 {
		t.Error("the sink refused nothing: the test proves nothing")
	}
	e.noDeadLetters()
}

// key.max_keys bounds the lanes: past it, messages of new keys share the
// "" lane, counted in shaper_key_overflow_total, and still all go.
func TestKeysPastMaxKeysShareTheEmptyKeysLaneAndAreCounted(t *testing.T) {
	t.Parallel()
	const keys, each, maxKeys = 50, 2, 10
	e := newEnv(t)
	rec := sinktest.Start(t, sinktest.OK)
	for k := range keys {
		e.publishKeyed(fmt.Sprintf("K%02d", k), each)
	}
	p := e.start(e.config(rec.URL, func(c *config.Pipeline) {
		c.Rate.Limit = 200
		c.Key = &shaper.KeyConfig{From: "header:Merchant-Id", MaxKeys: maxKeys}
	}))
	most := 0
	testwait.For(t, 30*time.Second, "every message delivered", func() bool {
		most = max(most, int(p.metric("shaper_keys_active")))
		return rec.DeliveredCount() == keys*each
	})
	overflow := p.metric("shaper_key_overflow_total")
	t.Logf("%d messages of %d keys with max_keys %d: at most %d lanes seen, %v messages in the \"\" lane", keys*each, keys, maxKeys, most, overflow)
	if overflow == 0 {
		t.Error("shaper_key_overflow_total = 0; want the messages past max_keys counted")
	}
	if most > maxKeys+1 {
		t.Errorf("%d lanes at once; want at most max_keys (%d) and the \"\" lane", most, maxKeys)
	}
	e.noDeadLetters()
}

// publishTo puts n messages with header Notify-Url: url and bodies
// name+"-0".. into the stream.
func (e *env) publishTo(name, url string, n int) { e.publishHeader("Notify-Url", url, name, n) }

// urlFrom makes c take each request's URL from header Notify-Url, to the
// loopback hosts given (allow_private: the test's sinks are on loopback).
func urlFrom(c *config.Pipeline, hosts ...string) {
	c.Sink.HTTP.URL = ""
	c.Sink.HTTP.URLFrom = "header:Notify-Url"
	c.Sink.HTTP.AllowedHosts = hosts
	c.Sink.HTTP.AllowPrivate = true
}

// Each message goes to the URL it names; one that names a URL the guard
// refuses is dead-lettered "rejected", saying why, and never requested.
func TestEachMessageIsDeliveredToItsOwnURLAndARefusedOneIsRejected(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := sinktest.StartAt(t, "127.0.0.1:0", sinktest.OK)
	b := sinktest.StartAt(t, "127.0.0.2:0", sinktest.OK)
	e.publishTo("a", a.URL, 20)
	e.publishTo("b", b.URL, 20)
	e.publishTo("metadata", "https://169.254.169.254/latest/meta-data/", 1)
	e.publishTo("file", "file:///etc/passwd", 1)
	e.publishTo("other", "https://evil.example/notify", 1)
	e.start(e.config(a.URL, func(c *config.Pipeline) { urlFrom(c, "127.0.0.1", "127.0.0.2") }))
	dead := e.deadLetters(3, 30*time.Second)
	testwait.For(t, 30*time.Second, "every allowed message delivered", func() bool {
		return a.DeliveredCount() == 20 && b.DeliveredCount() == 20
	})
	for name, s := range map[string]*sinktest.Sink{"a": a, "b": b} {
		for _, r := range s.Requests() {
			if !strings.HasPrefix(string(r.Body), name+"-") {
				t.Errorf("sink %s received %q", name, r.Body)
			}
		}
	}
	for _, m := range dead {
		t.Logf("dead letter %s: %s: %s", m.Data, m.Header.Get("Shaper-Reason"), m.Header.Get("Shaper-Error"))
		if m.Header.Get("Shaper-Reason") != "rejected" || !strings.Contains(m.Header.Get("Shaper-Error"), "refused") {
			t.Errorf("dead letter %s: reason %q, error %q; want rejected, saying it was refused", m.Data, m.Header.Get("Shaper-Reason"), m.Header.Get("Shaper-Error"))
		}
	}
}

// key.from: host with max_in_flight_per_host 2: a host that answers in 2 s
// holds 2 of the pipeline's 8 requests in flight, not all of them, so a
// fast host next to it keeps the pipeline's rate.
func TestASlowHostDoesNotLowerTheRateToAFastOne(t *testing.T) {
	t.Parallel()
	const n = 150
	e := newEnv(t)
	fast := sinktest.StartAt(t, "127.0.0.1:0", sinktest.OK)
	slow := sinktest.StartAt(t, "127.0.0.2:0", func(*http.Request, int) sinktest.Action { return sinktest.Action{Delay: 2 * time.Second} })
	for range n / 10 {
		e.publishTo("slow", slow.URL, 10)
		e.publishTo("fast", fast.URL, 10)
	}
	e.start(e.config(fast.URL, func(c *config.Pipeline) {
		urlFrom(c, "127.0.0.1", "127.0.0.2")
		c.Rate.Limit = 50
		c.Key = &shaper.KeyConfig{From: "host"}
		c.Sink.HTTP.MaxInFlight, c.Sink.HTTP.MaxInFlightPerHost = 8, 2
		c.Sink.HTTP.Timeout = 5 * time.Second
		c.Bucket.MaxQueueTime = 5 * time.Minute
	}))
	testwait.For(t, 30*time.Second, "every fast message delivered", func() bool { return fast.DeliveredCount() == n })
	at := sinktest.Arrivals(fast.Requests())
	rate := float64(len(at)-1) / at[len(at)-1].Sub(at[0]).Seconds()
	t.Logf("fast host: %d requests at %.1f/s; slow host: %d answered meanwhile, at most %d in flight", len(at), rate, slow.DeliveredCount(), slow.PeakInFlight(0))
	// Held behind the slow host, the fast one would get about 8 requests
	// each 2 s; the bound is generous for a loaded machine.
	if rate < 25 {
		t.Errorf("the fast host got %.1f/s next to a slow one; want near the limit, 50/s (at least 25)", rate)
	}
}

// key.from: host: a host that answers 429 with Retry-After: 1 to every
// request, or one that is down (503 without Retry-After, so its breaker
// opens), holds back only its own messages: the fast host beside them
// keeps the pipeline's rate, and the throttled host gets about one request
// a second.
func TestAHostThatPushesBackHoldsBackOnlyItself(t *testing.T) {
	t.Parallel()
	const n = 150
	e := newEnv(t)
	fast := sinktest.StartAt(t, "127.0.0.1:0", sinktest.OK)
	throttling := sinktest.StartAt(t, "127.0.0.2:0", func(*http.Request, int) sinktest.Action {
		return sinktest.Action{Status: http.StatusTooManyRequests, RetryAfter: "1"}
	})
	down := sinktest.StartAt(t, "127.0.0.3:0", func(*http.Request, int) sinktest.Action {
		return sinktest.Action{Status: http.StatusServiceUnavailable}
	})
	for range n / 10 {
		e.publishTo("throttling", throttling.URL, 2)
		e.publishTo("down", down.URL, 2)
		e.publishTo("fast", fast.URL, 10)
	}
	p := e.start(e.config(fast.URL, func(c *config.Pipeline) {
		urlFrom(c, "127.0.0.1", "127.0.0.2", "127.0.0.3")
		c.Rate.Limit = 50
		c.Key = &shaper.KeyConfig{From: "host"}
		c.Bucket.MaxQueueTime = 5 * time.Minute
		c.Sink.HTTP.Retry = shaper.RetryConfig{MaxAttempts: 1000, MaxElapsed: 10 * time.Minute}
	}))
	testwait.For(t, 30*time.Second, "every fast message delivered", func() bool { return fast.DeliveredCount() == n })
	at := sinktest.Arrivals(fast.Requests())
	span := at[len(at)-1].Sub(at[0])
	rate := float64(len(at)-1) / span.Seconds()
	_, throttled := throttling.Counts()
	_, failed := down.Counts()
	t.Logf("fast host: %d at %.1f/s; meanwhile the throttling host got %d requests, the down host %d; throttled %v, breakers open %v",
		len(at), rate, throttled, failed, p.metric("shaper_throttled_total"), p.metric("shaper_breaker_open"))
	// Paused by the other hosts' push-back, the fast host would get a
	// few requests a second; the bound is generous for a loaded machine.
	if rate < 25 {
		t.Errorf("the fast host got %.1f/s beside hosts that push back; want near the limit, 50/s (at least 25)", rate)
	}
	if most := span.Seconds() + 3; float64(throttled) > most {
		t.Errorf("the throttling host got %d requests in %.1fs; want about one a second (Retry-After: 1)", throttled, span.Seconds())
	}
	if p.metric("shaper_breaker_open") < 1 {
		t.Error("shaper_breaker_open = 0; want the down host's breaker open")
	}
}

// Every spelling of one origin is one destination: eight spellings of
// [::1] are one lane, held to one per-key limit and one in-flight bound,
// not eight lanes that each get the limit.
func TestEightSpellingsOfOneHostAreOneLane(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := sinktest.StartAt(t, "[::1]:0", sinktest.OK)
	port := s.URL[strings.LastIndex(s.URL, ":")+1:]
	spellings := []string{"[::1]", "[0::1]", "[0:0:0:0:0:0:0:1]", "[::0001]", "[0000::1]", "[0:0::1]", "[::0:1]", "[0:0:0::1]"}
	for _, h := range spellings {
		e.publishTo("m", "http://"+h+":"+port+"/cb", 2)
	}
	e.start(e.config(s.URL, func(c *config.Pipeline) {
		urlFrom(c, "::1")
		c.Rate.Limit = 100
		c.Key = &shaper.KeyConfig{From: "host"}
		c.Rate.PerKey = &shaper.PerKeyRate{Limit: 5}
		c.Sink.HTTP.MaxInFlightPerHost = 1
		c.Bucket.MaxQueueTime = time.Minute
	}))
	const n = 16
	testwait.For(t, 30*time.Second, "every message delivered", func() bool { return s.DeliveredCount() == n })
	at := sinktest.Arrivals(s.Requests())
	span := at[len(at)-1].Sub(at[0])
	t.Logf("%d requests to one host in %v", len(at), span)
	// One lane at 5/s: 16 requests take 3s. Eight lanes would each get
	// 5/s, and the 16 would go in about 0.15s at the pipeline's 100/s.
	if span < 2500*time.Millisecond {
		t.Errorf("%d requests to one host in %v; want them held to one per-key limit of 5/s (3s)", len(at), span)
	}
}
