package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/tuning"
)

// A real daemon with a small bucket, its live heap under half the floor,
// runs at a GOGC above 100 once it has collected; with GOGC in the
// environment it runs at that one, and with SHAPER_TUNING=off at 100.
func TestTheDaemonRaisesGOGCForASmallHeapUnlessGOGCIsSetOrTuningOff(t *testing.T) {
	natsURL := startJetStream(t, 1000)
	sink := sinktest.Start(t, sinktest.OK)
	config := childtest.WriteConfig(t, childtest.Pipeline{
		Source: natsSource(natsURL),
		Bucket: "{capacity: 10, max_queue_time: 1m}",
		Rate:   "{limit: 200}",
		Sink:   httpSink(sink.URL, 4),
	}.YAML())

	maxGOGC := 100 * tuning.HeapFloor / (4 << 20) // the runtime's own floor is 4 MiB at GOGC 100
	for _, tt := range []struct {
		env  string
		want string
		ok   func(gogc float64) bool
	}{
		{"GOGC=", fmt.Sprintf("in (100, %d]", maxGOGC), func(g float64) bool { return g > 100 && g <= float64(maxGOGC) }},
		{"GOGC=50", "50", func(g float64) bool { return g == 50 }},
		{tuning.EnvVar + "=off", "100", func(g float64) bool { return g == 100 }},
	} {
		c := startShaper(t, []string{tt.env}, "run", "--config", config)
		// The deliveries and these scrapes allocate: collections happen.
		c.WaitMetrics(30*time.Second, tt.env+": a collection, then GOGC "+tt.want, func(m childtest.Metrics) bool {
			return m.Sum("go_gc_duration_seconds_count") >= 3 && tt.ok(m.Sum("go_gc_gogc_percent"))
		})
		c.Stop()
	}
}
