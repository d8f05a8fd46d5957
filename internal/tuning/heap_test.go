package tuning

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestGCPercentHoldsTheHeapToTheFloorOrTwiceTheLiveHeap(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		live uint64
		want int
	}{
		{0, 200},        // the runtime's floor at GOGC 200 is 8 MiB
		{mib / 2, 200},  // not 1500: the runtime's floor would be 60 MiB
		{2 * mib, 200},  // 2 × 3 MiB is within the floor
		{3 * mib, 166},  // 3 × 2.66 MiB is within the floor
		{4 * mib, 100},  // twice the live heap is the floor: GOGC 100
		{64 * mib, 100}, // larger: GOGC 100
	}
	for _, tt := range tests {
		if got := gcPercent(tt.live); got != tt.want {
			t.Errorf("gcPercent(%d) = %d; want %d", tt.live, got, tt.want)
		}
		// What the runtime will aim at: max(floor, live × (1 + GOGC/100)).
		p := uint64(gcPercent(tt.live))
		goal := max(runtimeHeapMinimum*p/100, tt.live+tt.live*p/100)
		if want := max(2*tt.live, HeapFloor); goal > want {
			t.Errorf("live %d: heap goal %d; want at most max(2 × live, floor) = %d", tt.live, goal, want)
		}
	}
}

// gogc reads the GOGC in force.
func gogc() uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// collected is what collect's collection finds unreachable; it holds a
// pointer so that it is never one of the runtime's tiny allocations, whose
// cleanups may never run.
type collected struct{ _ *byte }

// collect runs a collection and waits until the runtime has run cleanups
// after it: one of its own, attached to an object the collection frees.
// Cleanups run concurrently, so one attached to another object may still
// be running.
func collect(t *testing.T) {
	t.Helper()
	ran := make(chan struct{})
	runtime.AddCleanup(new(collected), func(ran chan struct{}) { close(ran) }, ran)
	runtime.GC()
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("no cleanup ran within 10s of a collection")
	}
}

// StartHeapFloor raises GOGC for a small live heap once the collector has
// run; it leaves GOGC alone when GOGC is set in the environment, and when
// the heap knob is off.
func TestStartHeapFloorSetsGOGCAfterACollectionUnlessOffOrSetInTheEnvironment(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	// Three collections, each until cleanups ran after it: a pace that
	// wrongly ran would have set GOGC after the first.
	collect3 := func() {
		for range 3 {
			collect(t)
		}
	}

	t.Setenv("GOGC", "100")
	stop := All.StartHeapFloor()
	collect3()
	if got := gogc(); got != 100 {
		t.Errorf("with GOGC=100 in the environment: GOGC = %d after three collections; want 100", got)
	}
	stop()

	t.Setenv("GOGC", "")
	stop = (All &^ KnobHeap).StartHeapFloor()
	collect3()
	if got := gogc(); got != 100 {
		t.Errorf("with the heap knob off: GOGC = %d after three collections; want 100", got)
	}
	stop()

	stop = All.StartHeapFloor()
	defer stop()
	want := gcPercent(0) // the most it sets; this test's live heap is under half the floor
	deadline := time.Now().Add(10 * time.Second)
	for gogc() <= 100 && time.Now().Before(deadline) {
		collect(t)
	}
	if got := gogc(); got <= 100 || got > uint64(want) {
		t.Errorf("GOGC = %d after collections with a live heap under %d bytes; want in (100, %d]", got, HeapFloor/2, want)
	}
}
