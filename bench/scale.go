package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/shaper-dev/shaper/internal/window"
)

// ScaleSection is memory under a large backlog and the Redis-shared
// limiter across replicas.
type ScaleSection struct {
	Load    Load         `json:"load"`
	Backlog []BacklogRun `json:"backlog"`
	Shared  []SharedRun  `json:"shared"`
}

// BacklogRun is a `shaper run` child working through a Kafka backlog with
// bucket capacity 1000 and no effective limit.
type BacklogRun struct {
	Backlog   int     `json:"backlog"`
	Delivered int64   `json:"delivered"`
	Seconds   float64 `json:"seconds"`
	Rate      float64 `json:"msgs_per_sec"`
	// HeapMiB is the most go_memstats_heap_inuse_bytes the child's
	// /metrics showed (sampled every 200ms); RSSMiB its peak resident set
	// (VmHWM of /proc/<pid>/status).
	HeapMiB float64 `json:"heap_inuse_mib_max"`
	RSSMiB  float64 `json:"rss_mib_peak"`
	// Capped is set when the run stopped at the time cap before the
	// backlog was through.
	Capped bool `json:"capped,omitempty"`
}

// SharedRun is three `shaper run` replicas sharing one limit through a
// real redis-server.
type SharedRun struct {
	Replicas int     `json:"replicas"`
	Limit    float64 `json:"limit"`
	Seconds  float64 `json:"seconds"`
	Rate     float64 `json:"aggregate_rate"`
	// RateErrPct compares the aggregate with the one shared limit.
	RateErrPct   float64 `json:"rate_err_pct"`
	Max100ms     int     `json:"max_per_100ms"`
	Allowed100ms int     `json:"allowed_per_100ms"`
	// CallsPerRequest is the EVALSHA and EVAL calls the server ran
	// (INFO commandstats) per request the sink received, over the window.
	CallsPerRequest float64 `json:"redis_calls_per_request"`
	Requests        int     `json:"requests"`
	// Fallback is set when a replica reported shaper_limiter_fallback at
	// the end of the window: it ran on its local limit for a while.
	Fallback bool `json:"fallback,omitempty"`
}

func runScale(ctx context.Context, o *options, env *environment) (*ScaleSection, error) {
	probe := startLoadProbe()
	sec := &ScaleSection{}
	sizes := []struct {
		topic string
		n     int
		cap   time.Duration
	}{{topicBacklog100k, 100_000, 2 * time.Minute}, {topicBacklog1M, 1_000_000, 75 * time.Second}}
	if o.quick {
		sizes[1].n, sizes[1].cap = 200_000, 10*time.Second
	}
	for _, s := range sizes {
		progress("scale: publishing a backlog of %d to Kafka", s.n)
		if err := env.kafka.publish(ctx, s.topic, 0, s.n); err != nil {
			return nil, err
		}
		r, err := backlogRun(ctx, o, env, s.topic, s.n, s.cap)
		if err != nil {
			return nil, fmt.Errorf("backlog %d: %w", s.n, err)
		}
		progress("scale: backlog %d: %d delivered in %.1fs (%.0f/s), heap ≤ %.1f MiB, peak RSS %.1f MiB",
			r.Backlog, r.Delivered, r.Seconds, r.Rate, r.HeapMiB, r.RSSMiB)
		sec.Backlog = append(sec.Backlog, r)
	}

	redis, err := startRedis(ctx)
	if err != nil {
		return nil, err
	}
	defer redis.close()
	for _, limit := range []float64{100, 1000} {
		r, err := sharedRun(ctx, o, env, redis, limit)
		if err != nil {
			return nil, fmt.Errorf("shared limit %v: %w", limit, err)
		}
		progress("scale: 3 replicas sharing %v/s: %.1f/s (%+.2f%%), max/100ms %d (≤%d), %.3f Redis calls per request",
			limit, r.Rate, r.RateErrPct, r.Max100ms, r.Allowed100ms, r.CallsPerRequest)
		sec.Shared = append(sec.Shared, r)
	}
	sec.Load = probe.stop()
	return sec, nil
}

