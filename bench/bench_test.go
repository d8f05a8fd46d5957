package main

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shaper-dev/shaper/internal/window"
	"github.com/shaper-dev/shaper/shaper"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms ...float64) []time.Time {
	out := make([]time.Time, len(ms))
	for i, m := range ms {
		out[i] = t0.Add(time.Duration(m * float64(time.Millisecond)))
	}
	return out
}

// reserveBacklog takes n slots the way the pipeline's scheduler does with a
// backlog: it asks Next at the time the previous slot went, and takes the
// slot with Allow at its time.
func reserveBacklog(l shaper.Limiter, from time.Time, n int) []time.Time {
	out := make([]time.Time, n)
	now := from
	for i := range out {
		out[i] = l.Next(now)
		if !l.Allow(out[i]) {
			panic("Allow refused the slot Next told, at its time")
		}
		now = out[i]
	}
	return out
}

func TestFixedWindowSendsEachWindowsCountAtOnceAndTwiceItAcrossAnEdge(t *testing.T) {
	origin := t0
	f := newFixedWindow(10, origin)
	// Start 0.7s into the first window, as the precision run does.
	slots := reserveBacklog(f, origin.Add(700*time.Millisecond), 30)
	for i, s := range slots {
		var want time.Time
		switch {
		case i < 10:
			want = origin.Add(700 * time.Millisecond)
		default:
			want = origin.Add(time.Duration(i/10) * time.Second)
		}
		if !s.Equal(want) {
			t.Fatalf("slot %d = %v; want %v", i, s.Sub(origin), want.Sub(origin))
		}
	}
	if got := window.Most(slots, time.Second); got != 20 {
		t.Errorf("most slots in any 1s window = %d; want 20 (2× the limit across an edge)", got)
	}
}

func TestXRateSpacesABacklogOneIntervalApart(t *testing.T) {
	x := newXRate(100, 1)
	slots := reserveBacklog(x, t0, 5)
	for i := 1; i < len(slots); i++ {
		if gap := slots[i].Sub(slots[i-1]); gap != 10*time.Millisecond {
			t.Errorf("gap %d = %v; want 10ms", i, gap)
		}
	}
}

func TestJitterAndPacedRateOfEvenArrivals(t *testing.T) {
	ts := at(0, 10, 20, 31, 40, 50)
	if got, want := pacedRate(ts), 100.0; math.Abs(got-want) > 1e-9 {
		t.Errorf("pacedRate = %v; want %v", got, want)
	}
	p50, p99 := jitter(ts, 10*time.Millisecond)
	if p50 != 0 || p99 != 1000 {
		t.Errorf("jitter = %v, %v µs; want 0, 1000", p50, p99)
	}
}

func TestWindowRateCountsWholeWindows(t *testing.T) {
	// Bursts of 5 at 0.7s, then at each edge 1s, 2s, 3s, 4s.
	var ts []time.Time
	for _, edge := range []float64{700, 1000, 2000, 3000, 4000} {
		for i := range 5 {
			ts = append(ts, at(edge+float64(i))...)
		}
	}
	// From 1.5s: whole windows [2s, 4s) hold 10.
	if got := windowRate(ts, t0, t0.Add(1500*time.Millisecond)); got != 5 {
		t.Errorf("windowRate = %v; want 5", got)
	}
}

