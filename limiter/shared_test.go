package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/internal/logtest"
	"github.com/shaper-dev/shaper/internal/redistest"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/shaper"
)

// Shared is a drop-in Limiter for the pipeline, and reports fallbacks and
// unused slots.
var (
	_ shaper.Limiter          = (*limiter.Shared)(nil)
	_ shaper.FallbackReporter = (*limiter.Shared)(nil)
	_ shaper.UnusedReporter   = (*limiter.Shared)(nil)
)

// newShared returns a Shared limiter for cfg through client, logging into
// log, closed when the test ends.
func newShared(t testing.TB, client redis.UniversalClient, cfg limiter.SharedConfig, log *logtest.Buffer) *limiter.Shared {
	t.Helper()
	if log != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
	} else {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := limiter.NewShared(client, cfg, time.Now())
	if err != nil {
		t.Fatalf("NewShared(%+v) = %v; want no error", cfg, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// replicas returns n Shared limiters on one key, each with its own client
// as separate processes would have, and a log for each.
func replicas(t testing.TB, addr string, n int, cfg limiter.SharedConfig) ([]*limiter.Shared, []*logtest.Buffer) {
	t.Helper()
	lims := make([]*limiter.Shared, n)
	logs := make([]*logtest.Buffer, n)
	for i := range lims {
		logs[i] = &logtest.Buffer{}
		lims[i] = newShared(t, newClient(t, &redis.Options{Addr: addr}), cfg, logs[i])
	}
	return lims, logs
}

// run drives limiters the way the pipeline's scheduler does: each in its
// own goroutine takes a slot with Reserve(time.Now()), waits until the
// slot, and takes the next, until halted. It records every slot handed out
// and the longest a Reserve took.
type run struct {
	stop  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
	slots [][]time.Time
	worst []time.Duration

	mu   sync.Mutex
	last []time.Time // each replica's latest slot, for reach
}

func drive(t testing.TB, lims []*limiter.Shared) *run {
	r := &run{
		stop:  make(chan struct{}),
		slots: make([][]time.Time, len(lims)),
		worst: make([]time.Duration, len(lims)),
		last:  make([]time.Time, len(lims)),
	}
	for i, l := range lims {
		r.wg.Go(func() {
			timer := time.NewTimer(time.Hour)
			defer timer.Stop()
			for range 1_000_000 {
				select {
				case <-r.stop:
					return
				default:
				}
				now := time.Now()
				slot := l.Reserve(now)
				r.worst[i] = max(r.worst[i], time.Since(now))
				r.slots[i] = append(r.slots[i], slot)
				r.mu.Lock()
				r.last[i] = slot
				r.mu.Unlock()
				if d := time.Until(slot); d > 0 {
					timer.Reset(d)
					select {
					case <-timer.C:
					case <-r.stop:
						return
					}
				}
			}
		})
	}
	t.Cleanup(r.halt)
	return r
}

// reach waits until every replica has taken a slot at or after at, so
// that the run's slots before at are all handed out: a window of the run
// that ends by at can be measured. It fails the test if they have not 10s
// after at.
func (r *run) reach(t testing.TB, at time.Time) {
	t.Helper()
	testwait.For(t, time.Until(at)+10*time.Second, "every replica's slots to reach "+at.Format(time.StampMilli), func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, l := range r.last {
			if l.Before(at) {
				return false
			}
		}
		return true
	})
}

// halt stops the goroutines and waits for them; the slots are then safe
// to read.
func (r *run) halt() {
	r.once.Do(func() { close(r.stop) })
	r.wg.Wait()
}

// rate returns how many slots per second all replicas together got in
// [from, to).
func (r *run) rate(from, to time.Time) float64 {
	n := 0
	for _, s := range r.slots {
		for _, t := range s {
			if !t.Before(from) && t.Before(to) {
				n++
			}
		}
	}
	return float64(n) / to.Sub(from).Seconds()
}

// mostIn returns the most slots of all replicas together in any window of
// length w within [from, to).
func (r *run) mostIn(w time.Duration, from, to time.Time) int {
	var all []time.Time
	for _, s := range r.slots {
		for _, t := range s {
			if !t.Before(from) && t.Before(to) {
				all = append(all, t)
			}
		}
	}
	return sinktest.MaxInWindow(all, w)
}

// waitFor polls cond every 5ms until it holds or within passes, and
// returns how long it took and whether it held.
func waitFor(within time.Duration, cond func() bool) (time.Duration, bool) {
	return testwait.Every(5*time.Millisecond, within, cond)
}

// loadedTimeout is the Redis timeout of tests that are not about timeouts:
// other builds share this machine's two cores, and a stall of 50ms, the
// default, would make them fall back for no fault of Redis.
const loadedTimeout = 500 * time.Millisecond

// within reports whether got is within frac of want.
func within(got, want, frac float64) bool {
	return math.Abs(got-want) <= frac*want
}

// Three replicas on one key send the limit together, not three times it.
// The upper bound is the point; the lower one only says that they share
// rather than starve, and is loose (−20%): on a host that steals CPU the
// replicas wake late, and the slots they wake late for pass, over 10% of
// them at times. The fleet's rate under stalls is held by the stall tests,
// each against a steady fleet beside it.
func TestSharedThreeReplicasTogetherSendTheLimitNotThreeTimesIt(t *testing.T) {
	addr := redistest.Start(t).Addr
	admin := newClient(t, &redis.Options{Addr: addr})
	const limit = 500.0
	cfg := limiter.SharedConfig{Key: "shaper:agg", Mode: limiter.Leaky, Limit: limit, Burst: 1, FallbackLimit: 100, Timeout: loadedTimeout}
	lims, _ := replicas(t, addr, 3, cfg)

	callsBefore := redistest.ScriptCalls(t, admin)
	start := time.Now()
	r := drive(t, lims)
	r.reach(t, start.Add(3*time.Second))
	r.halt()
	calls := redistest.ScriptCalls(t, admin) - callsBefore

	from, to := start.Add(500*time.Millisecond), start.Add(2900*time.Millisecond)
	got := r.rate(from, to)
	most := r.mostIn(100*time.Millisecond, from, to)
	slots := 0
	per := make([]int, len(r.slots))
	for i, s := range r.slots {
		per[i] = len(s)
		slots += len(s)
	}
	t.Logf("shared, 3 replicas at limit %v: aggregate %.1f/s over %v, most in any 100ms %d, per replica %v slots, redis calls %d (%.4f per slot), slowest Reserve %v",
		limit, got, to.Sub(from), most, per, calls, float64(calls)/float64(slots), slices.Max(r.worst))
	if !atMostOver(got, limit, 0.03, 0.20) {
		t.Errorf("aggregate rate = %.1f/s; want %v +3%% -20%% (3 replicas must share one limit)", got, limit)
	}
	if maxMost := int(limit*0.1) + 5; most > maxMost {
		t.Errorf("most slots in any 100ms = %d; want <= %d", most, maxMost)
	}
	fair := limit * 3 / float64(len(lims)) // 3s of the limit, split evenly
	for i, n := range per {
		if float64(n) < 0.2*fair {
			t.Errorf("replica %d got %d slots over 3s; want a share of the limit", i, n)
		}
	}
	for i, l := range lims {
		if l.Fallback() {
			t.Errorf("replica %d: Fallback() = true; want false with Redis up", i)
		}
	}
}

func TestSharedTokenBurstIsOneForAllReplicasNotOneEach(t *testing.T) {
	addr := redistest.Start(t).Addr
	admin := newClient(t, &redis.Options{Addr: addr})
	const limit, burst = 100.0, 20
	cfg := limiter.SharedConfig{Key: "shaper:burst", Mode: limiter.Token, Limit: limit, Burst: burst, FallbackLimit: 30, Timeout: loadedTimeout}
	lims, _ := replicas(t, addr, 3, cfg)

	// refilled reports whether the shared bucket is full again: Redis's
	// clock has passed the key's theoretical arrival time. By then every
	// slot a replica still holds from its last lease is too late to use.
	refilled := func() bool {
		ctx := context.Background()
		now, err := admin.Time(ctx).Result()
		tat, err2 := admin.HGet(ctx, cfg.Key, "tat").Float64()
		return err == nil && err2 == nil && float64(now.UnixMicro()) >= tat
	}

	// atOnce has each replica take slots as fast as it can, at the same
	// time as the others, while they come at once, and returns how many
	// each got before one lay ahead of the moment Reserve handed it out: a
	// Reserve that waited for a lease (Redis answering slowly on a busy
	// machine) hands out slots of the reply's time, which are not ahead
	// for that. Taking them one replica after another instead would leave
	// each lease waiting behind the others' Redis calls, and a slot more
	// than 2ms late is given up (maxLate). It also returns how long the
	// round took.
	atOnce := func() ([]int, time.Duration) {
		start := time.Now()
		got := make([]int, len(lims))
		var wg sync.WaitGroup
		for i, l := range lims {
			wg.Go(func() {
				for got[i] < 10*burst && time.Until(l.Reserve(time.Now())) <= 0 {
					got[i]++
				}
			})
		}
		wg.Wait()
		return got, time.Since(start)
	}
	for round := range 2 {
		if round > 0 {
			// Idle until the bucket has refilled.
			testwait.For(t, 10*time.Second, "the shared bucket to refill", refilled)
		}
		got, took := atOnce()
		total := got[0] + got[1] + got[2]
		// The bucket refills at the limit while the round runs: 20ms
		// of a busy machine's Redis calls was seen, two slots more.
		most := burst + 1 + int(limit*took.Seconds())
		t.Logf("round %d: slots at once per replica %v, total %d in %v (burst %d, at most %d)", round, got, total, took.Round(time.Microsecond), burst, most)
		// Over-granting is the failure; a loaded machine may see a slot
		// or two of a lease as already ahead (19 of 20 was seen with a
		// benchmark running alongside), which only under-grants.
		if total < burst-2 || total > most {
			t.Errorf("round %d: %d slots at once across 3 replicas in %v; want burst %d (at most %d with the refill), not up to %d", round, total, took, burst, most, 3*burst)
		}
	}
}

func TestSharedFallsBackWhenRedisDiesAndReturnsWhenItRestarts(t *testing.T) {
	rs := redistest.Start(t)
	addr := rs.Addr
	const limit, fallback = 500.0, 50.0
	// Long enough that a loaded machine does not fall back by itself,
	// short enough to fall back well within a second.
	cfg := limiter.SharedConfig{Key: "shaper:outage", Mode: limiter.Leaky, Limit: limit, Burst: 1, FallbackLimit: fallback, Timeout: 250 * time.Millisecond}
	lims, logs := replicas(t, addr, 3, cfg)
	allFallback := func(want bool) func() bool {
		return func() bool {
			for _, l := range lims {
				if l.Fallback() != want {
					return false
				}
			}
			return true
		}
	}

	start := time.Now()
	r := drive(t, lims)
	r.reach(t, start.Add(time.Second))
	killed := time.Now()
	rs.Stop()
	took, ok := waitFor(2*time.Second, allFallback(true))
	if !ok || took > time.Second {
		t.Fatalf("after Redis died, all replicas fell back = %v after %v; want true within 1s", ok, took)
	}
	for i, l := range lims {
		if got := l.Limit(time.Now()); got != fallback {
			t.Errorf("replica %d: Limit() = %v while fallen back; want FallbackLimit %v", i, got, fallback)
		}
	}
	fellBack := time.Now()
	r.reach(t, fellBack.Add(1200*time.Millisecond))
	restarted := time.Now()
	rs.Restart()
	back, ok := waitFor(6*time.Second, allFallback(false))
	if !ok {
		t.Fatalf("after Redis restarted, all replicas back to shared = false after %v; want true within a few seconds", back)
	}
	recovered := time.Now()
	r.reach(t, recovered.Add(1100*time.Millisecond))
	r.halt()

	shared := r.rate(start.Add(300*time.Millisecond), killed)
	fb := r.rate(fellBack.Add(100*time.Millisecond), restarted)
	rec := r.rate(recovered.Add(100*time.Millisecond), recovered.Add(1100*time.Millisecond))
	t.Logf("aggregate of 3 replicas: shared %.1f/s (limit %v), fallback %.1f/s (3 × %v), recovered %.1f/s; fell back %v after the kill, back %v after the restart; slowest Reserve %v",
		shared, limit, fb, fallback, rec, took.Round(time.Millisecond), back.Round(time.Millisecond), slices.Max(r.worst))
	// The phases around the outage are short (0.7s and 1s), so a stall of
	// this busy machine weighs more than in the steady test above; only
	// under-sending is excused.
	if !atMostOver(shared, limit, 0.03, 0.25) {
		t.Errorf("shared aggregate = %.1f/s; want %v (+3%%, -25%%)", shared, limit)
	}
	if !within(fb, 3*fallback, 0.10) {
		t.Errorf("fallback aggregate = %.1f/s; want 3 × fallback_limit = %v ±10%% (never unlimited)", fb, 3*fallback)
	}
	if !atMostOver(rec, limit, 0.03, 0.25) {
		t.Errorf("recovered aggregate = %.1f/s; want %v (+3%%, -25%%)", rec, limit)
	}
	for i, log := range logs {
		if n := log.Count("falling back"); n != 1 {
			t.Errorf("replica %d logged %d fallbacks; want 1 per transition:\n%s", i, n, log)
		}
		if n := log.Count("back to the shared limit"); n != 1 {
			t.Errorf("replica %d logged %d returns; want 1 per transition:\n%s", i, n, log)
		}
		if w := log.String(); !strings.Contains(w, "level=WARN") || !strings.Contains(w, "err=") {
			t.Errorf("replica %d: fallback not logged as a warning with its error:\n%s", i, w)
		}
	}
}

func TestSharedReserveNeverWaitsLongerThanTimeoutWhenRedisStalls(t *testing.T) {
	addr := redistest.Start(t).Addr
	admin := newClient(t, &redis.Options{Addr: addr})
	const timeout = 50 * time.Millisecond
	cfg := limiter.SharedConfig{Key: "shaper:stall", Mode: limiter.Leaky, Limit: 500, Burst: 1, FallbackLimit: 50, Timeout: timeout}
	lims, logs := replicas(t, addr, 2, cfg)

	r := drive(t, lims)
	r.reach(t, time.Now().Add(300*time.Millisecond)) // on the shared limit first
	// The clients keep go-redis defaults (ContextTimeoutEnabled off, a
	// read timeout of seconds), so their calls hang for the whole pause.
	paused := time.Now()
	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", 2000, "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	took, ok := waitFor(time.Second, func() bool { return lims[0].Fallback() && lims[1].Fallback() })
	if !ok {
		t.Errorf("Fallback() = false %v into a 2s pause; want true", took)
	}
	back, ok := waitFor(5*time.Second, func() bool { return !lims[0].Fallback() && !lims[1].Fallback() })
	if !ok {
		t.Errorf("Fallback() = true %v after the pause began; want back to shared after it ends", back)
	}
	r.halt()
	worst := slices.Max(r.worst)
	t.Logf("Redis paused 2s: fell back after %v, back to shared %v after the pause began; slowest Reserve %v (timeout %v); during pause %.1f/s",
		took.Round(time.Millisecond), (took + back).Round(time.Millisecond), worst, timeout, r.rate(paused.Add(200*time.Millisecond), paused.Add(1800*time.Millisecond)))
	if worst > timeout+100*time.Millisecond {
		t.Errorf("slowest Reserve = %v; want about Timeout (%v), whatever Redis does", worst, timeout)
	}
	if got, want := r.rate(paused.Add(200*time.Millisecond), paused.Add(1800*time.Millisecond)), 2*50.0; !within(got, want, 0.15) {
		t.Errorf("rate during the pause = %.1f/s; want 2 × fallback_limit = %v ±15%%", got, want)
	}
	for i, log := range logs {
		if !strings.Contains(log.String(), "timeout") {
			t.Errorf("replica %d: log does not name the timeout:\n%s", i, log)
		}
	}
}

func TestSharedSetRateOnOneReplicaChangesTheRateOfAll(t *testing.T) {
	addr := redistest.Start(t).Addr
	cfg := limiter.SharedConfig{Key: "shaper:setrate", Mode: limiter.Leaky, Limit: 300, Burst: 1, FallbackLimit: 50, Timeout: loadedTimeout}
	lims, _ := replicas(t, addr, 3, cfg)

	start := time.Now()
	r := drive(t, lims)
	r.reach(t, start.Add(time.Second))
	changed := time.Now()
	lims[0].SetRate(600, 1)
	took, ok := waitFor(time.Second, func() bool {
		now := time.Now()
		return lims[1].Limit(now) == 600 && lims[2].Limit(now) == 600
	})
	if !ok {
		t.Errorf("Limit() of the other replicas = %v, %v %v after SetRate(600) on replica 0; want 600",
			lims[1].Limit(time.Now()), lims[2].Limit(time.Now()), took)
	}
	r.reach(t, changed.Add(1300*time.Millisecond))
	r.halt()

	before := r.rate(start.Add(200*time.Millisecond), changed)
	after := r.rate(changed.Add(200*time.Millisecond), changed.Add(1200*time.Millisecond))
	t.Logf("aggregate before SetRate %.1f/s (300), after %.1f/s (600); others saw the new limit after %v", before, after, took.Round(time.Millisecond))
	if !atMostOver(before, 300, 0.05, 0.25) {
		t.Errorf("rate before SetRate = %.1f/s; want 300 (+5%%, -25%%)", before)
	}
	if !atMostOver(after, 600, 0.05, 0.25) || after < before*1.5 {
		t.Errorf("rate after SetRate(600) on one replica = %.1f/s; want 600 (+5%%, -25%%) for all, well above before", after)
	}
}

func TestSharedFirstWriterWinsUntilSetRate(t *testing.T) {
	addr := redistest.Start(t).Addr
	admin := newClient(t, &redis.Options{Addr: addr})
	client := newClient(t, &redis.Options{Addr: addr})
	cfg := func(limit float64) limiter.SharedConfig {
		return limiter.SharedConfig{Key: "shaper:first", Mode: limiter.Token, Limit: limit, Burst: 5, FallbackLimit: 1, Timeout: loadedTimeout}
	}
	a := newShared(t, client, cfg(100), nil)
	b := newShared(t, client, cfg(500), nil)
	if got := b.Limit(time.Now()); got != 100 {
		t.Errorf("second replica's Limit() = %v; want the first writer's 100", got)
	}
	b.SetRate(200, 7)
	if _, ok := waitFor(time.Second, func() bool {
		return admin.HGet(context.Background(), "shaper:first", "limit").Val() == "200"
	}); !ok {
		t.Fatalf("limit in Redis = %q after SetRate(200); want 200", admin.HGet(context.Background(), "shaper:first", "limit").Val())
	}
	// a hears of it with its next lease (2 slots at 100/s).
	for range 3 {
		a.Reserve(time.Now())
	}
	if got := a.Limit(time.Now()); got != 200 {
		t.Errorf("first replica's Limit() after SetRate(200) elsewhere = %v; want 200", got)
	}
	c := newShared(t, client, cfg(700), nil)
	if got := c.Limit(time.Now()); got != 200 {
		t.Errorf("a replica started after SetRate(200) has Limit() = %v; want 200, not its own 700", got)
	}
	state := admin.HGetAll(context.Background(), "shaper:first").Val()
	ttl := admin.PTTL(context.Background(), "shaper:first").Val()
	t.Logf("state %v, ttl %v", state, ttl)
	if state["burst"] != "7" || state["tat"] == "" {
		t.Errorf("hash = %v; want tat, limit 200, burst 7", state)
	}
	if ttl < 9*time.Second {
		t.Errorf("PTTL = %v; want at least 10s, longer than a full refill", ttl)
	}
}

func TestSharedSurvivesScriptFlushWithoutFallingBack(t *testing.T) {
	addr := redistest.Start(t).Addr
	admin := newClient(t, &redis.Options{Addr: addr})
	log := &logtest.Buffer{}
	s := newShared(t, newClient(t, &redis.Options{Addr: addr}), limiter.SharedConfig{
		Key: "shaper:flush", Mode: limiter.Leaky, Limit: 1000, Burst: 1, FallbackLimit: 10, Timeout: loadedTimeout,
	}, log)
	for i := range 200 {
		if i == 100 {
			if err := admin.ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatalf("SCRIPT FLUSH: %v", err)
			}
		}
		s.Reserve(time.Now())
	}
	if s.Fallback() {
		t.Errorf("Fallback() = true after SCRIPT FLUSH; want the script reloaded on NOSCRIPT:\n%s", log)
	}
}

func TestSharedFallsBackOnBadRedisAndNeverSendsUnlimited(t *testing.T) {
	const fallback = 20.0
	tests := []struct {
		name    string
		setup   func(t *testing.T) *redis.Options
		wantLog string
	}{
		{
			name: "wrong password",
			setup: func(t *testing.T) *redis.Options {
				addr := redistest.Start(t, "--requirepass", "right").Addr
				return &redis.Options{Addr: addr, Password: "wrong"}
			},
			wantLog: "WRONGPASS",
		},
		{
			name: "no password",
			setup: func(t *testing.T) *redis.Options {
				addr := redistest.Start(t, "--requirepass", "right").Addr
				return &redis.Options{Addr: addr}
			},
			wantLog: "NOAUTH",
		},
		{
			name: "nothing listening",
			setup: func(t *testing.T) *redis.Options {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				addr := l.Addr().String()
				l.Close()
				return &redis.Options{Addr: addr}
			},
			// go-redis retries the refused dial until the deadline.
			wantLog: "did not answer within the timeout 50ms",
		},
		{
			name: "unroutable address",
			setup: func(t *testing.T) *redis.Options {
				unrouted := make(chan struct{})
				t.Cleanup(func() { close(unrouted) })
				// TEST-NET-1, which never answers. No packet leaves the
				// machine: the dialer stands in for an unroutable
				// network and only waits until the dial gives up. The
				// dial timeout bounds how long Close waits for the call.
				return &redis.Options{Addr: "192.0.2.1:6379", DialTimeout: 300 * time.Millisecond, MaxRetries: -1,
					Dialer: func(ctx context.Context, _, _ string) (net.Conn, error) {
						select { // until the test ends: go-redis does not cancel a dial on Close
						case <-ctx.Done():
							return nil, ctx.Err()
						case <-unrouted:
							return nil, errors.New("dial tcp 192.0.2.1:6379: i/o timeout (no route)")
						}
					}}
			},
			wantLog: "redis at 192.0.2.1:6379",
		},
		{
			name: "key holds a string",
			setup: func(t *testing.T) *redis.Options {
				addr := redistest.Start(t).Addr
				admin := newClient(t, &redis.Options{Addr: addr})
				if err := admin.Set(context.Background(), "shaper:bad", "x", 0).Err(); err != nil {
					t.Fatal(err)
				}
				return &redis.Options{Addr: addr}
			},
			wantLog: "WRONGTYPE",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opt := tt.setup(t)
			log := &logtest.Buffer{}
			cfg := limiter.SharedConfig{Key: "shaper:bad", Mode: limiter.Token, Limit: 1000, Burst: 10, FallbackLimit: fallback}
			s := newShared(t, newClient(t, opt), cfg, log)
			if _, ok := waitFor(time.Second, s.Fallback); !ok {
				t.Fatalf("Fallback() = false; want true")
			}
			if got := s.Limit(time.Now()); got != fallback {
				t.Errorf("Limit() = %v; want FallbackLimit %v", got, fallback)
			}
			// A backlog asks for slots as fast as it can for 300ms: at
			// 20/s with the burst scaled to 1, that is about 7 slots.
			start := time.Now()
			n := 0
			for time.Since(start) < 300*time.Millisecond && n < 100_000 {
				now := time.Now()
				slot := s.Reserve(now)
				if d := time.Since(now); d > 200*time.Millisecond {
					t.Errorf("Reserve took %v; want about the timeout at most", d)
				}
				if slot.After(start.Add(300 * time.Millisecond)) {
					break
				}
				n++
			}
			if most := int(0.3*fallback) + 2; n > most {
				t.Errorf("%d slots in 300ms; want <= %d (fallback_limit %v, never unlimited)", n, most, fallback)
			}
			logged := log.String()
			t.Logf("%d slots in 300ms; log: %s", n, strings.TrimSpace(logged))
			if !strings.Contains(logged, tt.wantLog) || log.Count("falling back") != 1 {
				t.Errorf("log = %q; want one fallback warning naming %q", logged, tt.wantLog)
			}
		})
	}
}

