package shaper

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// benchLanes are the numbers of active lanes the lane benchmarks hold.
var benchLanes = []int{1, 100, 10_000, 100_000}

// BenchmarkTakeWithActiveLanes is the cost of one scheduling decision with
// n lanes that each hold a message ready. One op is one departure's
// bookkeeping in the bucket, as the scheduler does it, with the task put
// back instead of sent:
//
//	t := take(now)     // the decision: the ready lane whose turn it is
//	spend(t, now)      // the lane's per-key slot (a lock alone without one)
//	retry(t, now)      // t back in its lane, due at once, as after a failed attempt
//
// so three acquisitions of the bucket's lock and one non-blocking signal
// to the scheduler; the retry stands for admitting a new message, which
// would allocate its task (and measure that instead of the decision). Each
// lane holds one message, which goes round through its retry heap.
//
// turns: the lanes share the rate in turns (no rate.per_key); every lane
// stays in the ring and take moves the turn on; the time stands still.
// per_key: each lane has its own leaky limiter of 1/s, the lanes' slots
// spread evenly over each second (their keys came 1s/n apart), and the
// scheduler is ahead of them: each decision waits for the next lane's slot.
// So the op holds two takes: the first files the lane served last in the
// timed heap (its slot is a second away), finds no lane ready and says
// when the next slot comes; the fake time moves on to it (the scheduler's
// sleep) and the second take pops that lane from the heap and returns its
// task: one push and one pop of the timed heap per decision.
//
// Setup and two rounds of n decisions (which move every message to its
// retry heap and every per-key lane onto its schedule) are not timed.
func BenchmarkTakeWithActiveLanes(b *testing.B) {
	for _, perKey := range []bool{false, true} {
		name := "turns"
		if perKey {
			name = "per_key"
		}
		for _, n := range benchLanes {
			b.Run(fmt.Sprintf("%s/lanes=%d", name, n), func(b *testing.B) {
				benchTake(b, n, perKey)
			})
		}
	}
}

func benchTake(b *testing.B, n int, perKey bool) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	var o laneOptions
	if perKey {
		o.limiter, o.idle = perKeyLimiter(1), time.Second
	}
	bk := newBucket(n, o)
	key := keyFunc(&KeyConfig{From: "header:Key"}, nil)
	msgs := benchKeyed(n)
	if perKey {
		// Each key's first message is admitted and sent 1s/n after the
		// one before, so their slots are staggered from the first.
		for i, m := range msgs {
			now = start.Add(time.Duration(i) * time.Second / time.Duration(n))
			bk.admit(now, []*Message{m}, key)
			t, _ := bk.take(now)
			bk.spend(t, now)
			bk.retry(t, now)
		}
	} else {
		bk.admit(now, msgs, key)
	}
	if active, _ := bk.keys(); active != n {
		b.Fatalf("%d lanes after admitting %d keys; want %d", active, n, n)
	}
	decide := func(i int) {
		t, due := bk.take(now)
		for t == nil && !due.IsZero() {
			now = due // the scheduler sleeps until the next lane's slot (or asks again at once)
			t, due = bk.take(now)
		}
		if t == nil {
			b.Fatalf("decision %d at %v: no lane ready, and none due", i, now)
		}
		bk.spend(t, now)
		bk.retry(t, now)
	}
	for i := range 2 * n {
		decide(i)
	}
	if perKey && bk.timed.len() != n-1 {
		b.Fatalf("%d of %d lanes in the timed heap; want all but the lane served last", bk.timed.len(), n)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		decide(2*n + i)
	}
}

// BenchmarkLaneMemory is the heap a lane costs, with 100 000 lanes: the
// live heap after a GC with the lanes held, less the live heap before the
// bucket was made, per lane (B/lane; its ns/op is not reported). The
// messages and their keys are made before the first measure and kept
// alive, so neither counts: a key costs its own bytes besides. What
// counts is the lane, the bucket's map entry and slot in the ring or the
// timed heap, the lane's FIFO and, where it holds one, the task of its
// message and its own limiter.
//
// active: a lane holding one message (no rate.per_key). active_per_key: the
// same with its own limiter. idle_per_key: a key remembered only for its
// limiter: its one message was taken, its slot spent and the message
// settled, and its limiter is not yet as new.
func BenchmarkLaneMemory(b *testing.B) {
	const n = 100_000
	cases := []struct {
		name         string
		perKey, idle bool
	}{
		{"active", false, false},
		{"active_per_key", true, false},
		{"idle_per_key", true, true},
	}
	for _, c := range cases {
		b.Run(fmt.Sprintf("%s/lanes=%d", c.name, n), func(b *testing.B) {
			sum := 0.0
			for range b.N {
				sum += laneBytes(b, n, c.perKey, c.idle)
			}
			b.ReportMetric(sum/float64(b.N), "B/lane")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// laneBytes makes n lanes as BenchmarkLaneMemory says and returns the
// heap they take, per lane.
func laneBytes(b *testing.B, n int, perKey, idle bool) float64 {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	msgs := benchKeyed(n)
	key := keyFunc(&KeyConfig{From: "header:Key"}, nil)
	var o laneOptions
	if perKey {
		o.limiter, o.idle = perKeyLimiter(1), time.Hour
	}
	before := liveHeap()
	bk := newBucket(n, o)
	bk.admit(now, msgs, key)
	if idle {
		for range n {
			t, _ := bk.take(now)
			if t == nil {
				b.Fatal("take = nil with every lane's first message ready")
			}
			bk.spend(t, now)
			bk.release(t)
		}
	}
	if active, _ := bk.keys(); active != n {
		b.Fatalf("%d lanes; want %d", active, n)
	}
	if held := bk.Held(); idle && held != 0 || !idle && held != n {
		b.Fatalf("bucket holds %d messages with idle %v", held, idle)
	}
	after := liveHeap()
	runtime.KeepAlive(bk)
	runtime.KeepAlive(msgs)
	return float64(int64(after)-int64(before)) / float64(n)
}

// liveHeap returns the bytes of live heap objects, after a full GC.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// benchKeyed returns n messages with n distinct keys in header Key.
func benchKeyed(n int) []*Message {
	out := make([]*Message, n)
	for i := range out {
		k := fmt.Sprintf("key-%06d", i)
		out[i] = &Message{ID: k, Header: map[string][]string{"Key": {k}}}
	}
	return out
}