func TestParseBenchmarksTakesTheMedianOfEachSubBenchmark(t *testing.T) {
	out := `goos: linux
BenchmarkReserve/shaper-leaky-2   	1000	 20.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkReserve/x-time-rate-2    	1000	 30.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkReserve/shaper-leaky-2   	1000	 22.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkReserve/shaper-leaky-2   	1000	 50.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkLaneMemory/active/lanes=100000-2         	       1	       380.0 B/lane
BenchmarkLaneMemory/idle_per_key/lanes=100000-2   	       1	       372.5 B/lane
BenchmarkLaneMemory/active/lanes=100000-2         	       1	       378.0 B/lane
BenchmarkLaneMemory/active/lanes=100000-2         	       1	       390.0 B/lane
PASS
`
	got := limiterBenchmarks(parseBenchmarks(out))
	if len(got) != 2 || got[0].Name != "Reserve/shaper-leaky" || got[1].Name != "Reserve/x-time-rate" {
		t.Fatalf("limiterBenchmarks names = %+v; want Reserve/shaper-leaky, Reserve/x-time-rate", got)
	}
	if l := got[0]; l.NsPerOp != 22 || l.NsMin != 20 || l.NsMax != 50 || l.Runs != 3 {
		t.Errorf("limiterBenchmarks(shaper-leaky) = %+v; want median 22, range 20–50, 3 runs", l)
	}
	mem := laneMemory(parseBenchmarks(out))
	want := []LaneMemory{{Name: "active", Lanes: 100_000, BytesPerLane: 380, Runs: 3}, {Name: "idle_per_key", Lanes: 100_000, BytesPerLane: 372.5, Runs: 1}}
	if len(mem) != len(want) || mem[0] != want[0] || mem[1] != want[1] {
		t.Errorf("laneMemory = %+v; want %+v", mem, want)
	}
}

var pushbackSteps = []PushbackStep{{At: 0, Capacity: 3}, {At: 2, Capacity: 1}}

func TestSlidingContractAdmitsTheCapacityOfItsStepInAnySecond(t *testing.T) {
	c := &slidingContract{steps: pushbackSteps}
	tests := []struct {
		give float64 // ms from the first request
		want bool
	}{
		{0, true}, {100, true}, {200, true},
		{300, false},    // a fourth within the second
		{999, false},    // the first is not a second old yet
		{1000, true},    // it is now
		{1050, false},   // 100, 200 and 1000 fill the window again
		{1200, true},    // 100 has left it
		{2100, false},   // step 2: one per second, and 1200 is still within it
		{2250, true},    // 1200 has left
		{2500, false},   // 2250 fills it
		{3250, true},    // 2250 has left
		{3250.5, false}, // and it is full again
	}
	for _, tt := range tests {
		if got := c.admit(t0.Add(time.Duration(tt.give * float64(time.Millisecond)))); got != tt.want {
			t.Errorf("admit(%vms) = %v; want %v", tt.give, got, tt.want)
		}
	}
	if !c.start().Equal(t0) {
		t.Errorf("start() = %v; want the first request's time", c.start())
	}
}

func TestFollowTimeIsWhenTheRateStaysWithinTenPercentForTwoSeconds(t *testing.T) {
	samples := func(delivered ...float64) []PushbackSample {
		out := make([]PushbackSample, len(delivered))
		for i, d := range delivered {
			out[i] = PushbackSample{T: float64(i) * 0.5, Delivered: d}
		}
		return out
	}
	tests := []struct {
		name string
		give []PushbackSample
		want float64
	}{
		{"at once", samples(30, 30, 30, 30, 30, 30, 30), 0},
		{"within the band at 27 and 33", samples(50, 33, 27, 30, 33, 27, 30), 0.5},
		{"a dip restarts the hold", samples(30, 30, 20, 30, 30, 30, 30, 30, 30), 1.5},
		{"never", samples(50, 40, 35, 34, 50, 50, 50), -1},
		{"not held long enough before the next step", samples(50, 50, 50, 50, 30, 30, 30), -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := followTime(tt.give, 0, float64(len(tt.give)-1)*0.5, 30); got != tt.want {
				t.Errorf("followTime = %v; want %v", got, tt.want)
			}
		})
	}
}