func TestSharedRedisCallsPerSlotFollowTheLeaseSize(t *testing.T) {
	addr := redistest.Start(t).Addr
	admin := newClient(t, &redis.Options{Addr: addr})
	client := newClient(t, &redis.Options{Addr: addr})
	tests := []struct {
		limit float64
		lease int // 20 from 1000/s, limit × 10ms below, at least limit × 2ms
	}{
		{limit: 10, lease: 1},
		{limit: 100, lease: 1},
		{limit: 600, lease: 6},
		{limit: 1000, lease: 20},
		{limit: 5000, lease: 20},
		{limit: 20000, lease: 40},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.limit), func(t *testing.T) {
			const slots = 2000
			s := newShared(t, client, limiter.SharedConfig{
				Key: fmt.Sprintf("shaper:calls:%v", tt.limit), Mode: limiter.Leaky, Limit: tt.limit, Burst: 1, FallbackLimit: 1, Timeout: loadedTimeout,
			}, nil)
			before := redistest.ScriptCalls(t, admin)
			// A backlog: every slot is asked for at once, so none comes
			// too late to use and each call's lease is used up.
			now := time.Now()
			for range slots {
				s.Reserve(now)
			}
			calls := redistest.ScriptCalls(t, admin) - before
			t.Logf("limit %v: lease %d, %d slots, %d redis calls, %.4f calls per slot", tt.limit, tt.lease, slots, calls, float64(calls)/slots)
			// One more where a lease ends within 2ms of now: the next is
			// asked for ahead.
			if want := (slots + tt.lease - 1) / tt.lease; calls < want || calls > want+1 {
				t.Errorf("redis calls for %d slots at %v/s = %d; want %d or one more asked ahead (one per lease of %d)", slots, tt.limit, calls, want, tt.lease)
			}
			if s.Fallback() {
				t.Errorf("Fallback() = true; want false")
			}
		})
	}
}

