package tuning

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// HeapFloor is the heap size under which the collector does not run with
// the heap knob on: the runtime's own floor (4 MiB at GOGC 100) raised.
// Above it the heap grows to twice the live heap between collections, as
// at GOGC 100.
//
// A paced daemon keeps little alive but allocates per message (the
// request, its context and timer, the broker's message): at the runtime's
// floor it collects often at thousands of messages a second, and each
// collection's marking delays some departures past what the limiter lets
// a late caller keep. The cost is at most the floor, and nothing once the
// live heap is half of it. docs/tuning.md has the measurements.
const HeapFloor = 8 << 20

// runtimeHeapMinimum is the runtime's heap floor at GOGC 100; it grows in
// proportion to GOGC (runtime/mgcpacer.go, defaultHeapMinimum).
const runtimeHeapMinimum = 4 << 20

// gcPercent is the GOGC under which a heap of live bytes is next collected
// at max(2 × live, HeapFloor): the runtime collects at the larger of its
// floor, which grows with GOGC, and live × (1 + GOGC/100).
func gcPercent(live uint64) int {
	if 2*live >= HeapFloor {
		return 100
	}
	p := uint64(100 * HeapFloor / runtimeHeapMinimum) // the runtime's floor is HeapFloor
	if live > 0 {
		p = min(p, 100*HeapFloor/live-100) // live × (1 + p/100) is within it
	}
	return int(max(p, 100))
}

// gcPace sets GOGC after each collection from the live heap it found (see
// HeapFloor). A GOGC set in the environment is the operator's choice,
// and gcPace never changes it. It is the GOGC tuner of TiDB and Uber's
// services, with a floor instead of a memory target.
type gcPace struct {
	stopped atomic.Bool
	percent int // set last; only the cleanup of one collection at a time uses it
}

// StartHeapFloor sets GOGC for the live heap after every collection until
// stop is called (see HeapFloor). With the heap knob not in k, or GOGC set in
// the environment (the operator's choice), it does nothing.
func (k Knobs) StartHeapFloor() (stop func()) {
	if !k.Has(KnobHeap) || os.Getenv("GOGC") != "" {
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