func TestMeasurePushbackCountsEachStepsSteadyState(t *testing.T) {
	sec := &PushbackSection{Steps: pushbackSteps, Seconds: 4, SettleSeconds: 1, SampleMs: 500}
	// Step 1 (0-2 s, steady from 1 s): 2xx at 1.1 1.4 1.7, a 429 at 1.8.
	// Step 2 (2-4 s, steady from 3 s): 2xx at 2.5 3.5, 429s at 2.6 3.6.
	ok := at(100, 400, 1100, 1400, 1700, 2500, 3500)
	refused := at(1800, 2600, 3600)
	// The limit in force: 3 to 2.5 s, then 1.
	var limits []limitAt
	for ms := 500.0; ms <= 4000; ms += 500 {
		limits = append(limits, limitAt{at: at(ms)[0], limit: map[bool]float64{true: 3, false: 1}[ms <= 2500]})
	}
	run := measurePushback(sec, t0, ok, refused, limits)
	if len(run.Samples) != 8 || run.Samples[3].T != 2 || run.Samples[3].Delivered != 3 || run.Samples[3].Capacity != 1 || run.Samples[3].Throttled != 1 {
		t.Errorf("sample at 2 s = %+v of %d; want 3 delivered in (1 s, 2 s], capacity 1, one 429", run.Samples[3], len(run.Samples))
	}
	if run.Requests != 10 || run.Throttled != 3 || run.Delivered != 7 || run.Admissible != 8 {
		t.Errorf("run: %d requests, %d 429s, %d delivered of %d; want 10, 3, 7 of 8", run.Requests, run.Throttled, run.Delivered, run.Admissible)
	}
	want := []PushbackFollow{
		{At: 0, Capacity: 3, SteadyRate: 3, SteadyRequests: 4, SteadyThrottled: 1, SteadyThrottledPct: 25},
		{At: 2, Capacity: 1, SteadyRate: 1, SteadyRequests: 2, SteadyThrottled: 1, SteadyThrottledPct: 50},
	}
	for i, w := range want {
		got := run.Steps[i]
		got.FollowSeconds, got.LimitSeconds = 0, nil
		if got != w {
			t.Errorf("step %d = %+v; want %+v", i, got, w)
		}
	}
	// The limit in force is within 10% of 3 from the first sample, of 1
	// from 3 s (a second after the step).
	for i, want := range []float64{0.5, 1} {
		if got := run.Steps[i].LimitSeconds; got == nil || *got != want {
			t.Errorf("step %d: limit within 10%% after %v s; want %v", i, got, want)
		}
	}
	if run.SteadyRequests != 6 || run.SteadyThrottled != 2 {
		t.Errorf("steady states: %d requests, %d 429s; want 6, 2", run.SteadyRequests, run.SteadyThrottled)
	}
}

// TestRenderedDocsAreTheFiguresOfBenchmarksJSON renders docs/benchmarks.json
// again, as `go run ./bench -render` does, and finds docs/benchmarks.md and
// the pictures as they are: the page holds what the JSON holds.
func TestRenderedDocsAreTheFiguresOfBenchmarksJSON(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := rerender(filepath.Join(root, "docs", "benchmarks.json"), out); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"benchmarks.md", "shaping.svg", "pushback.svg", "lanes.svg"} {
		got, err1 := os.ReadFile(filepath.Join(out, name))
		want, err2 := os.ReadFile(filepath.Join(root, "docs", name))
		if err := errors.Join(err1, err2); err != nil || string(got) != string(want) {
			t.Errorf("%s rendered from docs/benchmarks.json differs from docs/%s (%v): run go run ./bench -render docs/benchmarks.json", name, name, err)
		}
	}
}

