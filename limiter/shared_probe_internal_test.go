package limiter

import (
	"errors"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"
)

// TestSharedProbeScheduleHoldsForAnyOutageOnAFakeClock runs the probe
// schedule of a fallen-back limiter through an hour of outage on a fake
// clock: the goroutine's decisions (nextLocked) and the calls' results
// (applyLocked) are driven by the test, each call ending when the scenario
// says. It checks the bounds of the type doc: probes start 200–300ms apart
// (at least 200ms whatever the calls do), at most two calls run at once,
// and the limiter is back on the shared limit within the bound after
// Redis answers again.
func TestSharedProbeScheduleHoldsForAnyOutageOnAFakeClock(t *testing.T) {
	const (
		outage = time.Hour
		rtt    = time.Millisecond
	)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	up := t0.Add(outage + 123*time.Millisecond) // Redis answers again
	tests := []struct {
		name    string
		timeout time.Duration
		// call returns when a call started at start ends, and whether
		// it answered within the timeout.
		call func(start time.Time) (end time.Time, ok bool)
		// maxGap bounds the time between two probe starts while down.
		maxGap time.Duration
		// back bounds the time from up to the return.
		back time.Duration
	}{
		{
			name:    "connection refused",
			timeout: 50 * time.Millisecond,
			call: func(start time.Time) (time.Time, bool) {
				return start.Add(rtt), !start.Before(up)
			},
			maxGap: probeGapMax,
			back:   probeGapMax + rtt,
		},
		{
			name: "each call ends at a 500ms timeout",
			// A client with ContextTimeoutEnabled, Redis unreachable
			// (packets dropped): calls overlap, the third waits.
			timeout: 500 * time.Millisecond,
			call: func(start time.Time) (time.Time, bool) {
				if start.Before(up) {
					return start.Add(500 * time.Millisecond), false
				}
				return start.Add(rtt), true
			},
			maxGap: 500 * time.Millisecond,
			back:   500*time.Millisecond + rtt,
		},
		{
			name: "server hung, calls wait out a 3s read timeout",
			// A client without ContextTimeoutEnabled, Redis stopped
			// (SIGSTOP, CLIENT PAUSE): the connection opens, the call
			// hangs until the read timeout or until Redis answers, too
			// late to count.
			timeout: 50 * time.Millisecond,
			call: func(start time.Time) (time.Time, bool) {
				if !start.Before(up) {
					return start.Add(rtt), true
				}
				end := start.Add(3 * time.Second)
				if answered := up.Add(rtt); answered.Before(end) {
					end = answered
				}
				return end, end.Sub(start) <= 50*time.Millisecond
			},
			maxGap: 3 * time.Second,
			back:   probeGapMax + 2*rtt,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := newShared(nil, SharedConfig{
				Key: "k", Mode: Leaky, Limit: 100, Burst: 1, FallbackLimit: 10, Timeout: tt.timeout,
				Logger: slog.New(slog.DiscardHandler),
			}, t0)
			if err != nil {
				t.Fatal(err)
			}
			s.rand = rand.New(rand.NewPCG(1, 2)).Float64
			s.mu.Lock()
			defer s.mu.Unlock()
			s.fallBackLocked(errors.New("redis down"), t0)

			type running struct {
				op  *call
				end time.Time
				ok  bool
			}
			var (
				now     = t0
				calls   []running
				starts  []time.Time
				busiest int
			)
			for s.fallback {
				if now.After(up.Add(10 * time.Second)) {
					t.Fatalf("still fallen back 10s after Redis answered again")
				}
				op, wait := s.nextLocked(now)
				if op != nil {
					if !op.probe {
						t.Fatalf("a call for the shared limit started while fallen back")
					}
					starts = append(starts, now)
					end, ok := tt.call(now)
					calls = append(calls, running{op, end, ok})
					busiest = max(busiest, len(calls))
					continue
				}
				// The next event: a probe's time or a call's end.
				next := time.Time{}
				if wait > 0 {
					next = now.Add(wait)
				}
				for _, c := range calls {
					if next.IsZero() || c.end.Before(next) {
						next = c.end
					}
				}
				if next.IsZero() {
					t.Fatalf("at %v: no probe due and no call running", now.Sub(t0))
				}
				now = next
				for i := 0; i < len(calls); {
					c := calls[i]
					if c.end.After(now) {
						i++
						continue
					}
					calls = append(calls[:i], calls[i+1:]...)
					if c.ok {
						s.applyLocked(c.op, reply{limit: 100, burst: 1}, c.end, 0, nil)
					} else {
						s.applyLocked(c.op, reply{}, c.end, 0, errors.New("redis down"))
					}
				}
			}
			back := now.Sub(up)

			down := starts[:0:0]
			for _, st := range starts {
				if st.Before(up) {
					down = append(down, st)
				}
			}
			minGap, maxGap := time.Duration(1<<62), time.Duration(0)
			for i := 1; i < len(down); i++ {
				gap := down[i].Sub(down[i-1])
				minGap, maxGap = min(minGap, gap), max(maxGap, gap)
			}
			most := 0
			for i, j := 0, 0; i < len(starts); i++ {
				for starts[i].Sub(starts[j]) >= time.Second {
					j++
				}
				most = max(most, i-j+1)
			}
			perSec := float64(len(down)) / up.Sub(t0).Seconds()
			t.Logf("%v down: %d probes (%.2f/s), gaps %v to %v, most in any 1s %d, most calls at once %d; back %v after Redis answered",
				outage, len(down), perSec, minGap, maxGap, most, busiest, back)
			if minGap < probeGapMin || maxGap > tt.maxGap {
				t.Errorf("gaps between probes %v to %v; want %v to %v", minGap, maxGap, probeGapMin, tt.maxGap)
			}
			if most > 5 {
				t.Errorf("%d probes within 1s; want at most 5", most)
			}
			if busiest > maxCalls {
				t.Errorf("%d calls at once; want at most %d", busiest, maxCalls)
			}
			if back < 0 || back > tt.back {
				t.Errorf("back on the shared limit %v after Redis answered again; want within %v", back, tt.back)
			}
			if s.calls != len(calls) {
				t.Errorf("s.calls = %d with %d calls running; want equal", s.calls, len(calls))
			}
		})
	}
}

// TestSharedProbeGapsAreSpreadSoReplicasDriftApart checks that the gaps
// between probes are drawn over the whole of 200–300ms, so that replicas
// that fell back at the same moment do not probe in lockstep.
func TestSharedProbeGapsAreSpreadSoReplicasDriftApart(t *testing.T) {
	tests := []struct {
		give float64
		want time.Duration
	}{
		{give: 0, want: probeGapMin},
		{give: 0.5, want: (probeGapMin + probeGapMax) / 2},
		{give: 0.999999, want: probeGapMax},
	}
	s := &Shared{}
	for _, tt := range tests {
		s.rand = func() float64 { return tt.give }
		if got := s.probeGap(); got < tt.want-time.Microsecond || got > tt.want {
			t.Errorf("probeGap() with rand %v = %v; want %v", tt.give, got, tt.want)
		}
	}
	// Two replicas that fell back together, ten probes later.
	a, b := &Shared{rand: rand.New(rand.NewPCG(1, 1)).Float64}, &Shared{rand: rand.New(rand.NewPCG(2, 2)).Float64}
	var ta, tb time.Duration
	for range 10 {
		ta += a.probeGap()
		tb += b.probeGap()
	}
	if d := (ta - tb).Abs(); d < 10*time.Millisecond {
		t.Errorf("two replicas' 10th probes %v apart; want them to drift apart", d)
	}
}
