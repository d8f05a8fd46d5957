package limiter_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/internal/redistest"
	"github.com/shaper-dev/shaper/limiter"
)

// A replica with one message now and then (a quiet Kafka partition, a
// JetStream durable that hands it a message per ack) beside one with a
// backlog: told how many messages wait (Demand), it leases about what it
// can use while the fleet's slots are spoken for, instead of a whole lease
// for each message, whose other slots pass and are lost to the replica with
// the backlog (given back, at most 10 a second for a fleet of two).
//
// A replica with a backlog alone runs beside them on a key of its own, so
// that a busy machine, whose late wake-ups cost both, weighs on them
// alike: the pair is held to it.
func TestSharedReplicaWithFewMessagesLeasesWhatItCanUse(t *testing.T) {
	addr := redistest.Start(t).Addr
	const (
		limit   = 1000.0
		runFor  = 3 * time.Second
		warmUp  = 500 * time.Millisecond
		trickle = 50 * time.Millisecond // the quiet replica's messages come this far apart
	)
	cfg := limiter.SharedConfig{Key: "shaper:demand:mixed", Mode: limiter.Leaky, Limit: limit, Burst: 1, FallbackLimit: limit / 2, Timeout: loadedTimeout}
	mixed, _ := replicas(t, addr, 2, cfg)
	cfg.Key = "shaper:demand:busy"
	alone, _ := replicas(t, addr, 1, cfg)

	start := time.Now()
	halt := make(chan struct{})
	time.AfterFunc(runFor, func() { close(halt) })
	sent := make([][]time.Time, 3)
	var wg sync.WaitGroup
	// send takes slots of l for messages that come every gap (0: a
	// backlog, always one waiting), telling it how many wait, and sleeps
	// until each slot.
	send := func(i int, l *limiter.Shared, gap time.Duration) {
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		sleep := func(until time.Time) bool {
			if d := time.Until(until); d > 0 {
				timer.Reset(d)
				select {
				case <-timer.C:
				case <-halt:
					return false
				}
			}
			select {
			case <-halt:
				return false
			default:
				return true
			}
		}
		for next := time.Now(); ; next = next.Add(gap) {
			if gap > 0 && !sleep(next) {
				return
			}
			waiting := 1000
			if gap > 0 {
				waiting = 1
			}
			l.Demand(waiting)
			slot := l.Reserve(time.Now())
			if !sleep(slot) {
				return
			}
			sent[i] = append(sent[i], slot)
		}
	}
	wg.Go(func() { send(0, mixed[0], 0) })
	wg.Go(func() { send(1, mixed[1], trickle) })
	wg.Go(func() { send(2, alone[0], 0) })
	wg.Wait()

	from, to := start.Add(warmUp), start.Add(runFor-50*time.Millisecond)
	got, base := measure(sent[:2], from, to), measure(sent[2:], from, to)
	t.Logf("at %v/s over %v: a backlog beside a message every %v %.1f/s (%.1f%%, per replica %v, unused %d / %d); a backlog alone %.1f/s (%.1f%%, unused %d)",
		limit, to.Sub(from), trickle, got.rate, 100*got.rate/limit, got.per, mixed[0].Unused(), mixed[1].Unused(),
		base.rate, 100*base.rate/limit, alone[0].Unused())
	if got.rate < base.rate-0.04*limit {
		t.Errorf("a backlog beside a replica with few messages = %.1f/s, a backlog alone = %.1f/s; want at most 4%% of the limit (%v) less", got.rate, base.rate, 0.04*limit)
	}
	if n := got.per[1]; n == 0 {
		t.Errorf("the replica with few messages sent none; want one for each")
	}
}

// A replica alone holds the fleet's schedule ahead of the server's now with
// its own lease, which is not the schedule spoken for: with a few messages
// waiting it leases whole leases (20 slots at 1000/s, 0.05 Redis calls per
// slot), not one as long as its queue.
func TestSharedReplicaAloneKeepsWholeLeases(t *testing.T) {
	addr := redistest.Start(t).Addr
	admin := newClient(t, &redis.Options{Addr: addr})
	const limit = 1000.0
	cfg := limiter.SharedConfig{Key: "shaper:demand:alone", Mode: limiter.Leaky, Limit: limit, Burst: 1, FallbackLimit: limit, Timeout: loadedTimeout}
	lims, _ := replicas(t, addr, 1, cfg)
	l := lims[0]
	callsBefore := redistest.ScriptCalls(t, admin)
	slots := 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); slots++ {
		l.Demand(4) // a short queue that never runs dry
		time.Sleep(time.Until(l.Reserve(time.Now())))
	}
	calls := redistest.ScriptCalls(t, admin) - callsBefore
	t.Logf("one replica, 4 messages waiting, at %v/s: %d slots, %d Redis calls (%.3f per slot), unused %d", limit, slots, calls, float64(calls)/float64(slots), l.Unused())
	if perSlot := float64(calls) / float64(slots); perSlot > 0.08 {
		t.Errorf("%.3f Redis calls per slot; want about 0.05 (whole leases of 20)", perSlot)
	}
}

// A replica alone that was stopped keeps its long leases: the slots a stop
// strands are ones no other replica could have used, so short leases would
// only cost Redis calls (0.2 per slot at 1000/s instead of 0.05). One of a
// fleet leases short ones after a stop.
func TestSharedReplicaAloneKeepsLongLeasesAcrossStops(t *testing.T) {
	addr := redistest.Start(t).Addr
	admin := newClient(t, &redis.Options{Addr: addr})
	const limit = 1000.0
	for _, fleet := range []int{1, 2} {
		t.Run(fmt.Sprint(fleet), func(t *testing.T) {
			cfg := limiter.SharedConfig{Key: fmt.Sprintf("shaper:alone:%d", fleet), Mode: limiter.Leaky, Limit: limit, Burst: 1, FallbackLimit: limit, Timeout: loadedTimeout}
			lims, _ := replicas(t, addr, fleet, cfg)
			done := make(chan struct{})
			var wg sync.WaitGroup
			defer wg.Wait()
			defer close(done)
			if fleet == 2 {
				// The other replica takes a slot every 200ms: the first
				// is not alone.
				lims[1].Reserve(time.Now())
				wg.Go(func() {
					tick := time.NewTicker(200 * time.Millisecond)
					defer tick.Stop()
					for {
						select {
						case <-done:
							return
						case <-tick.C:
							lims[1].Reserve(time.Now())
						}
					}
				})
			}
			l := lims[0]
			callsBefore := redistest.ScriptCalls(t, admin)
			slots := 0
			for end := time.Now().Add(time.Second); time.Now().Before(end); slots++ {
				if slots%100 == 50 {
					time.Sleep(20 * time.Millisecond) // stopped
				}
				time.Sleep(time.Until(l.Reserve(time.Now())))
			}
			calls := redistest.ScriptCalls(t, admin) - callsBefore
			perSlot := float64(calls) / float64(slots)
			t.Logf("replicas %d, the first stopped 20ms every 100 slots at %v/s: %d slots, %d Redis calls (%.3f per slot)", fleet, limit, slots, calls, perSlot)
			if fleet == 1 && perSlot > 0.1 {
				t.Errorf("alone: %.3f Redis calls per slot; want about 0.05 (leases of 20 across stops)", perSlot)
			}
			if fleet == 2 && perSlot < 0.12 {
				t.Errorf("one of two: %.3f Redis calls per slot; want about 0.2 (short leases of 5 after a stop)", perSlot)
			}
		})
	}
}
