package limiter_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/internal/logtest"
	"github.com/shaper-dev/shaper/internal/redistest"
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
