package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// heapFloor is the heap size under which the collector does not run: the
// runtime's own floor (4 MiB at GOGC 100) raised. Above it the heap grows
// to twice the live heap between collections, as at GOGC 100.
//
// A paced daemon keeps little alive (2 MiB at 5000/s with a bucket of 1000)
// but allocates per message (the request, its context and timer, the
// broker's message): at the runtime's floor it collected every 80 ms at
// 5000/s, and each collection's marking delays some departures past what
// the limiter lets a late caller keep. With an 8 MiB floor they are half
// as frequent: at 5000/s JetStream → HTTP, 72 in 11 s against 153, rate
// error −0.92% against −1.50%, CPU per message 75 µs against 85 (3 runs
// each). The cost is at most the floor, and nothing once the live heap is
// 4 MiB or more: the 100 000-message Kafka backlog at max_in_flight 64,
// which reaches that, peaked at 39.0 MiB RSS against 38.4 at GOGC 100.
const heapFloor = 8 << 20

// runtimeHeapMinimum is the runtime's heap floor at GOGC 100; it grows in
// proportion to GOGC (runtime/mgcpacer.go, defaultHeapMinimum).
const runtimeHeapMinimum = 4 << 20

// gcPercent is the GOGC under which a heap of live bytes is next collected
// at max(2 × live, heapFloor): the runtime collects at the larger of its
// floor, which grows with GOGC, and live × (1 + GOGC/100).
func gcPercent(live uint64) int {
	if 2*live >= heapFloor {
		return 100
	}
	p := uint64(100 * heapFloor / runtimeHeapMinimum) // the runtime's floor is heapFloor
	if live > 0 {
		p = min(p, 100*heapFloor/live-100) // live × (1 + p/100) is within it
	}
	return int(max(p, 100))
}

// gcPace sets GOGC after each collection from the live heap it found (see
// heapFloor). A GOGC set in the environment is the operator's choice,
// and gcPace never changes it. It is the GOGC tuner of TiDB and Uber's
// services, with a floor instead of a memory target.
type gcPace struct {
	stopped atomic.Bool
	percent int // set last; only the cleanup of one collection at a time uses it
}

// startGCPace sets GOGC for the live heap after every collection until stop
// is called, unless GOGC is set in the environment (then stop does
// nothing).
func startGCPace() (stop func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	g := &gcPace{percent: 100}
	g.arm()
	return func() { g.stopped.Store(true) }
}

// gcSentinel is what a collection finds unreachable, so that the runtime
// runs gcPace's cleanup after it. It holds a pointer so that it is never
// one of the runtime's tiny allocations, whose cleanups may never run.
type gcSentinel struct{ _ *byte }

// arm asks the runtime to call collected after the next collection.
func (g *gcPace) arm() {
	runtime.AddCleanup(new(gcSentinel), (*gcPace).collected, g)
}

// collected runs on the runtime's cleanup goroutine after a collection: it
// sets GOGC for the live heap and asks to be called again, unless stopped.
func (g *gcPace) collected() {
	if g.stopped.Load() {
		return
	}
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	if live[0].Value.Kind() == metrics.KindUint64 {
		if p := gcPercent(live[0].Value.Uint64()); p != g.percent {
			g.percent = p
			debug.SetGCPercent(p)
		}
	}
	g.arm()
}