func TestSharedIsSafeForSimultaneousUse(t *testing.T) {
	addr := redistest.Start(t).Addr
	const limit, perGoroutine = 200.0, 500
	s := newShared(t, newClient(t, &redis.Options{Addr: addr}), limiter.SharedConfig{
		Key: "shaper:simultaneous", Mode: limiter.Leaky, Limit: limit, Burst: 1, FallbackLimit: 10, Timeout: loadedTimeout,
	}, nil)
	// Four goroutines share one limiter, as a backlog asking at once
	// would; a fifth reads Limit and Fallback and sets the same rate.
	now := time.Now()
	slots := make([][]time.Time, 4)
	var wg sync.WaitGroup
	for i := range slots {
		wg.Go(func() {
			for range perGoroutine {
				slots[i] = append(slots[i], s.Reserve(now))
			}
		})
	}
	wg.Go(func() {
		for range 100 {
			s.Limit(time.Now())
			s.Fallback()
			s.SetRate(limit, 1)
		}
	})
	wg.Wait()
	if s.Fallback() {
		t.Fatalf("Fallback() = true; want false")
	}
	all := slices.Concat(slots...)
	slices.SortFunc(all, time.Time.Compare)
	// SetRate drops the rest of the lease, so a few slots are skipped;
	// none may be handed out twice. Slots may come closer than an interval
	// where a late caller takes a slot that was due (up to 2ms late) or at
	// the seam between leases (the round trip's jitter, large on a busy
	// machine: 2ms was seen under load, 4 slots at 2000/s), so the spacing
	// is checked as a count at a rate whose interval is larger than that
	// jitter: no 100ms holds more than its share plus three.
	interval := time.Duration(float64(time.Second) / limit)
	for i := 1; i < len(all); i++ {
		if !all[i].After(all[i-1]) {
			t.Errorf("slots %d and %d are both at %v; want no slot twice", i-1, i, all[i])
		}
	}
	for i, j := 0, 0; i < len(all); i++ {
		for all[i].Sub(all[j]) >= 100*time.Millisecond {
			j++
		}
		if n, most := i-j+1, int(100*time.Millisecond/interval)+3; n > most {
			t.Errorf("%d slots within 100ms ending at slot %d; want at most %d at %v/s", n, i, most, limit)
			break
		}
	}
	if span, least := all[len(all)-1].Sub(all[0]), time.Duration(len(all)-1)*interval; span < least-least/100 {
		t.Errorf("%d slots span %v; want at least %v at %v/s", len(all), span, least, limit)
	}
}

