package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/internal/kafkaconn"
	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/sinks"
	"github.com/shaper-dev/shaper/sources"
)

func runCmd(ctx context.Context, args []string, g *globals, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	path := fs.String("config", "", "config file (required)")
	if err := parseFlags(fs, args, g, stderr); err != nil {
		return err
	}
	log, err := g.logger(stderr)
	if err != nil {
		return err
	}
	if *path == "" {
		return fmt.Errorf("%w: run: --config is required", errUsage)
	}
	cfg, err := shaper.Load(*path)
	if err != nil {
		return fmt.Errorf("%w: %s:\n%v", errUsage, *path, err)
	}

	// The first SIGINT/SIGTERM ends ctx and starts the drain; the second
	// ends force, which stops at once, still acking only what is finished.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	force, forceStop := context.WithCancel(context.WithoutCancel(ctx))
	defer forceStop()
	go func() {
		for n := 0; ; n++ {
			select {
			case <-sigs:
				if n == 1 {
					log.Warn("second signal: forcing exit; unfinished messages are nacked")
					forceStop()
					return
				}
			case <-force.Done():
				return
			}
		}
	}()

	d, err := newDaemon(cfg, log)
	if err != nil {
		return err
	}
	if err := d.run(ctx, force); err != nil {
		return err
	}
	if force.Err() != nil {
		return errors.New("forced to stop before the drain finished; unfinished messages were nacked")
	}
	return nil
}

// daemon is a running set of pipelines with their admin server.
type daemon struct {
	cfg       *shaper.Config
	pipelines []*shaper.Pipeline
	registry  *prometheus.Registry
	log       *slog.Logger
}

// newDaemon builds every pipeline's parts from cfg. On error, whatever was
// built is closed.
func newDaemon(cfg *shaper.Config, log *slog.Logger) (*daemon, error) {
	d := &daemon{cfg: cfg, registry: prometheus.NewRegistry(), log: log}
	d.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := shaper.NewMetrics(d.registry)
	for _, pc := range cfg.Pipelines {
		parts, err := buildParts(pc, log)
		if err != nil {
			d.closeAll()
			return nil, fmt.Errorf("pipeline %s: %w", pc.Name, err)
		}
		parts.Metrics, parts.Logger, parts.DrainTimeout = metrics, log, cfg.Shutdown.DrainTimeout
		d.pipelines = append(d.pipelines, shaper.New(pc, parts))
	}
	return d, nil
}

// buildParts wires one pipeline's config to its source, sink, dead-letter
// target and limiter.
func buildParts(pc shaper.PipelineConfig, log *slog.Logger) (parts shaper.Parts, err error) {
	defer func() {
		if err != nil {
			closeParts(parts)
		}
	}()
	name := "shaper-" + pc.Name
	if parts.Limiter, err = buildLimiter(pc.Rate, log.With("pipeline", pc.Name)); err != nil {
		return parts, fmt.Errorf("rate: %w", err)
	}
	if parts.Sink, err = buildSink(pc.Sink, name); err != nil {
		return parts, fmt.Errorf("sink: %w", err)
	}
	if dl := pc.DeadLetter; dl != nil {
		if parts.DeadLetter, err = buildDeadLetter(*dl, name+"-dead-letter"); err != nil {
			return parts, fmt.Errorf("dead_letter: %w", err)
		}
	}
	if parts.Source, err = buildSource(pc.Source, pc.Bucket.Capacity, name, log.With("pipeline", pc.Name)); err != nil {
		return parts, fmt.Errorf("source: %w", err)
	}
	return parts, nil
}

// buildLimiter returns the local limiter, or with rate.shared the Redis-shared
// one, which then owns its Redis client.
func buildLimiter(cfg shaper.RateConfig, log *slog.Logger) (shaper.Limiter, error) {
	local := limiter.Config{Mode: limiter.Mode(cfg.Mode), Limit: cfg.Limit, Burst: *cfg.Burst, Warmup: cfg.Warmup}
	if cfg.Shared == nil {
		return limiter.New(local, time.Now())
	}
	sh := cfg.Shared
	tlsCfg, err := kafkaconn.TLS(sh.Redis.TLS)
	if err != nil {
		return nil, fmt.Errorf("shared.redis: %w", err)
	}
	addrs := sh.Redis.Addrs
	if sh.Redis.Addr != "" {
		addrs = []string{sh.Redis.Addr}
	}
	client := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:      addrs,
		MasterName: sh.Redis.MasterName,
		Username:   sh.Redis.Username,
		Password:   sh.Redis.Password,
		DB:         sh.Redis.DB,
		TLSConfig:  tlsCfg,
		// The limiter bounds every call by its own timeout and falls back;
		// go-redis must not retry behind its back.
		MaxRetries:            -1,
		DialTimeout:           max(sh.Timeout, time.Second),
		ContextTimeoutEnabled: true, // a hung call ends at the limiter's timeout
	})
	lim, err := limiter.NewShared(client, limiter.SharedConfig{
		Key: sh.Key, Mode: local.Mode, Limit: cfg.Limit, Burst: local.Burst,
		FallbackLimit: sh.FallbackLimit, Timeout: sh.Timeout, Logger: log,
	}, time.Now())
	if err != nil {
		_ = client.Close() // the config error is what matters
		return nil, err
	}
	return sharedLimiter{lim, client}, nil
}

