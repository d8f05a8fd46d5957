package limiter_test

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/internal/redistest"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/limiter"
)

// stall is a replica's stop schedule: stopped for off of every period,
// starting at from, the way a container throttled by its CPU quota is.
type stall struct {
	from        time.Time
	off, period time.Duration
}

// until returns when the stop that holds t ends, or t if none does.
func (s stall) until(t time.Time) time.Time {
	if s.period == 0 || t.Before(s.from) {
		return t
	}
	in := t.Sub(s.from) % s.period
	if in >= s.off {
		return t
	}
	return t.Add(s.off - in)
}

// departures drives each limiter the way drive does: Reserve takes the
// next slot, the goroutine sleeps until it, sends and reserves the next.
// A replica with a stall runs no code while stopped: it wakes at the end
// of the stop, like a process that SIGSTOP held, and sends a slot that
// came meanwhile late. It returns every send time of each limiter once
// halt is closed, and for each stop that held a slot of a limiter, how
// many slots its first Reserve after the stop let pass (Unused; a limiter
// without it, a local one, strands none).
func departures[L interface{ Reserve(time.Time) time.Time }](lims []L, stalls []stall, halt <-chan struct{}) (sent [][]time.Time, stranded [][]int64) {
	sent = make([][]time.Time, len(lims))
	stranded = make([][]int64, len(lims))
	var wg sync.WaitGroup
	for i, l := range lims {
		unused := func() int64 {
			if u, ok := any(l).(interface{ Unused() int64 }); ok {
				return u.Unused()
			}
			return 0
		}
		wg.Go(func() {
			st := stalls[i]
			timer := time.NewTimer(time.Hour)
			defer timer.Stop()
			// sleep waits until at, or past the stop that holds it, and
			// returns when it woke; false once halted.
			sleep := func(at time.Time) (time.Time, bool) {
				for {
					at = st.until(at)
					d := time.Until(at)
					if d <= 0 {
						if now := time.Now(); st.until(now).Equal(now) {
							return now, true
						}
						continue
					}
					timer.Reset(d)
					select {
					case <-timer.C:
					case <-halt:
						return time.Time{}, false
					}
				}
			}
			unusedBefore := int64(-1) // before a stop held a slot
			for {
				now, ok := sleep(time.Now())
				if !ok {
					return
				}
				slot := l.Reserve(now)
				if unusedBefore >= 0 {
					stranded[i] = append(stranded[i], unused()-unusedBefore)
					unusedBefore = -1
				}
				if !st.until(slot).Equal(slot) {
					unusedBefore = unused()
				}
				if now, ok = sleep(slot); !ok {
					return
				}
				_ = now
				sent[i] = append(sent[i], slot)
			}
		})
	}
	<-halt
	wg.Wait()
	return sent, stranded
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// fleetRun is what one fleet of departures sent over a run.
type fleetRun struct {
	rate  float64 // slots per second, all replicas together
	per   []int   // slots of each replica
	most  int     // most slots in any 100ms
	slots int     // all slots, warm-up included
}

// measure sums what sent holds in [from, to).
func measure(sent [][]time.Time, from, to time.Time) fleetRun {
	r := fleetRun{per: make([]int, len(sent))}
	var all []time.Time
	for i, s := range sent {
		r.slots += len(s)
		for _, at := range s {
			if !at.Before(from) && at.Before(to) {
				all = append(all, at)
				r.per[i]++
			}
		}
	}
	r.rate = float64(len(all)) / to.Sub(from).Seconds()
	r.most = sinktest.MaxInWindow(all, 100*time.Millisecond)
	return r
}

// A replica stopped 100ms of every 400ms (a container throttled by its CPU
// quota) leaves the slots it leased unused; the others must use them, so
// that the fleet delivers as much as a fleet without a stall, and never two
// slots where the schedule has one: any 100ms holds at most limit/10 +
// replicas, and the slots of a replica's 2ms catch-up.
//
// Both fleets run at once, each on its own key, so that a busy machine,
// whose late wake-ups cost both, weighs on them alike: the stalled fleet
// is held to the steady one, and to the limit only loosely.
func TestSharedFleetDeliversTheLimitWhileAReplicaStalls(t *testing.T) {
	addr := redistest.Start(t).Addr
	admin := newClient(t, &redis.Options{Addr: addr})
	const (
		limit  = 600.0
		fleet  = 3
		runFor = 4 * time.Second
		warmUp = 400 * time.Millisecond
	)
	cfg := limiter.SharedConfig{Key: "shaper:stalled", Mode: limiter.Leaky, Limit: limit, Burst: 1, FallbackLimit: limit / fleet, Timeout: loadedTimeout}
	stalled, _ := replicas(t, addr, fleet, cfg)
	cfg.Key = "shaper:steady"
	steady, _ := replicas(t, addr, fleet, cfg)

	callsBefore := redistest.ScriptCalls(t, admin)
	start := time.Now()
	stalls := make([]stall, fleet)
	stalls[0] = stall{from: start.Add(warmUp), off: 100 * time.Millisecond, period: 400 * time.Millisecond}
	halt := make(chan struct{})
	time.AfterFunc(runFor, func() { close(halt) })
	var sentStalled, sentSteady [][]time.Time
	var stranded [][]int64
	var wg sync.WaitGroup
	wg.Go(func() { sentStalled, stranded = departures(stalled, stalls, halt) })
	wg.Go(func() { sentSteady, _ = departures(steady, make([]stall, fleet), halt) })
	wg.Wait()
	calls := redistest.ScriptCalls(t, admin) - callsBefore

	from, to := start.Add(warmUp), start.Add(runFor-50*time.Millisecond)
	got, base := measure(sentStalled, from, to), measure(sentSteady, from, to)
	t.Logf("%d replicas at %v/s over %v: replica 0 stopped 100ms every 400ms %.1f/s (%.1f%%, per replica %v, most in 100ms %d); none stopped %.1f/s (%.1f%%, per replica %v, most in 100ms %d); redis calls %.3f per slot; unused slots of the stopped replica %d",
		fleet, limit, to.Sub(from), got.rate, 100*got.rate/limit, got.per, got.most, base.rate, 100*base.rate/limit, base.per, base.most,
		float64(calls)/float64(got.slots+base.slots), stalled[0].Unused())
	if got.rate < base.rate-0.03*limit {
		t.Errorf("aggregate with a stalled replica = %.1f/s, without = %.1f/s; want at most 3%% of the limit (%v) less", got.rate, base.rate, 0.03*limit)
	}
	if n := stalled[0].Unused(); n == 0 {
		t.Errorf("Unused() of the stalled replica = 0; want the slots its stops let pass")
	}
	// After its first stop the stalled replica leases limit × 2ms (2
	// slots) at a time, not 10ms of the schedule (6): a stop strands
	// fewer slots than a long lease holds.
	var strandedAll int64
	for _, n := range stranded[0] {
		strandedAll += n
	}
	most := math.Ceil(limit*0.010) / 2 // half a 10ms lease
	t.Logf("slots let pass by the stalled replica as it resumed, per stop: %v", stranded[0])
	if stops := len(stranded[0]); stops < 2 {
		t.Errorf("%d stops held a slot; want several", stops)
	} else if mean := float64(strandedAll-stranded[0][0]) / float64(stops-1); mean > most {
		t.Errorf("the stalled replica let pass %.1f slots per stop after its first; want at most half a 10ms lease (%v slots): its leases should be short", mean, most)
	}
	for _, r := range []fleetRun{got, base} {
		if !atMostOver(r.rate, limit, 0.01, 0.15) {
			t.Errorf("aggregate = %.1f/s; want %v +1%% -15%%", r.rate, limit)
		}
		if bound := int(limit/10) + fleet + int(math.Ceil(limit*0.002)); r.most > bound {
			t.Errorf("most slots in any 100ms = %d; want <= %d (limit/10 + replicas + limit × 2ms of catch-up)", r.most, bound)
		}
	}
}

// A replica that wakes late for its slots (a timer on a busy machine wakes
// hundreds of microseconds late, more than an interval above 1000/s) and
// that must wait a round trip to Redis for each lease still sends the
// limit: it asks for the next lease before this one ends, and sends the
// slots of a late wake-up at once instead of letting them pass. Letting
// them pass, one replica delivered 30% of 5000/s.
//
// An ideal sender runs beside it (paced), so that a busy machine, whose
// late wake-ups cost both, weighs on them alike. Two things are held:
// what the replica lets pass (Unused), the loss a late wake-up causes,
// which letting late slots pass makes most of the schedule (7 800 of 12 500
// slots at 5000/s); and its rate against the ideal sender's. A machine
// whose other work starves Redis's process costs the replica rate the
// ideal sender does not pay (it waits for leases: 52-75% of the ideal's
// was seen with unused under 7%), so the rate must reach 85% of the
// ideal's in one of three tries, and half of it in the best in any case.
func TestSharedReplicaThatWakesLateStillSendsTheLimit(t *testing.T) {
	addr := redistest.Start(t).Addr
	const runFor = 2500 * time.Millisecond
	for _, limit := range []float64{1000, 5000} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			var tries []string
			best := 0.0
			for try := range 3 {
				cfg := limiter.SharedConfig{Key: fmt.Sprintf("shaper:late:%v:%d", limit, try), Mode: limiter.Leaky, Limit: limit, Burst: 1, FallbackLimit: limit, Timeout: loadedTimeout}
				lims, _ := replicas(t, addr, 1, cfg)
				start := time.Now()
				halt := make(chan struct{})
				time.AfterFunc(runFor, func() { close(halt) })
				var sent [][]time.Time
				var ideal []time.Time
				var wg sync.WaitGroup
				wg.Go(func() { sent, _ = departures(lims, make([]stall, 1), halt) })
				wg.Go(func() { ideal = paced(limit, start, halt) })
				wg.Wait()
				from, to := start.Add(300*time.Millisecond), start.Add(2400*time.Millisecond)
				r, base := measure(sent, from, to), measure([][]time.Time{ideal}, from, to)
				unused := lims[0].Unused()
				t.Logf("one replica at %v/s: %.1f/s (%.1f%%), most in 100ms %d, unused %d; an ideal sender beside it %.1f/s (%.1f%%)",
					limit, r.rate, 100*r.rate/limit, r.most, unused, base.rate, 100*base.rate/limit)
				if bound := int(limit/10) + 1 + int(math.Ceil(limit*0.002)); r.most > bound {
					t.Errorf("most slots in any 100ms = %d; want <= %d (limit/10 + 1 + limit × 2ms of catch-up)", r.most, bound)
				}
				if r.rate > 1.01*limit {
					t.Errorf("rate = %.1f/s; want at most %v +1%%", r.rate, limit)
				}
				if scheduled := limit * runFor.Seconds(); float64(unused) > 0.25*scheduled {
					t.Errorf("the replica let %d of %.0f slots pass; want at most a quarter: a late wake-up sends its slot", unused, scheduled)
				}
				ratio := r.rate / base.rate
				best = max(best, ratio)
				if ratio >= 0.85 {
					return
				}
				tries = append(tries, fmt.Sprintf("%.1f/s of the ideal sender's %.1f/s", r.rate, base.rate))
			}
			t.Logf("no try reached 85%% of the ideal sender's rate: %v", tries)
			if best < 0.5 {
				t.Errorf("rate in three tries: %v; want at least half an ideal sender's beside it in one", tries)
			}
		})
	}
}

// paced returns the slots an ideal sender at limit sends on this machine
// from start until halt is closed: it sleeps until each slot, sends those
// that came while it slept at once if they are at most 2ms late (the
// limiters' catch-up), and lets older ones pass.
func paced(limit float64, start time.Time, halt <-chan struct{}) []time.Time {
	interval := time.Duration(float64(time.Second) / limit)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var sent []time.Time
	for next := start; ; next = next.Add(interval) {
		if d := time.Until(next); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-halt:
				return sent
			}
		}
		select {
		case <-halt:
			return sent
		default:
		}
		if late := time.Since(next) - 2*time.Millisecond; late > 0 {
			next = next.Add(late / interval * interval) // the slots let pass
		}
		sent = append(sent, next)
	}
}