func TestSharedAfterCloseUsesTheFallbackLimit(t *testing.T) {
	addr := redistest.Start(t).Addr
	s := newShared(t, newClient(t, &redis.Options{Addr: addr}), limiter.SharedConfig{
		Key: "shaper:close", Mode: limiter.Leaky, Limit: 1000, Burst: 1, FallbackLimit: 10,
	}, nil)
	s.Reserve(time.Now())
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v; want nil", err)
	}
	s.Close() // a second Close does nothing
	now := time.Now()
	first, second := s.Reserve(now), s.Reserve(now)
	if gap := second.Sub(first); gap < 100*time.Millisecond-time.Millisecond {
		t.Errorf("slots after Close %v apart; want 100ms (the fallback limit, never unlimited)", gap)
	}
	if !s.Fallback() || s.Limit(now) != 10 {
		t.Errorf("after Close: Fallback() = %v, Limit() = %v; want true, 10", s.Fallback(), s.Limit(now))
	}
}

func TestNewSharedRejectsBadConfig(t *testing.T) {
	client := newClient(t, &redis.Options{Addr: "127.0.0.1:1"})
	good := limiter.SharedConfig{Key: "k", Mode: limiter.Leaky, Limit: 10, Burst: 1, FallbackLimit: 5}
	tests := []struct {
		name      string
		give      func(c *limiter.SharedConfig)
		nilClient bool
		want      []string
	}{
		{name: "no key", give: func(c *limiter.SharedConfig) { c.Key = "" }, want: []string{"key must not be empty"}},
		{name: "bad mode", give: func(c *limiter.SharedConfig) { c.Mode = "fast" }, want: []string{`unknown mode "fast"`}},
		{name: "bad limit and burst", give: func(c *limiter.SharedConfig) { c.Limit, c.Burst = -1, 0 },
			want: []string{"limit must be a finite number > 0, got -1", "burst must be >= 1, got 0"}},
		{name: "no fallback", give: func(c *limiter.SharedConfig) { c.FallbackLimit = 0 },
			want: []string{"fallback limit must be a finite number > 0, got 0"}},
		{name: "unlimited fallback", give: func(c *limiter.SharedConfig) { c.FallbackLimit = math.Inf(1) },
			want: []string{"fallback limit must be a finite number > 0, got +Inf"}},
		{name: "fallback above limit", give: func(c *limiter.SharedConfig) { c.FallbackLimit = 11 },
			want: []string{"fallback limit must be <= limit (10), got 11"}},
		{name: "negative timeout", give: func(c *limiter.SharedConfig) { c.Timeout = -time.Second },
			want: []string{"shared timeout must be >= 0, got -1s"}},
		{name: "nil client", give: func(c *limiter.SharedConfig) {}, nilClient: true,
			want: []string{"needs a redis client, got nil"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.give(&cfg)
			var c redis.UniversalClient = client
			if tt.nilClient {
				c = nil
			}
			s, err := limiter.NewShared(c, cfg, time.Now())
			if err == nil {
				s.Close()
				t.Fatalf("NewShared(%+v) = nil error; want %q", cfg, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("NewShared(%+v) = %q; want it to contain %q", cfg, err, w)
				}
			}
		})
	}
}

