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
	lim, err := limiter.New(limiter.Config{
		Mode: limiter.Mode(pc.Rate.Mode), Limit: pc.Rate.Limit, Burst: *pc.Rate.Burst, Warmup: pc.Rate.Warmup,
	}, time.Now())
	if err != nil {
		return parts, err
	}
	parts.Limiter = lim
	switch s := pc.Sink; {
	case s.HTTP != nil:
		parts.Sink, err = sinks.NewHTTP(*s.HTTP)
	case s.NATS != nil:
		parts.Sink, err = sinks.NewNATS(s.NATS.NATSPublisherConfig, name)
	}
	if err != nil {
		return parts, fmt.Errorf("sink: %w", err)
	}
	if dl := pc.DeadLetter; dl != nil {
		if parts.DeadLetter, err = sinks.NewNATS(*dl.NATS, name+"-dead-letter"); err != nil {
			return parts, fmt.Errorf("dead_letter: %w", err)
		}
	}
	capacity := pc.Bucket.Capacity
	if parts.Source, err = sources.NewNATS(*pc.Source.NATS, capacity, name, log.With("pipeline", pc.Name)); err != nil {
		return parts, fmt.Errorf("source: %w", err)
	}
	return parts, nil
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
