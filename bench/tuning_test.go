package main

import (
	"testing"

	"github.com/shaper-dev/shaper/internal/tuning"
)

// The tuning section has a row with every knob on, one with every knob
// off, and one for each knob of package tuning off alone, each a value
// SHAPER_TUNING takes.
func TestTuningRowsCoverEveryKnobOffAlone(t *testing.T) {
	envs := map[string]bool{}
	for _, r := range tuningRows {
		envs[r.Env] = true
	}
	want := []string{tuning.All.String(), tuning.Knobs(0).String()}
	for _, k := range []tuning.Knobs{tuning.KnobClock, tuning.KnobProcs, tuning.KnobHeap, tuning.KnobConn} {
		want = append(want, (tuning.All &^ k).String())
	}
	for _, w := range want {
		if !envs[w] {
			t.Errorf("no row with SHAPER_TUNING=%s; rows: %v", w, tuningRows)
		}
	}
}