// atMostOver reports whether got is at most over above want and at most
// under below it (fractions). Over-sending is what these tests guard
// against, so over is tight; under-sending measures how busy the machine
// is (a caller that wakes late wastes its slot), so under is looser.
func atMostOver(got, want, over, under float64) bool {
	return got <= want*(1+over) && got >= want*(1-under)
}

// Slots of a lease that pass before the replica comes back, and those left
// when it drops the lease, are counted as unused, one by one.
func TestSharedCountsTheLeasedSlotsItLetPassAsUnused(t *testing.T) {
	addr := redistest.Start(t).Addr
	// A lease is 20 slots at 1000/s (a replica alone keeps them after it
	// came late for one of its slots).
	const limit, lease = 1000.0, 20
	s := newShared(t, newClient(t, &redis.Options{Addr: addr}), limiter.SharedConfig{
		Key: "shaper:unused", Mode: limiter.Leaky, Limit: limit, Burst: 1, FallbackLimit: 10, Timeout: loadedTimeout,
	}, nil)
	s.Reserve(time.Now())
	if got := s.Unused(); got != 0 {
		t.Fatalf("Unused() after the first slot = %d; want 0", got)
	}
	// The lease's other slots pass: the next Reserve skips them all and
	// takes the first slot of a new lease.
	time.Sleep(100 * time.Millisecond)
	s.Reserve(time.Now())
	if got := s.Unused(); got != lease-1 {
		t.Errorf("Unused() after the lease passed = %d; want %d", got, lease-1)
	}
	// Close drops the rest of the new lease.
	s.Close()
	if got := s.Unused(); got != 2*(lease-1) {
		t.Errorf("Unused() after Close = %d; want %d", got, 2*(lease-1))
	}
	if s.Fallback() != true {
		t.Errorf("Fallback() after Close = false; want true")
	}
}

