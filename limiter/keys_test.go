package limiter_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/internal/logtest"
	"github.com/shaper-dev/shaper/internal/redistest"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/internal/window"
	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/shaper"
)

var _ shaper.Limiter = (*limiter.SharedKey)(nil)

// keyReplicas returns n SharedKeys on one prefix, each with its own client
// as separate processes would have.
func keyReplicas(t *testing.T, addr string, n int, cfg limiter.SharedConfig, log *logtest.Buffer) []*limiter.SharedKeys {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
	out := make([]*limiter.SharedKeys, n)
	for i := range out {
		k, err := limiter.NewSharedKeys(newClient(t, &redis.Options{Addr: addr}), cfg)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = k
	}
	return out
}

// sendAsFastAsAllowed has each limiter send for d: wait for Next, then
// Allow; it returns every slot taken, across them all.
func sendAsFastAsAllowed(lims []shaper.Limiter, d time.Duration) []time.Time {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var mu sync.Mutex
	var taken []time.Time
	var wg sync.WaitGroup
	for _, l := range lims {
		wg.Go(func() {
			timer := time.NewTimer(time.Hour)
			defer timer.Stop()
			for ctx.Err() == nil {
				now := time.Now()
				if next := l.Next(now); next.After(now) {
					timer.Reset(next.Sub(now))
					select {
					case <-timer.C:
					case <-ctx.Done(): // the slot comes after the run
					}
					continue
				}
				if l.Allow(now) {
					mu.Lock()
					taken = append(taken, now)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return taken
}

// Three replicas hold key A to 20/s together, while key B has its own 20/s:
// a key's limit is one for every replica, and keys do not share it.
func TestSharedKeysHoldAKeyToOneLimitAcrossReplicas(t *testing.T) {
	addr := redistest.Start(t).Addr
	log := &logtest.Buffer{}
	reps := keyReplicas(t, addr, 3, limiter.SharedConfig{Key: "shaper:test:key:", Mode: limiter.Leaky, Limit: 20, Burst: 1, FallbackLimit: 5, Timeout: loadedTimeout}, log)
	now := time.Now()
	var a, b []shaper.Limiter
	for _, r := range reps {
		a = append(a, r.For("A", now))
		b = append(b, r.For("B", now))
	}
	const d = 2 * time.Second
	var takenA, takenB []time.Time
	var wg sync.WaitGroup
	wg.Go(func() { takenA = sendAsFastAsAllowed(a, d) })
	wg.Go(func() { takenB = sendAsFastAsAllowed(b, d) })
	wg.Wait()
	t.Logf("in %v at 20/s per key across 3 replicas: A %d slots, B %d", d, len(takenA), len(takenB))
	for key, n := range map[string]int{"A": len(takenA), "B": len(takenB)} {
		if n < 36 || n > 42 {
			t.Errorf("key %s: %d slots in %v; want 40 ± 4 (20/s for all replicas together)", key, n, d)
		}
	}
	if log.String() != "" {
		t.Errorf("log: %s; want nothing while Redis answers", log.String())
	}
}

// While Redis is down every key falls back to its own local limit, and
// the limiter goes back to Redis once it answers.
func TestSharedKeysFallBackWhileRedisIsDownAndReturn(t *testing.T) {
	rs := redistest.Start(t)
	log := &logtest.Buffer{}
	reps := keyReplicas(t, rs.Addr, 1, limiter.SharedConfig{Key: "shaper:test:key:", Mode: limiter.Leaky, Limit: 100, Burst: 1,
		FallbackLimit: 10, Timeout: 100 * time.Millisecond}, log)
	k := reps[0].For("A", time.Now())
	rs.Stop()
	down := sendAsFastAsAllowed([]shaper.Limiter{k}, time.Second)
	if got := k.Limit(time.Now()); got != 10 {
		t.Errorf("Limit while Redis is down = %v; want the fallback 10", got)
	}
	t.Logf("1s with Redis down: %d slots at the fallback 10/s", len(down))
	if len(down) < 7 || len(down) > 12 {
		t.Errorf("%d slots in 1s while Redis is down; want about 10 (the fallback limit)", len(down))
	}
	rs.Restart()
	var up []time.Time
	for range 50 {
		if up = sendAsFastAsAllowed([]shaper.Limiter{k}, 500*time.Millisecond); k.Limit(time.Now()) == 100 && len(up) > 30 {
			break
		}
	}
	t.Logf("back: %d slots in 0.5s", len(up))
	if got := k.Limit(time.Now()); got != 100 {
		t.Errorf("Limit after Redis restarted = %v; want the shared 100", got)
	}
	for _, want := range []string{"falls back", "answers again"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q: %s", want, log.String())
		}
	}
}

// A SetRate on one replica lowers that key's rate for every replica at
// its next Allow, and only that key's; a rise computed from a rate another
// replica has lowered since does not undo the decrease; and the key
// expires once idle, its rate written again by the next replica that
// remembers it.
func TestSharedKeysSetRateMovesOneKeyForEveryReplica(t *testing.T) {
	rs := redistest.Start(t)
	log := &logtest.Buffer{}
	reps := keyReplicas(t, rs.Addr, 3, limiter.SharedConfig{Key: "shaper:test:dest:", Mode: limiter.Leaky, Limit: 50, Burst: 1, FallbackLimit: 20, Timeout: loadedTimeout}, log)
	now := time.Now()
	var a, b []*limiter.SharedKey
	for _, r := range reps {
		a = append(a, r.For("A", now))
		b = append(b, r.For("B", now))
	}
	seen := func(keys []*limiter.SharedKey) []float64 {
		var out []float64
		for _, k := range keys {
			k.Allow(time.Now()) // the call each replica makes anyway
			out = append(out, k.Limit(time.Now()))
		}
		return out
	}
	want := func(what string, keys []*limiter.SharedKey, limit float64) {
		t.Helper()
		for i, got := range seen(keys) {
			if got != limit {
				t.Errorf("%s: replica %d: Limit = %v; want %v", what, i, got, limit)
			}
		}
	}
	want("A before any SetRate", a, 50)

	a[0].SetRate(10, 1)
	if got := a[0].Limit(time.Now()); got != 10 {
		t.Errorf("Limit right after SetRate(10) = %v; want 10", got)
	}
	want("A after replica 0's SetRate(10)", a, 10)
	want("B after replica 0's SetRate(10) for A", b, 50)

	var takenA, takenB []time.Time
	var wg sync.WaitGroup
	const d = 2 * time.Second
	wg.Go(func() { takenA = sendAsFastAsAllowed([]shaper.Limiter{a[0], a[1], a[2]}, d) })
	wg.Go(func() { takenB = sendAsFastAsAllowed([]shaper.Limiter{b[0], b[1], b[2]}, d) })
	wg.Wait()
	t.Logf("in %v across 3 replicas: A at 10/s %d slots, B at 50/s %d", d, len(takenA), len(takenB))
	if n := len(takenA); n < 17 || n > 23 {
		t.Errorf("A: %d slots in %v; want 20 ± 3 (10/s for all replicas together)", n, d)
	}
	if n := len(takenB); n < 80 || n > 105 {
		t.Errorf("B: %d slots in %v; want about 100 (its 50/s, untouched)", n, d)
	}

	// Replica 2 heard 10; replica 0 lowers A to 5, then replica 2 raises
	// it from the 10 it heard: the stale rise loses.
	a[0].SetRate(5, 1)
	a[0].Allow(time.Now())
	a[2].SetRate(12, 1)
	a[2].Allow(time.Now())
	want("A after a decrease to 5 and a rise to 12 computed from 10", a, 5)
	a[1].SetRate(7, 1) // from the 5 it heard: the rise holds
	a[1].Allow(time.Now())
	want("A after a rise to 7 computed from 5", a, 7)
	a[0].SetRate(80, 1)
	a[0].Allow(time.Now())
	want("A after a rise above Limit", a, 50)
	a[0].SetRate(7, 1)
	a[0].Allow(time.Now())
	want("A lowered to 7 again", a, 7)

	// Idle, the key expires: a full refill (1/7 s) and a second.
	admin := newClient(t, &redis.Options{Addr: rs.Addr})
	ctx := context.Background()
	if ttl := admin.PTTL(ctx, "shaper:test:dest:A").Val(); ttl <= 0 || ttl > 2*time.Second {
		t.Errorf("PTTL of A's key = %v; want in (0, 2s]: a refill at 7/s and a second", ttl)
	}
	// Real time: Redis expires on its own clock.
	if !testwait.Until(5*time.Second, func() bool { return admin.Exists(ctx, "shaper:test:dest:A").Val() == 0 }) {
		t.Fatal("A's key still there 5s after its last call; want it expired after about 1.2s")
	}
	if admin.Exists(ctx, "shaper:test:dest:B").Val() != 0 {
		t.Error("B's key still there with A's gone; want both expired")
	}
	// The next call writes the rate its replica last heard; a replica that
	// never heard of A takes it from Redis.
	a[1].Allow(time.Now())
	fresh := keyReplicas(t, rs.Addr, 1, limiter.SharedConfig{Key: "shaper:test:dest:", Mode: limiter.Leaky, Limit: 50, Burst: 1, FallbackLimit: 20, Timeout: loadedTimeout}, log)[0].For("A", time.Now())
	want("A after its key expired and replica 1 called again", []*limiter.SharedKey{a[1], fresh}, 7)
	if log.String() != "" {
		t.Errorf("log: %s; want nothing while Redis answers", log.String())
	}
}

// keyAAtLimit100OnTwoReplicas starts a Redis and returns its address and
// key A on two replicas sharing prefix: Limit 100, fallback 50, spared
// Redis calls at the limit (AtLimitEvery 250ms).
func keyAAtLimit100OnTwoReplicas(t *testing.T, prefix string) (addr string, a0, a1 *limiter.SharedKey) {
	rs := redistest.Start(t)
	cfg := limiter.SharedConfig{Key: prefix, Mode: limiter.Leaky, Limit: 100, Burst: 1, FallbackLimit: 50,
		Timeout: loadedTimeout, AtLimitEvery: 250 * time.Millisecond}
	reps := keyReplicas(t, rs.Addr, 2, cfg, &logtest.Buffer{})
	now := time.Now()
	return rs.Addr, reps[0].For("A", now), reps[1].For("A", now)
}

// With AtLimitEvery, a key at its Limit calls Redis about once per
// AtLimitEvery, not once per slot, and still learns within that time that
// another replica lowered it; a lowered key calls Redis for every slot.
func TestSharedKeysAtLimitCallRedisOncePerAtLimitEvery(t *testing.T) {
	addr, a0, a1 := keyAAtLimit100OnTwoReplicas(t, "shaper:test:dest:")
	admin := newClient(t, &redis.Options{Addr: addr})
	before := redistest.ScriptCalls(t, admin)
	taken := sendAsFastAsAllowed([]shaper.Limiter{a0}, time.Second)
	calls := redistest.ScriptCalls(t, admin) - before
	t.Logf("1s at Limit 100/s: %d slots, %d Redis calls", len(taken), calls)
	if len(taken) < 80 || len(taken) > 105 {
		t.Errorf("%d slots in 1s at Limit; want about 200", len(taken))
	}
	if calls > 8 {
		t.Errorf("%d Redis calls in 1s at Limit; want at most 8 (one per 250ms, and the first)", calls)
	}
	a1.Allow(time.Now())
	a1.SetRate(20, 1)
	a1.Allow(time.Now())
	deadline := time.Now().Add(300 * time.Millisecond)
	for a0.Limit(time.Now()) != 20 && time.Now().Before(deadline) {
		sendAsFastAsAllowed([]shaper.Limiter{a0}, 10*time.Millisecond)
	}
	if got := a0.Limit(time.Now()); got != 20 {
		t.Fatalf("replica 0's Limit 300ms after replica 1 lowered A to 20 = %v; want 20", got)
	}
	before = redistest.ScriptCalls(t, admin)
	taken = sendAsFastAsAllowed([]shaper.Limiter{a0, a1}, time.Second)
	calls = redistest.ScriptCalls(t, admin) - before
	t.Logf("1s lowered to 20/s: %d slots, %d Redis calls", len(taken), calls)
	if len(taken) < 17 || len(taken) > 23 {
		t.Errorf("%d slots in 1s lowered to 20/s across 2 replicas; want 20 ± 3", len(taken))
	}
}

// While Redis fails, the limit in force is the fallback's; a rise from it
// (the adaptive rate's tick, which sees only that limit) is not carried to
// Redis when it answers again, where it would lower the key's shared rate
// for every replica. A decrease is.
func TestSharedKeysCarryNoRiseSeenThroughTheFallback(t *testing.T) {
	rs := redistest.Start(t)
	log := &logtest.Buffer{}
	reps := keyReplicas(t, rs.Addr, 2, limiter.SharedConfig{Key: "shaper:test:dest:", Mode: limiter.Leaky, Limit: 50, Burst: 1,
		FallbackLimit: 20, Timeout: 100 * time.Millisecond}, log)
	a0, a1 := reps[0].For("A", time.Now()), reps[1].For("A", time.Now())
	a0.Allow(time.Now())
	rs.Stop()
	a0.Allow(time.Now())
	if got := a0.Limit(time.Now()); got != 20 {
		t.Fatalf("Limit while Redis is down = %v; want the fallback 20", got)
	}
	a0.SetRate(21, 1) // a rise from 20, as the adaptive rate's tick makes it
	rs.Restart()
	back := func() bool { a0.Allow(time.Now()); return a0.Limit(time.Now()) > 20 }
	if !testwait.Until(10*time.Second, back) {
		t.Fatalf("Limit 10s after Redis restarted = %v; want the shared rate again", a0.Limit(time.Now()))
	}
	a1.Allow(time.Now())
	for i, k := range []*limiter.SharedKey{a0, a1} {
		if got := k.Limit(time.Now()); got != 50 {
			t.Errorf("replica %d: Limit after Redis came back = %v; want 50 (no rise from the fallback carried)", i, got)
		}
	}
	rs.Stop()
	a0.Allow(time.Now())
	a0.SetRate(8, 1) // a push-back while Redis is down
	rs.Restart()
	if !testwait.Until(10*time.Second, func() bool { a0.Allow(time.Now()); a1.Allow(time.Now()); return a1.Limit(time.Now()) == 8 }) {
		t.Errorf("replica 1's Limit after replica 0 lowered A to 8 while Redis was down = %v; want 8 once it answers", a1.Limit(time.Now()))
	}
}

// A rate change of the pipeline at run time moves the ceiling of its
// destinations' shared rates: above the configured limit once raised
// (a rise is carried to Redis and seen by the other replica), and a key
// at the old ceiling takes its slots from its own limiter at the new one.
func TestSharedKeysSetCeilingMovesTheMostAKeysRateMayBe(t *testing.T) {
	_, a0, a1 := keyAAtLimit100OnTwoReplicas(t, "shaper:test:ceiling:")
	a0.Allow(time.Now())
	a0.SetRate(150, 1)
	if got := a0.Limit(time.Now()); got != 100 {
		t.Fatalf("Limit after SetRate(150) under the ceiling 100 = %v; want 100", got)
	}
	a0.SetCeiling(200)
	a1.SetCeiling(200)
	a0.SetRate(150, 1)
	a0.Allow(time.Now())
	a1.Allow(time.Now())
	if got0, got1 := a0.Limit(time.Now()), a1.Limit(time.Now()); got0 != 150 || got1 != 150 {
		t.Fatalf("Limit after SetCeiling(200) and SetRate(150) = %v on replica 0, %v on replica 1; want 150 on both", got0, got1)
	}
	a0.SetRate(200, 1)
	a0.Allow(time.Now())
	taken := sendAsFastAsAllowed([]shaper.Limiter{a0}, time.Second)
	t.Logf("1s at the raised ceiling 200/s: %d slots", len(taken))
	if len(taken) < 170 || len(taken) > 205 {
		t.Errorf("%d slots in 1s at the raised ceiling; want about 200", len(taken))
	}
	a0.SetCeiling(50)
	if got := a0.Limit(time.Now()); got != 50 {
		t.Errorf("Limit after SetCeiling(50) = %v; want 50, the ceiling, under a rate of 200", got)
	}
	a0.SetCeiling(0)
	a0.SetCeiling(math.Inf(1))
	if got := a0.Limit(time.Now()); got != 50 {
		t.Errorf("Limit after SetCeiling(0) and SetCeiling(+Inf) = %v; want 50, both ignored", got)
	}
}

// A key above 100/s is leased as the pipeline's limit is: three replicas
// sending one key at 1000/s call Redis for a lease of up to ten slots, not
// for every slot, and together still send the key's limit, no 100ms
// holding more than limit/10 + replicas and a lease's 10ms of slots (a
// replica may take a key's slot up to that late). A
// key at 100/s still takes one slot per call, only once it has come: the
// replicas waiting for it each call for it.
func TestSharedKeysLeaseTheSlotsOfAFastKey(t *testing.T) {
	rs := redistest.Start(t)
	admin := newClient(t, &redis.Options{Addr: rs.Addr})
	for _, c := range []struct {
		limit          float64
		most           int     // in any 100ms
		callsPerSlotAt float64 // the most
		least          float64 // of the limit: timers on a loaded machine wake late
	}{
		{limit: 1000, most: 100 + 1 + 3 + 10, callsPerSlotAt: 0.5, least: 0.6}, // the schedule's limit/10 + 1, a seam per replica, a lease late
		{limit: 100, most: 10 + 1 + 3, callsPerSlotAt: 3.5, least: 0.5},
	} {
		reps := keyReplicas(t, rs.Addr, 3, limiter.SharedConfig{Key: fmt.Sprintf("shaper:test:lease%v:", c.limit), Mode: limiter.Leaky,
			Limit: c.limit, Burst: 1, FallbackLimit: c.limit / 3, Timeout: loadedTimeout}, &logtest.Buffer{})
		var a []shaper.Limiter
		for _, r := range reps {
			a = append(a, r.For("A", time.Now()))
		}
		const d = 2 * time.Second
		before := redistest.ScriptCalls(t, admin)
		taken := sendAsFastAsAllowed(a, d)
		calls := redistest.ScriptCalls(t, admin) - before
		slices.SortFunc(taken, time.Time.Compare)
		most := window.Most(taken, 100*time.Millisecond)
		var unused int64
		for _, r := range reps {
			unused += r.Unused()
		}
		perSlot := float64(calls) / float64(len(taken))
		t.Logf("key A at %v/s on 3 replicas for %v: %d slots, most in 100ms %d, %d Redis calls (%.3f per slot), %d let pass",
			c.limit, d, len(taken), most, calls, perSlot, unused)
		want := c.limit * d.Seconds()
		if n := float64(len(taken)); n < c.least*want || n > want+3+c.limit*0.01 {
			t.Errorf("%v/s: %d slots in %v; want %.0f, at least %.0f%% of it and never more than a slot per replica and a lease",
				c.limit, len(taken), d, want, 100*c.least)
		}
		if most > c.most {
			t.Errorf("%v/s: %d slots in some 100ms; want at most %d", c.limit, most, c.most)
		}
		if perSlot > c.callsPerSlotAt {
			t.Errorf("%v/s: %.3f Redis calls per slot; want at most %v", c.limit, perSlot, c.callsPerSlotAt)
		}
	}
}

// The slots of a key's lease that pass unused are counted (Unused), and
// so is the rest of a lease that SetRate drops. A key whose lane has its
// turns too rarely to use a full lease leases about as many slots as it
// uses.
func TestSharedKeysCountTheLeasedSlotsTheyLetPass(t *testing.T) {
	rs := redistest.Start(t)
	admin := newClient(t, &redis.Options{Addr: rs.Addr})
	keys := keyReplicas(t, rs.Addr, 1, limiter.SharedConfig{Key: "shaper:test:letpass:", Mode: limiter.Leaky,
		Limit: 1000, Burst: 1, FallbackLimit: 100, Timeout: loadedTimeout}, &logtest.Buffer{})[0]
	// leased returns a fresh key that holds a lease of ten from about now,
	// and that now: a reply slower than 5ms (a loaded machine, the race
	// detector) would shift the lease that late, and one slower than 10ms
	// keeps only its first slot, so it tries a few keys.
	leased := func(name string) (*limiter.SharedKey, time.Time) {
		t.Helper()
		for i := range 5 {
			now := time.Now()
			k := keys.For(fmt.Sprint(name, i), now)
			u := keys.Unused()
			if !k.Allow(now) {
				t.Fatal("the first Allow of a fresh key took no slot")
			}
			if keys.Unused() == u && k.Next(now).Sub(now) < 6*time.Millisecond {
				return k, now
			}
		}
		t.Fatal("no fresh key got its first reply from Redis within 5ms in five tries")
		return nil, time.Time{}
	}

	a, now := leased("A")
	u := keys.Unused()
	a.Allow(now.Add(30 * time.Millisecond)) // the lease's other nine slots passed 15ms and more ago
	if got := keys.Unused() - u; got != 9 {
		t.Errorf("Unused() rose by %d after coming 30ms late to a lease of 10; want 9", got)
	}

	b, _ := leased("B")
	u = keys.Unused()
	b.SetRate(500, 1)
	if got := keys.Unused() - u; got != 9 {
		t.Errorf("Unused() rose by %d with SetRate right after a lease of 10 began; want 9, the rest of the lease", got)
	}

	// A lane that gets a turn only every 5ms uses three slots of a lease
	// of ten at 1000/s (the fourth is more than 10ms late): its leases
	// shrink to about what it uses, so few slots pass.
	c := keys.For("C", time.Now())
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	u = keys.Unused()
	before := redistest.ScriptCalls(t, admin)
	took := 0
	for range 100 {
		<-tick.C
		if c.Allow(time.Now()) {
			took++
		}
	}
	calls := redistest.ScriptCalls(t, admin) - before
	unused := keys.Unused() - u
	t.Logf("a turn every 5ms, 100 turns, at 1000/s: %d slots taken, %d let pass, %d Redis calls", took, unused, calls)
	if unused > 40 {
		t.Errorf("%d slots let pass by a key whose lane had a turn every 5ms for 500ms; want at most 40 (leases of ten: over a hundred)", unused)
	}
	if calls > took*2/3 {
		t.Errorf("%d Redis calls for %d slots of a key whose lane had a turn every 5ms; want at most two for three slots (leases of about three)", calls, took)
	}
}
