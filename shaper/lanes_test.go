package shaper

import (
	"slices"
	"testing"
	"time"
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
	key := keyFunc(&KeyConfig{From: "header:Key"})
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
	key := keyFunc(&KeyConfig{From: "header:Key"})
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
		if got := keyFunc(&KeyConfig{From: tt.from, Missing: "none"})(m); got != tt.want {
			t.Errorf("key from %s = %q; want %q", tt.from, got, tt.want)
		}
	}
	if got := keyFunc(&KeyConfig{From: "json:a", Missing: "none"})(&Message{Payload: []byte("not json")}); got != "none" {
		t.Errorf("key of a payload that is not JSON = %q; want the missing key", got)
	}
}
