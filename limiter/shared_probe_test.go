package limiter_test

import (
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/internal/logtest"
	"github.com/shaper-dev/shaper/internal/redistest"
	"github.com/shaper-dev/shaper/limiter"
)

// redisCounter counts a client's connection attempts (as its dialer) and
// the commands it sends (as a hook), so that a test can tell what probing
// costs Redis and the network while Redis is down, and what goes through
// the client's pool.
type redisCounter struct {
	dials, cmds atomic.Int64
	d           net.Dialer
}

func (c *redisCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c.dials.Add(1)
	return c.d.DialContext(ctx, network, addr)
}

func (c *redisCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *redisCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.cmds.Add(1)
		return next(ctx, cmd)
	}
}

func (c *redisCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestSharedIsBackWithinASecondOfRedisAnsweringAgainAfterAnyOutage(t *testing.T) {
	tests := []struct {
		name string
		down time.Duration
	}{
		{name: "4s", down: 4 * time.Second},
		// Longer than the old 5s probe backoff, and long enough for
		// go-redis's pool to count 20 (PoolSize on 2 cores) failed
		// dials had the probes gone through it.
		{name: "7s", down: 7 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rs := redistest.Start(t)
			addr := rs.Addr
			const limit, fallback = 300.0, 30.0
			cfg := limiter.SharedConfig{Key: "shaper:return", Mode: limiter.Leaky, Limit: limit, Burst: 1, FallbackLimit: fallback, Timeout: 250 * time.Millisecond}
			const n = 3
			lims := make([]*limiter.Shared, n)
			logs := make([]*logtest.Buffer, n)
			counters := make([]*redisCounter, n)
			for i := range lims {
				logs[i], counters[i] = &logtest.Buffer{}, &redisCounter{}
				// Debug, so that every failed probe leaves a record.
				cfg.Logger = slog.New(slog.NewTextHandler(logs[i], &slog.HandlerOptions{Level: slog.LevelDebug}))
				// go-redis defaults otherwise: ContextTimeoutEnabled off,
				// three retries, five dial attempts per connection.
				client := newClient(t, &redis.Options{Addr: addr, Dialer: counters[i].dial})
				client.AddHook(counters[i])
				s, err := limiter.NewShared(client, cfg, time.Now())
				if err != nil {
					t.Fatalf("NewShared = %v; want no error", err)
				}
				t.Cleanup(func() { s.Close() })
				lims[i] = s
			}
			allFallback := func() bool {
				for _, l := range lims {
					if !l.Fallback() {
						return false
					}
				}
				return true
			}

			r := drive(t, lims)
			time.Sleep(300 * time.Millisecond)
			killed := time.Now()
			rs.Stop()
			if took, ok := waitFor(2*time.Second, allFallback); !ok {
				t.Fatalf("all replicas fell back = false %v after Redis died; want true", took)
			}
			fellBack := time.Now()
			dialsBefore, cmdsBefore := make([]int64, n), make([]int64, n)
			probesBefore := make([]int, n)
			for i := range lims {
				dialsBefore[i], cmdsBefore[i] = counters[i].dials.Load(), counters[i].cmds.Load()
				probesBefore[i] = logs[i].Count("probe failed")
			}
			time.Sleep(time.Until(killed.Add(tt.down)))
			downFor := time.Since(fellBack)
			var dials, probes float64
			var cmds int64
			for i := range lims {
				dials = max(dials, float64(counters[i].dials.Load()-dialsBefore[i])/downFor.Seconds())
				probes = max(probes, float64(logs[i].Count("probe failed")-probesBefore[i])/downFor.Seconds())
				cmds += counters[i].cmds.Load() - cmdsBefore[i]
			}

			rs.Restart() // returns once the server answers PING
			answered := time.Now()
			back := make([]time.Duration, n)
			for left := n; left > 0 && time.Since(answered) < 5*time.Second; {
				time.Sleep(2 * time.Millisecond)
				for i, l := range lims {
					if back[i] == 0 && !l.Fallback() {
						back[i] = time.Since(answered)
						left--
					}
				}
			}
			r.halt()
			worst := time.Duration(0)
			for i, b := range back {
				if b == 0 {
					t.Fatalf("replica %d still fallen back 5s after Redis answered again; want back within 1s:\n%s", i, logs[i])
				}
				worst = max(worst, b)
			}
			t.Logf("Redis down %v: back on the shared limit %v after Redis answered (worst of %d replicas: %v); while down, per replica at most %.1f probes/s, %.1f dials/s; %d commands through the clients",
				tt.down, back, n, worst.Round(time.Millisecond), probes, dials, cmds)
			// The promise is 1s (in fact the probe interval plus one
			// call); the margin is for a loaded 2-core machine.
			if worst > 1500*time.Millisecond {
				t.Errorf("back on the shared limit %v after Redis answered again; want <= 1s (1.5s on a loaded machine)", worst)
			}
			if probes > 5 || dials > 5 {
				t.Errorf("while Redis was down a replica probed %.1f times/s and dialed %.1f times/s; want <= 5 of each", probes, dials)
			}
			// A probe calls through the client only once its own dial
			// works, so that the pool counts no failed dial: after
			// PoolSize of them go-redis dials only once a second.
			if cmds != 0 {
				t.Errorf("%d commands went through the clients while Redis was down; want 0", cmds)
			}
			for i, log := range logs {
				if got := log.Count("falling back"); got != 1 {
					t.Errorf("replica %d logged %d fallbacks; want 1:\n%s", i, got, log)
				}
				if got := log.Count("back to the shared limit"); got != 1 {
					t.Errorf("replica %d logged %d returns; want 1:\n%s", i, got, log)
				}
			}
		})
	}
}
