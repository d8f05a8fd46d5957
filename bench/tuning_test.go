package main

import (
	"fmt"
	"strings"
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

// The section's table has a line per row of each case, the limit on the
// first, and the ratio to the row with every knob on.
func TestTuningMarkdownShowsEachRowWithItsRatioToOn(t *testing.T) {
	s := &TuningSection{Runs: 3, WarmupSeconds: 2, WindowSeconds: 8, Rows: tuningRows}
	for _, limit := range []float64{100, 1000} {
		c := PeerCase{Limit: limit}
		for i, r := range tuningRows {
			c.Parties = append(c.Parties, PeerParty{Label: r.Env, Median: PeerRun{CPUUs: 200 + 100*float64(i)}, CPURatio: 1 + 0.5*float64(i)})
		}
		s.Cases = append(s.Cases, c)
	}
	var b strings.Builder
	s.markdown(func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }, &Report{})
	out := b.String()
	for _, want := range []string{"| 100/s | `on` | 200 µs", "|  | `off` | 300 µs (0%) | 1.50× |", "| 1000/s | `on` |", "`off:conn`"} {
		if !strings.Contains(out, want) {
			t.Errorf("the tuning section lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n| "); n != 1+2*len(tuningRows) {
		t.Errorf("%d table lines; want a header and %d rows", n, 2*len(tuningRows))
	}
}