func TestGoalsAreHeldToTheirTargets(t *testing.T) {
	lanes := &LanesSection{
		Decisions: []LimiterBench{{Name: "TakeWithActiveLanes/turns/lanes=10000", NsPerOp: 50}, {Name: "TakeWithActiveLanes/per_key/lanes=10000", NsPerOp: 300}},
		CPU:       []LaneCPU{{Keys: 1, Window: Window{ChildCost: ChildCost{ShaperUs: 100}}}, {Keys: 10_000, Window: Window{ChildCost: ChildCost{ShaperUs: 125}}}},
		CPURatio:  1.25,
	}
	destinations := func(maxConnections int64) *DestinationsSection {
		return &DestinationsSection{Hosts: 1000, Limit: 2000, MaxInFlightPerHost: 2, Runs: []DestinationRun{
			{Name: destinationsFixed, Hosts: 1, Requests: 100, HostsReached: 1, Connections: 1, MaxConnections: 1},
			{Name: destinationsMany, Hosts: 1000, Requests: 40_000, HostsReached: 1000, Connections: 1000 * maxConnections, MaxConnections: maxConnections},
		}}
	}
	tests := []struct {
		name string
		give *Report
		want map[string]bool // a part of each goal's text, and whether it is met
	}{
		{"lanes", &Report{Lanes: lanes}, map[string]bool{"(keys in turns)": true, "(rate.per_key)": false, "within 20% of 1 lane": false}},
		{"connections reused", &Report{Destinations: destinations(2)}, map[string]bool{"connections opened per host": true}},
		{"one connection too many", &Report{Destinations: destinations(3)}, map[string]bool{"connections opened per host": false}},
		{"a connection per request", &Report{Destinations: destinations(40)}, map[string]bool{"connections opened per host": false}},
		{"fleet", &Report{Fleet: &FleetSection{StallMs: 100, StallEveryMs: 400, Runs: []FleetRun{
			{Replicas: 3, Limit: 100, RateErrPct: -0.5, Max100ms: 13, Allowed100ms: 13, CallsPerRequest: 0.5},
			{Replicas: 3, Limit: 1000, RateErrPct: 0.9, Max100ms: 103, Allowed100ms: 103, CallsPerRequest: 0.05},
			{Replicas: 3, Limit: 1000, Stalled: true, RateErrPct: -1.2, Max100ms: 104, Allowed100ms: 103, CallsPerRequest: 0.1},
		}}}, map[string]bool{"every replica running": true, "while replica 0 of several is stopped": false, "limit/10 + replicas": false, "Redis calls per request": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			goals := tt.give.goals()
			if len(goals) != len(tt.want) {
				t.Fatalf("goals() = %+v; want %d goals", goals, len(tt.want))
			}
			for _, g := range goals {
				found := false
				for part, met := range tt.want {
					if strings.Contains(g.Goal, part) {
						found = true
						if g.Met != met {
							t.Errorf("goal %q met = %v (measured %s); want %v", g.Goal, g.Met, g.Measured, met)
						}
					}
				}
				if !found {
					t.Errorf("goal %q: not one of %v", g.Goal, tt.want)
				}
			}
		})
	}
}

func TestHostIPNamesDistinctLoopbackAddressesOutside127_0_0(t *testing.T) {
	tests := []struct {
		give int
		want string
	}{{0, "127.0.1.1"}, {249, "127.0.1.250"}, {250, "127.0.2.1"}, {999, "127.0.4.250"}, {maxFleet - 1, "127.0.254.250"}}
	for _, tt := range tests {
		if got := hostIP(tt.give); got != tt.want {
			t.Errorf("hostIP(%d) = %q; want %q", tt.give, got, tt.want)
		}
	}
}

// A section's load line names what the host took (steal) beside what other
// processes took, and marks the section load-affected by the two together.
func TestLoadLineCountsTheHostsStealAsLoad(t *testing.T) {
	tests := []struct {
		name           string
		load           Load
		steal, flagged bool
	}{
		{name: "quiet", load: Load{ForeignPct: 0.5, StealPct: 0.2}},
		{name: "steal alone", load: Load{ForeignPct: 0.5, StealPct: 7}, steal: true, flagged: true},
		{name: "together over the bound", load: Load{ForeignPct: 3, StealPct: 3}, steal: true, flagged: true},
		{name: "other processes alone", load: Load{ForeignPct: 6}, flagged: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line := loadLine(tt.load)
			if got := strings.Contains(line, "(steal)"); got != tt.steal {
				t.Errorf("loadLine(%+v) = %q; names steal %v, want %v", tt.load, line, got, tt.steal)
			}
			if got := strings.Contains(line, "Load-affected"); got != tt.flagged {
				t.Errorf("loadLine(%+v) = %q; load-affected %v, want %v", tt.load, line, got, tt.flagged)
			}
		})
	}
}
