package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/sinktest"
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
		if want := max(2*tt.live, heapFloor); goal > want {
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

func TestGCPaceSetsGOGCAfterACollectionAndLeavesTheEnvironmentsAlone(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	// Three collections, each until cleanups ran after it: a pace that
	// wrongly ran would have set GOGC after the first.
	t.Setenv("GOGC", "100")
	stop := startGCPace()
	for range 3 {
		collect(t)
	}
	if got := gogc(); got != 100 {
		t.Errorf("with GOGC=100 in the environment: GOGC = %d after three collections; want 100", got)
	}
	stop()

	t.Setenv("GOGC", "")
	stop = startGCPace()
	defer stop()
	want := gcPercent(0) // the most it sets; this test's live heap is under half the floor
	deadline := time.Now().Add(10 * time.Second)
	for gogc() <= 100 && time.Now().Before(deadline) {
		collect(t)
	}
	if got := gogc(); got <= 100 || got > uint64(want) {
		t.Errorf("GOGC = %d after collections with a live heap under %d bytes; want in (100, %d]", got, heapFloor/2, want)
	}
}

// A real daemon with a small bucket, its live heap under half the floor,
// runs at a GOGC above 100 once it has collected; with GOGC in the
// environment it runs at that one.
func TestTheDaemonRaisesGOGCForASmallHeapUnlessGOGCIsSet(t *testing.T) {
	natsURL := startJetStream(t, 1000)
	sink := sinktest.Start(t, sinktest.OK)
	config := childtest.WriteConfig(t, childtest.Pipeline{
		Source: natsSource(natsURL),
		Bucket: "{capacity: 10, max_queue_time: 1m}",
		Rate:   "{limit: 200}",
		Sink:   httpSink(sink.URL, 4),
	}.YAML())

	for _, tt := range []struct {
		env  string
		want string
		ok   func(gogc float64) bool
	}{
		{"GOGC=", fmt.Sprintf("in (100, %d]", gcPercent(0)), func(g float64) bool { return g > 100 && g <= float64(gcPercent(0)) }},
		{"GOGC=50", "50", func(g float64) bool { return g == 50 }},
	} {
		c := startShaper(t, []string{tt.env}, "run", "--config", config)
		// The deliveries and these scrapes allocate: collections happen.
		c.WaitMetrics(30*time.Second, tt.env+": a collection, then GOGC "+tt.want, func(m childtest.Metrics) bool {
			return m.Sum("go_gc_duration_seconds_count") >= 1 && tt.ok(m.Sum("go_gc_gogc_percent"))
		})
		c.Stop()
	}
}