// The adaptive rate moves the shared limit in force below the fleet's
// rate.limit, its ceiling; a rate change at run time moves the ceiling.
// So a rise computed on one replica never undoes another replica's
// lowered rate.limit, and a first writer that adapts sets its configured
// limit as the ceiling, not the limit it adapted to.
func TestSharedAdaptStaysUnderTheCeilingThatSetRateMoves(t *testing.T) {
	addr := redistest.Start(t).Addr
	admin := newClient(t, &redis.Options{Addr: addr})
	client := newClient(t, &redis.Options{Addr: addr})
	ctx := context.Background()
	cfg := limiter.SharedConfig{Key: "shaper:adapt", Mode: limiter.Leaky, Limit: 100, Burst: 1, FallbackLimit: 10, Timeout: loadedTimeout}
	a := newShared(t, client, cfg, nil)
	b := newShared(t, client, cfg, nil)
	// stored waits until Redis holds limit and ceiling, and b has heard
	// of them (each Reserve may make the call that brings them).
	stored := func(step string, limit, ceiling string) {
		t.Helper()
		if _, ok := waitFor(2*time.Second, func() bool {
			b.Reserve(time.Now())
			f := admin.HMGet(ctx, cfg.Key, "limit", "ceiling").Val()
			return f[0] == limit && f[1] == ceiling &&
				fmt.Sprint(b.Limit(time.Now())) == limit && fmt.Sprint(b.Ceiling()) == ceiling
		}); !ok {
			t.Errorf("%s: Redis holds limit, ceiling = %v, the other replica Limit() %v, Ceiling() %v; want %s, %s",
				step, admin.HMGet(ctx, cfg.Key, "limit", "ceiling").Val(), b.Limit(time.Now()), b.Ceiling(), limit, ceiling)
		}
	}

	stored("at start", "100", "100")
	a.Adapt(40)
	stored("a push-back on a", "40", "100")
	a.SetRate(50, 1)
	stored("a rate change on a", "50", "50")
	b.Adapt(100) // b's rise towards its configured limit
	stored("a rise on b above the ceiling", "50", "50")
	b.Adapt(30)
	stored("a push-back on b", "30", "50")
	a.SetRate(80, 1)
	stored("a rate raised on a", "80", "80")
	if got := a.Ceiling(); got != 80 {
		t.Errorf("a.Ceiling() after its SetRate(80) = %v; want 80", got)
	}

	// A first writer that adapts before its first call sets its
	// configured limit as the ceiling.
	fresh := cfg
	fresh.Key = "shaper:adapt:fresh"
	c := newShared(t, client, fresh, nil)
	if err := admin.Del(ctx, fresh.Key).Err(); err != nil {
		t.Fatal(err)
	}
	c.Adapt(20)
	if _, ok := waitFor(2*time.Second, func() bool {
		c.Reserve(time.Now())
		f := admin.HMGet(ctx, fresh.Key, "limit", "ceiling").Val()
		return f[0] == "20" && f[1] == "100"
	}); !ok {
		t.Errorf("after Adapt(20) on an empty key: limit, ceiling = %v; want 20, 100", admin.HMGet(ctx, fresh.Key, "limit", "ceiling").Val())
	}
}

