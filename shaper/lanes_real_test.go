package shaper_test

import (
	"bytes"
	"fmt"
	"hash/crc32"
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
	testwait.For(t, 30*time.Second, "every B delivered", func() bool {
		n := 0
		for _, r := range rec.Requests() {
			if bytes.HasPrefix(r.Body, []byte("B-")) && r.Status == 200 {
				n++
			}
		}
		return n == few
	})
	var first, firstB, lastB time.Time
	for _, r := range rec.Requests() {
		if first.IsZero() || r.At.Before(first) {
			first = r.At
		}
		if bytes.HasPrefix(r.Body, []byte("B-")) {
			if firstB.IsZero() || r.At.Before(firstB) {
				firstB = r.At
			}
			if r.At.After(lastB) {
				lastB = r.At
			}
		}
	}
	t.Logf("first B %v after the first delivery; every B within %v of the first B; lanes %v, %v handed back (lane full)",
		firstB.Sub(first).Round(time.Millisecond), lastB.Sub(firstB).Round(time.Millisecond), p.Keys(10), p.metric("shaper_messages_nacked_total"))
	if d := firstB.Sub(first); d > 4*time.Second {
		t.Errorf("first B %v after the first delivery; want within 4s", d)
	}
	if d := lastB.Sub(firstB); d > 3*time.Second {
		t.Errorf("every B within %v of the first B; want within 3s", d)
	}
	testwait.For(t, 60*time.Second, "every message delivered", func() bool { return rec.DeliveredCount() == flood+few })
	if dup := rec.Duplicates(); len(dup) > 0 {
		t.Errorf("sent more than once: %v", dup)
	}
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
	rec := sinktest.Start(t, func(r *http.Request, attempt int) sinktest.Action {
		if attempt == 1 && crc32.ChecksumIEEE([]byte(r.Header.Get("Idempotency-Key")))%5 == 0 {
			return sinktest.Action{Status: http.StatusServiceUnavailable}
		}
		return sinktest.Action{}
	})
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
