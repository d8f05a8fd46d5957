package shaper

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/limiter"
)

// keyed returns messages with ids key+"/"+i, the key in header Key.
func keyed(key string, n int) []*Message {
	out := make([]*Message, n)
	for i := range out {
		out[i] = &Message{ID: key + "/" + string(rune('0'+i%10)), Header: map[string][]string{"Key": {key}}}
	}
	return out
}

// Lanes take turns: a key's flood admitted first does not hold back
// another key's messages behind it, and each key keeps its source order.
func TestLanesTakeTurnsAndKeepEachKeysOrder(t *testing.T) {
	now := time.Now()
	b := newBucket(100, laneOptions{})
	key := keyFunc(&KeyConfig{From: "header:Key"}, nil)
	b.admit(now, keyed("A", 6), key)
	b.admit(now, keyed("B", 2), key)
	var got []string
	for {
		tk, _ := b.take(now)
		if tk == nil {
			break
		}
		got = append(got, tk.msg.Header["Key"][0])
	}
	if want := []string{"A", "B", "A", "B", "A", "A", "A", "A"}; !slices.Equal(got, want) {
		t.Errorf("taken in order %v; want %v (turns while both have messages)", got, want)
	}
}

// A lane holding per_key_capacity hands its key's further messages back,
// others still get in; a lane that holds nothing is forgotten; past
// max_keys new keys go to the "" lane, counted.
func TestALaneIsBoundedForgottenWhenEmptyAndMaxKeysOverflowsToTheEmptyKey(t *testing.T) {
	now := time.Now()
	b := newBucket(100, laneOptions{perKey: 3, maxKeys: 2})
	key := keyFunc(&KeyConfig{From: "header:Key"}, nil)
	if full := b.admit(now, keyed("A", 5), key); len(full) != 2 {
		t.Errorf("admit 5 of A with per_key_capacity 3 handed back %d; want 2", len(full))
	}
	if full := b.admit(now, keyed("B", 1), key); len(full) != 0 {
		t.Errorf("B handed back %d; want 0: other keys still get in", len(full))
	}
	b.admit(now, keyed("C", 1), key) // a third key past max_keys 2
	if active, overflow := b.keys(); active != 3 || overflow != 1 {
		t.Errorf("keys = %d active, %d overflow; want 3 (A, B and \"\") and 1", active, overflow)
	}
	for {
		tk, _ := b.take(now)
		if tk == nil {
			break
		}
		b.release(tk)
	}
	if active, _ := b.keys(); active != 0 {
		t.Errorf("%d lanes after every message was settled; want 0 (forgotten)", active)
	}
	if b.Held() != 0 {
		t.Errorf("Held = %d; want 0", b.Held())
	}
}

func TestTheKeyOfAMessage(t *testing.T) {
	m := &Message{Key: []byte("k1"), Header: map[string][]string{"merchant-id": {"m-7", "m-8"}},
		Payload: []byte(`{"order":{"id":42,"merchant":"acme","paid":true,"tags":[1]}}`)}
	tests := []struct{ from, want string }{
		{"kafka_key", "k1"},
		{"header:Merchant-Id", "m-7"}, // any case, the first value
		{"header:X-Other", "none"},
		{"json:order.merchant", "acme"},
		{"json:order.id", "42"},
		{"json:order.paid", "true"},
		{"json:order.tags", "none"}, // an array is no key
		{"json:order.missing", "none"},
	}
	for _, tt := range tests {
		if got := keyFunc(&KeyConfig{From: tt.from, Missing: "none"}, nil)(m); got != tt.want {
			t.Errorf("key from %s = %q; want %q", tt.from, got, tt.want)
		}
	}
	// Under key.from: host the key is the destination the sink names
	// (sinks' TestDestinationIsTheCanonicalOrigin checks the names).
	dest := func(m *Message) string { return m.Header["Dest"][0] }
	host := keyFunc(&KeyConfig{From: "host", URLFrom: "header:Notify-Url", Missing: "none"}, dest)
	for name, want := range map[string]string{"https://pay.merchant.example:8443": "https://pay.merchant.example:8443", "": "none"} {
		if got := host(&Message{Header: map[string][]string{"Dest": {name}}}); got != want {
			t.Errorf("key from host of destination %q = %q; want %q", name, got, want)
		}
	}
	if got := keyFunc(&KeyConfig{From: "host", Missing: "none"}, nil)(&Message{}); got != "none" {
		t.Errorf("key from host with a sink that names no destination = %q; want the missing key", got)
	}
	if got := keyFunc(&KeyConfig{From: "json:a", Missing: "none"}, nil)(&Message{Payload: []byte("not json")}); got != "none" {
		t.Errorf("key of a payload that is not JSON = %q; want the missing key", got)
	}
}