// sharedLimiter is a shared limiter together with the Redis client it owns;
// the pipeline closes it when it stops.
type sharedLimiter struct {
	*limiter.Shared
	client redis.UniversalClient
}

func (s sharedLimiter) Close() error {
	return errors.Join(s.Shared.Close(), s.client.Close())
}

// buildSink, buildDeadLetter and buildSource return a nil interface, never
// an interface holding a nil pointer, when the constructor fails.

func buildSink(cfg shaper.SinkConfig, name string) (shaper.Sink, error) {
	switch {
	case cfg.HTTP != nil:
		return orNil(sinks.NewHTTP(*cfg.HTTP))
	case cfg.Kafka != nil:
		return orNil(sinks.NewKafka(cfg.Kafka.KafkaPublisherConfig, name))
	default:
		return orNil(sinks.NewNATS(cfg.NATS.NATSPublisherConfig, name))
	}
}

func buildDeadLetter(cfg shaper.DeadLetterConfig, name string) (shaper.Sink, error) {
	if cfg.Kafka != nil {
		return orNil(sinks.NewKafka(*cfg.Kafka, name))
	}
	return orNil(sinks.NewNATS(*cfg.NATS, name))
}

func buildSource(cfg shaper.SourceConfig, capacity int, name string, log *slog.Logger) (shaper.Source, error) {
	if cfg.Kafka != nil {
		s, err := sources.NewKafka(*cfg.Kafka, capacity, name, log)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	s, err := sources.NewNATS(*cfg.NATS, capacity, name, log)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// orNil converts a constructor's result to a shaper.Sink without wrapping a
// nil pointer.
func orNil[S shaper.Sink](s S, err error) (shaper.Sink, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}

func closeParts(parts shaper.Parts) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if parts.Source != nil {
		_ = parts.Source.Close(ctx) // startup failed; the error that matters is already returned
	}
	if parts.Sink != nil {
		_ = parts.Sink.Close()
	}
	if parts.DeadLetter != nil {
		_ = parts.DeadLetter.Close()
	}
}

func (d *daemon) closeAll() {
	for _, p := range d.pipelines {
		// A pipeline that never ran holds no messages; running it on a
		// cancelled context just closes its parts.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = p.Run(ctx)
	}
}

// listen opens the admin listener; split from serve so the demo can listen
// on a free port and print it.
func (d *daemon) listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", d.cfg.Admin.Listen)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	return ln, nil
}

// run serves the admin API and runs every pipeline until ctx ends and they
// have drained, or force ends and they have stopped.
func (d *daemon) run(ctx, force context.Context) error {
	ln, err := d.listen()
	if err != nil {
		d.closeAll()
		return err
	}
	return d.serve(ctx, force, ln)
}

func (d *daemon) serve(ctx, force context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           shaper.Admin(d.pipelines, d.registry, d.cfg.Admin.Token),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("admin server failed", "err", err)
		}
	})
	d.log.Info("shaper started", "version", version, "admin", ln.Addr().String(), "pipelines", len(d.pipelines))

	var running sync.WaitGroup
	for _, p := range d.pipelines {
		running.Go(func() {
			if err := p.Run(force); err != nil {
				d.log.Warn("closing pipeline parts", "pipeline", p.Name(), "err", err)
			}
		})
	}
	stopped := make(chan struct{})
	wg.Go(func() {
		select {
		case <-ctx.Done():
			d.log.Info("signal received: draining", "timeout", d.cfg.Shutdown.DrainTimeout)
			for _, p := range d.pipelines {
				p.Drain()
			}
		case <-stopped:
		}
	})
	running.Wait()
	close(stopped)

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	wg.Wait()
	d.log.Info("shaper stopped")
	return err
}
