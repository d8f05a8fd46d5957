package main

import (
	"strings"
	"testing"
)

func TestParseLaneMemoryTakesTheMedianOfEachKind(t *testing.T) {
	out := `goos: linux
BenchmarkLaneMemory/active/lanes=100000-2         	       1	       380.0 B/lane
BenchmarkLaneMemory/idle_per_key/lanes=100000-2   	       1	       372.5 B/lane
BenchmarkLaneMemory/active/lanes=100000-2         	       1	       378.0 B/lane
BenchmarkLaneMemory/active/lanes=100000-2         	       1	       390.0 B/lane
BenchmarkTakeWithActiveLanes/turns/lanes=1-2      	 5000000	        47.0 ns/op
PASS
`
	got := parseLaneMemory(out)
	want := []LaneMemory{
		{Name: "active", Lanes: 100_000, BytesPerLane: 380, Runs: 3},
		{Name: "idle_per_key", Lanes: 100_000, BytesPerLane: 372.5, Runs: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("parseLaneMemory = %+v; want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("parseLaneMemory[%d] = %+v; want %+v", i, got[i], want[i])
		}
	}
}

func TestLanesGoalsHoldTheDecisionAndTheCPURatioToTheirTargets(t *testing.T) {
	s := &LanesSection{
		Decisions: []LimiterBench{
			{Name: "TakeWithActiveLanes/turns/lanes=10000", NsPerOp: 50},
			{Name: "TakeWithActiveLanes/per_key/lanes=10000", NsPerOp: 300},
		},
		CPU:      []LaneCPU{{Keys: 1, ChildCost: ChildCost{ShaperUs: 100}}, {Keys: 10_000, ChildCost: ChildCost{ShaperUs: 125}}},
		CPURatio: 1.25,
	}
	tests := []struct {
		give string // a part of the goal's text
		want bool
	}{
		{"(keys in turns)", true},
		{"(rate.per_key)", false},
		{"within 20% of 1 lane", false},
	}
	goals := s.goals()
	if len(goals) != len(tests) {
		t.Fatalf("goals() = %+v; want %d goals", goals, len(tests))
	}
	for i, tt := range tests {
		if g := goals[i]; !strings.Contains(g.Goal, tt.give) || g.Met != tt.want {
			t.Errorf("goal %d = %q met %v; want one about %q, met %v", i, g.Goal, g.Met, tt.give, tt.want)
		}
	}
}
