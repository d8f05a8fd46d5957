package shaper

import (
	"math"
	"testing"
	"time"
)

// The adaptive rate on explicit times, one event a second: a tick without
// push-back ('+'), the limit in force lowered by someone else (another
// replica under rate.shared) to 80% before a tick ('s'), a push-back to an
// attempt that started that second
// ('p'), one to an attempt that started before the last decrease ('o': it
// answers the limit already lowered), a second the gate held ('h'). The
// tick after a push-back raises nothing; a hold only leaves its second
// out. want is the limit in force after each event.
func TestTheAdaptiveRateProbesUpwardAndStartsAgainAtAPushBack(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := AdaptiveConfig{Min: 5, Decrease: 0.8, Increase: 2}
	tests := []struct {
		name   string
		from   float64
		events string
		want   []float64
	}{
		{"two seconds of increase, then a rise that grows fivefold each second", 24, "++++++++",
			[]float64{26, 28, 38, 88, 100, 100, 100, 100}},
		{"a push-back starts the rise again from increase", 24, "+++++p+++++",
			[]float64{26, 28, 38, 88, 100, 80, 80, 82, 84, 94, 100}},
		{"a push-back in the same round trip lowers nothing but starts the rise again", 24, "++++p++++o+++++",
			[]float64{26, 28, 38, 88, 70.4, 70.4, 72.4, 74.4, 84.4, 84.4, 84.4, 86.4, 88.4, 98.4, 100}},
		{"a held second neither rises nor starts the rise again", 24, "++++h+++",
			[]float64{26, 28, 38, 88, 88, 100, 100, 100}},
		{"a limit lowered by someone else starts the rise again", 24, "++++s+++++",
			[]float64{26, 28, 38, 88, 72.4, 74.4, 84.4, 100, 100, 100}},
		{"never below min", 6, "pp+", []float64{5, 5, 5}},
		{"never above the ceiling", 97, "++++", []float64{99, 100, 100, 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAdaptive(cfg, 100)
			cur := tt.from
			var got []float64
			for i, e := range tt.events {
				now := t0.Add(time.Duration(i+1) * time.Second)
				switch e {
				case '+':
					if limit, changed, _ := a.tick(now, cur); changed {
						cur = limit
					}
				case 'p', 'o':
					start := now.Add(-time.Millisecond)
					if e == 'o' {
						start = now.Add(-10 * time.Second)
					}
					if limit, ok := a.pushback(start, now, cur); ok {
						cur = limit
					}
				case 'h':
					a.hold(now)
				case 's':
					cur *= 0.8
					if limit, changed, _ := a.tick(now, cur); changed {
						cur = limit
					}
				}
				got = append(got, math.Round(cur*100)/100)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("%d limits for %d events", len(got), len(tt.want))
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("after %q: limits %v; want %v", tt.events[:i+1], got, tt.want)
				}
			}
		})
	}
}

// Once the limit is back at the ceiling, tick says how long it was below.
func TestTheAdaptiveRateTellsHowLongItWasBelowTheCeiling(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := newAdaptive(AdaptiveConfig{Min: 5, Decrease: 0.5, Increase: 10}, 100)
	cur, _ := a.pushback(t0, t0, 100) // 50
	if cur != 50 {
		t.Fatalf("after a push-back at 100: %v; want 50", cur)
	}
	a.tick(t0.Add(time.Second), cur) // the second of the push-back: no rise
	var recovered time.Duration
	for i := 2; cur < 100; i++ {
		var changed bool
		var limit float64
		limit, changed, recovered = a.tick(t0.Add(time.Duration(i)*time.Second), cur)
		if !changed {
			t.Fatalf("tick %d at %v: unchanged below the ceiling", i, cur)
		}
		cur = limit
	}
	// 50 → 60 → 70 → 100 (ticks 2 to 4; the third rise is 3×Increase).
	if recovered != 4*time.Second {
		t.Errorf("below the ceiling for %v; want 4s", recovered)
	}
}

// The rise follows the time without push-back, not whole seconds: ticks a
// quarter second apart rise by a quarter of Increase each, and a hold
// leaves out only the time it held.
func TestTheAdaptiveRateRisesWithTheTimeWithoutPushBack(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := newAdaptive(AdaptiveConfig{Min: 5, Decrease: 0.8, Increase: 2}, 100)
	cur := 24.0
	tick := func(at time.Duration) {
		if limit, changed, _ := a.tick(t0.Add(at), cur); changed {
			cur = limit
		}
	}
	tick(time.Second) // the first tick counts a whole second
	for _, at := range []time.Duration{1250, 1500, 1750, 2000} {
		tick(at * time.Millisecond)
	}
	if cur != 28 {
		t.Fatalf("limit %v after 2s of quarter-second ticks from 24; want 28", cur)
	}
	a.hold(t0.Add(2750 * time.Millisecond))
	tick(3 * time.Second)
	if want := 28 + 2*5*0.25; cur != want {
		t.Fatalf("limit %v after a hold of 750ms and a tick 250ms later; want %v (a quarter second of the grown rise)", cur, want)
	}
}