// A replica whose requests come in bursts (five every 20ms, 250/s on
// average, under a limit of 500/s) lets the slots between bursts pass
// while no request waits: idle time, not a stop. Its leases stay 10ms
// long, one Redis call for each burst or so; taken for stops, they would
// shrink to a slot each, a call per request and more.
func TestSharedKeepsItsLeasesAcrossIdleTime(t *testing.T) {
	rs := redistest.Start(t)
	admin := newClient(t, &redis.Options{Addr: rs.Addr})
	s, err := limiter.NewShared(newClient(t, &redis.Options{Addr: rs.Addr}), limiter.SharedConfig{
		Key: "shaper:idle", Mode: limiter.Leaky, Limit: 500, Burst: 1, FallbackLimit: 100, Timeout: loadedTimeout,
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	before := redistest.ScriptCalls(t, admin)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	taken := 0
	for range 100 {
		<-tick.C
		for range 5 { // as the pipeline's scheduler does: Next, sleep, Allow
			for {
				now := time.Now()
				if next := s.Next(now); next.After(now) {
					timer.Reset(next.Sub(now))
					<-timer.C
					continue
				}
				if s.Allow(now) {
					taken++
					break
				}
			}
		}
	}
	calls := redistest.ScriptCalls(t, admin) - before
	perSlot := float64(calls) / float64(taken)
	t.Logf("bursts of 5 every 20ms under 500/s: %d slots, %d Redis calls (%.3f per slot), %d let pass", taken, calls, perSlot, s.Unused())
	if perSlot > 0.6 {
		t.Errorf("%.3f Redis calls per slot; want at most 0.6 (about one lease of 5 per burst)", perSlot)
	}
}
