package limiter_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/internal/logtest"
	"github.com/shaper-dev/shaper/internal/redistest"
	"github.com/shaper-dev/shaper/internal/testwait"
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
	// An outage lasts until every replica has seen probes failed probes
	// of Redis (at four a second, about probes/4 seconds): its length is
	// counted in what the limiter does while Redis is down.
	tests := []struct {
		name   string
		probes int
	}{
		{name: "16 probes", probes: 16},
		// More than go-redis's pool counts failed dials before it dials
		// only once a second (PoolSize, 20 on 2 cores), had the probes
		// gone through it; and at four a second longer than the old 5s
		// probe backoff.
		{name: "28 probes", probes: 28},
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
			r.reach(t, time.Now().Add(300*time.Millisecond)) // on the shared limit first
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
			testwait.For(t, time.Duration(tt.probes)*time.Second, fmt.Sprintf("%d failed probes of every replica", tt.probes), func() bool {
				for i := range lims {
					if logs[i].Count("probe failed")-probesBefore[i] < tt.probes {
						return false
					}
				}
				return true
			})
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
			isBack := make([]bool, n)
			testwait.Every(2*time.Millisecond, 5*time.Second, func() bool {
				left := 0
				for i, l := range lims {
					if !isBack[i] && !l.Fallback() {
						back[i], isBack[i] = time.Since(answered), true
					}
					if !isBack[i] {
						left++
					}
				}
				return left == 0
			})
			r.halt()
			worst := time.Duration(0)
			for i, b := range back {
				if !isBack[i] {
					t.Fatalf("replica %d still fallen back 5s after Redis answered again; want back within 1s:\n%s", i, logs[i])
				}
				worst = max(worst, b)
			}
			t.Logf("Redis down %v (%d failed probes each): back on the shared limit %v after Redis answered (worst of %d replicas: %v); while down, per replica at most %.1f probes/s, %.1f dials/s; %d commands through the clients",
				downFor.Round(time.Millisecond), tt.probes, back, n, worst.Round(time.Millisecond), probes, dials, cmds)
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