// perKeyLimiter is a leaky limiter of limit per second, as the config
// package makes for rate.per_key, on the test's own times.
func perKeyLimiter(limit float64) func(string, time.Time) Limiter {
	return func(_ string, now time.Time) Limiter {
		l, err := limiter.New(limiter.Config{Mode: limiter.Leaky, Limit: limit, Burst: 1}, now)
		if err != nil {
			panic(err)
		}
		return l
	}
}

// Under rate.per_key a lane is ready only once its own slot has come; take
// says when the next lane's slot comes, and lanes still take turns.
func TestALaneWaitsForItsOwnSlotAndIsForgottenOnceItsLimiterIsAsNew(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := newBucket(100, laneOptions{limiter: perKeyLimiter(10), idle: 100 * time.Millisecond})
	key := keyFunc(&KeyConfig{From: "header:Key"}, nil)
	b.admit(now, keyed("A", 3), key)
	b.admit(now, keyed("B", 1), key)
	var got []string
	at := now
	for len(got) < 4 {
		tk, due := b.take(at)
		if tk == nil {
			if due.IsZero() || !due.After(at) {
				t.Fatalf("take(%v) = nil, %v; want a later time to wake", at.Sub(now), due)
			}
			at = due
			continue
		}
		b.spend(tk, at)
		got = append(got, fmt.Sprintf("%s@%v", tk.msg.Header["Key"][0], at.Sub(now)))
		b.release(tk)
	}
	if want := []string{"A@0s", "B@0s", "A@100ms", "A@200ms"}; !slices.Equal(got, want) {
		t.Errorf("departures %v; want %v", got, want)
	}
	if active, _ := b.keys(); active != 1 {
		t.Errorf("%d lanes right after the last departure; want 1 (A's limiter is not as new yet)", active)
	}
	if tk, due := b.take(at.Add(99 * time.Millisecond)); tk != nil || !due.Equal(at.Add(100*time.Millisecond)) {
		t.Errorf("take = %v, %v; want nil and A's idle time", tk, due)
	}
	b.take(at.Add(100 * time.Millisecond))
	if active, _ := b.keys(); active != 0 {
		t.Errorf("%d lanes once A's limiter is as new; want 0", active)
	}
}

// key.ordered: one message of a key out at a time; its retry goes before
// the key's next message, and holds back only its key.
func TestAnOrderedLaneLetsOneMessageOutAtATime(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := newBucket(100, laneOptions{ordered: true})
	key := keyFunc(&KeyConfig{From: "header:Key"}, nil)
	b.admit(now, keyed("A", 3), key)
	b.admit(now, keyed("B", 2), key)
	a0, _ := b.take(now)
	b0, _ := b.take(now)
	if tk, _ := b.take(now); tk != nil {
		t.Fatalf("took %s while A and B each have one in flight; want nothing", tk.msg.ID)
	}
	b.retry(a0, now.Add(time.Second)) // A's first waits for a retry
	b.release(b0)
	if tk, _ := b.take(now); tk == nil || tk.msg.Header["Key"][0] != "B" {
		t.Fatalf("take = %v; want B's second (A is held by its retry)", tk)
	}
	if tk, due := b.take(now); tk != nil || !due.Equal(now.Add(time.Second)) {
		t.Fatalf("take = %v, %v; want nil until A's retry is due", tk, due)
	}
	if tk, _ := b.take(now.Add(time.Second)); tk != a0 {
		t.Fatalf("take at the retry's due time = %v; want A's first again", tk)
	}
	b.release(a0)
	if tk, _ := b.take(now.Add(time.Second)); tk == nil || tk.msg.ID != "A/1" {
		t.Fatalf("take after A's first settled = %v; want A/1", tk)
	}
}