func backlogRun(ctx context.Context, o *options, env *environment, topic string, n int, limit time.Duration) (BacklogRun, error) {
	r := BacklogRun{Backlog: n}
	sink, err := startSink(false)
	if err != nil {
		return r, err
	}
	defer sink.close()
	ch, err := startChild(env.bin, o.tmp, "backlog-"+topic, fmt.Sprintf(`
  - name: backlog
    source:%s
    bucket: {capacity: 1000, max_queue_time: 1m}
    rate: {limit: 1000000}
    sink:
      http: {url: %q, max_in_flight: 64}
`, env.kafka.sourceYAML(topic, "shaper-backlog", true), sink.URL))
	if err != nil {
		return r, err
	}
	defer ch.kill()
	start := time.Now()
	var heap float64
	for sink.count.Load() < int64(n) && time.Since(start) < limit && ctx.Err() == nil {
		if m, err := ch.scrape("go_memstats_heap_inuse_bytes"); err == nil {
			heap = max(heap, m["go_memstats_heap_inuse_bytes"])
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.Seconds = time.Since(start).Seconds()
	r.Delivered = sink.count.Load()
	r.Capped = r.Delivered < int64(n)
	r.Rate = float64(r.Delivered) / r.Seconds
	if m, err := ch.scrape("go_memstats_heap_inuse_bytes"); err == nil {
		heap = max(heap, m["go_memstats_heap_inuse_bytes"])
	}
	_, peak, err := procMemory(ch.pid())
	if err != nil {
		return r, err
	}
	r.HeapMiB, r.RSSMiB = heap/(1<<20), float64(peak)/(1<<20)
	if r.Delivered == 0 {
		return r, fmt.Errorf("nothing delivered; log:\n%s", ch.tail())
	}
	return r, nil
}

// sharedRun starts three replicas on one JetStream durable (they share its
// messages) with one limit in Redis, and measures what the sink receives
// from all of them together over a steady window.
func sharedRun(ctx context.Context, o *options, env *environment, redis *redisServer, limit float64) (SharedRun, error) {
	const replicas = 3
	steady := 4 * time.Second
	if o.quick {
		steady = 2 * time.Second
	}
	r := SharedRun{Replicas: replicas, Limit: limit, Allowed100ms: int(limit/10) + 1}
	stream := fmt.Sprintf("SHARED%d", int(limit))
	if err := env.js.stream(ctx, stream); err != nil {
		return r, err
	}
	defer env.js.deleteStream(context.WithoutCancel(ctx), stream)
	// Enough for the start, the steady window and a margin, whatever the rate.
	if err := env.js.publish(ctx, stream, 0, int(limit*(steady.Seconds()+15)), nil); err != nil {
		return r, err
	}
	sink, err := startSink(true)
	if err != nil {
		return r, err
	}
	defer sink.close()
	config := fmt.Sprintf(`
  - name: shared
    source:
      nats: {url: %q, subject: %s.in, stream: %s, durable: shaper-shared}
    bucket: {capacity: 1000, max_queue_time: 1m}
    rate:
      limit: %v
      shared:
        redis: {addr: %q}
        key: shaper:bench:%v
        fallback_limit: %v
        timeout: 200ms
    sink:
      http: {url: %q, max_in_flight: 8}
`, env.js.URL(), stream, stream, limit, redis.Addr, limit, limit/replicas, sink.URL)
	children, err := startChildren(ctx, env.bin, o.tmp, fmt.Sprintf("shared-%v", limit), slices.Repeat([]string{config}, replicas), time.Minute)
	if err != nil {
		return r, err
	}
	defer killAll(children)
	if !sink.waitCount(ctx, int64(limit), time.Minute) {
		return r, fmt.Errorf("no steady delivery within a minute; log:\n%s", children[0].tail())
	}
	time.Sleep(500 * time.Millisecond)
	if err := redis.resetStats(ctx); err != nil {
		return r, err
	}
	from := time.Now()
	time.Sleep(steady)
	to := time.Now()
	calls, err := redis.scriptCalls(ctx)
	if err != nil {
		return r, err
	}
	in := between(sink.arrivals(), from, to)
	r.Seconds = to.Sub(from).Seconds()
	r.Requests = len(in)
	r.Rate = float64(len(in)) / r.Seconds
	r.RateErrPct = 100 * (r.Rate - limit) / limit
	r.Max100ms = window.Most(in, 100*time.Millisecond)
	if len(in) > 0 {
		r.CallsPerRequest = float64(calls) / float64(len(in))
	}
	for _, ch := range children {
		if m, err := ch.scrape("shaper_limiter_fallback"); err == nil && m["shaper_limiter_fallback"] > 0 {
			r.Fallback = true
			progress("scale: a replica had fallen back to its local limit at the end of the window")
		}
	}
	return r, nil
}
