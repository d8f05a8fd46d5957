package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"reflect"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/shaper-dev/shaper/shaper"
)

// daemon runs a set of pipelines with their admin server, and changes them
// when the config is reloaded (SIGHUP, or --watch).
type daemon struct {
	registry *prometheus.Registry
	metrics  *shaper.Metrics
	log      *slog.Logger
	// configPath is reloaded on SIGHUP; watch also reloads it when it changes.
	configPath string
	watch      bool

	mu      sync.Mutex
	cfg     *shaper.Config     // the config in force
	members map[string]*member // the newest pipeline of each name
	order   []string           // pipeline names in config order, for listing
	running sync.WaitGroup     // every started pipeline's Run
	force   context.Context    // ends every pipeline at once; set by serve
}

// member is one pipeline the daemon runs, with what a reload compares.
type member struct {
	p     *shaper.Pipeline
	cfg   shaper.PipelineConfig
	parts shaper.Parts
	done  chan struct{} // closed when Run has returned
}

// newDaemon builds every pipeline's parts from cfg, without starting them.
// On error, whatever was built is closed.
func newDaemon(cfg *shaper.Config, log *slog.Logger) (*daemon, error) {
	d := &daemon{cfg: cfg, registry: prometheus.NewRegistry(), log: log, members: map[string]*member{}}
	d.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d.metrics = shaper.NewMetrics(d.registry)
	for _, pc := range cfg.Pipelines {
		m, err := d.build(pc)
		if err != nil {
			d.closeAll()
			return nil, fmt.Errorf("pipeline %s: %w", pc.Name, err)
		}
		d.members[pc.Name] = m
		d.order = append(d.order, pc.Name)
	}
	return d, nil
}

func (d *daemon) build(pc shaper.PipelineConfig) (*member, error) {
	parts, err := buildParts(pc, d.log)
	if err != nil {
		return nil, err
	}
	parts.Metrics, parts.Logger, parts.DrainTimeout = d.metrics, d.log, d.cfg.Shutdown.DrainTimeout
	return &member{p: shaper.New(pc, parts), cfg: pc, parts: parts, done: make(chan struct{})}, nil
}

// list returns the newest pipeline of each name, in config order.
func (d *daemon) list() []*shaper.Pipeline {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*shaper.Pipeline, 0, len(d.order))
	for _, name := range d.order {
		if m, ok := d.members[name]; ok {
			out = append(out, m.p)
		}
	}
	return out
}

// closeAll releases the parts of pipelines that were built but never
// started (startup failed).
func (d *daemon) closeAll() {
	for _, m := range d.members {
		closeParts(m.parts)
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

// serve runs the admin server on ln and every pipeline until ctx ends and
// they have drained, or force ends and they have stopped. Meanwhile it
// reloads the config on SIGHUP and, with watch, when the file changes.
func (d *daemon) serve(ctx, force context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           shaper.Admin(d.list, d.registry, d.cfg.Admin.Token, d.log),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
	}
	var wg sync.WaitGroup // the admin server and the config watcher
	wg.Go(func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("admin server failed", "err", err)
		}
	})
	d.log.Info("shaper started", "version", version, "admin", ln.Addr().String(), "pipelines", len(d.members))

	d.mu.Lock()
	d.force = force
	for _, name := range d.order {
		d.start(d.members[name], nil)
	}
	d.mu.Unlock()

	reloads := make(chan string, 1)
	if d.configPath != "" {
		hups := make(chan os.Signal, 1)
		signal.Notify(hups, syscall.SIGHUP)
		defer signal.Stop(hups)
		watchCtx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		wg.Go(func() { d.watchConfig(watchCtx, hups, reloads) })
	}
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case why := <-reloads:
			d.reload(why)
		}
	}

	d.log.Info("signal received: draining", "timeout", d.cfg.Shutdown.DrainTimeout)
	d.mu.Lock()
	for _, m := range d.members {
		m.p.Drain()
	}
	d.mu.Unlock()
	d.running.Wait()

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	wg.Wait()
	d.log.Info("shaper stopped")
	return err
}

// start runs m once after, if not nil, has finished (a replaced pipeline
// drains before its successor starts, so two never share a source). It
// requires that d.mu is held.
func (d *daemon) start(m *member, after *member) {
	d.running.Go(func() {
		if after != nil {
			<-after.done
		}
		if err := m.p.Run(d.force); err != nil {
			d.log.Warn("closing pipeline parts", "pipeline", m.cfg.Name, "err", err)
		}
		close(m.done)
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.members[m.cfg.Name] == m && !d.inConfig(m.cfg.Name) {
			delete(d.members, m.cfg.Name)
			d.metrics.Forget(m.cfg.Name)
		}
	})
}

// inConfig reports whether the config in force has a pipeline called name.
// It requires that d.mu is held.
func (d *daemon) inConfig(name string) bool {
	for _, pc := range d.cfg.Pipelines {
		if pc.Name == name {
			return true
		}
	}
	return false
}

// watchConfig sends a reload on every SIGHUP and, with d.watch, whenever
// the config file's size or modification time changes (checked every
// second), until ctx ends.
func (d *daemon) watchConfig(ctx context.Context, hups <-chan os.Signal, reloads chan<- string) {
	var tick <-chan time.Time
	var last os.FileInfo
	if d.watch {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		tick = t.C
		last, _ = os.Stat(d.configPath) // a missing file shows up as a change later
	}
	for {
		why := ""
		select {
		case <-ctx.Done():
			return
		case <-hups:
			why = "SIGHUP"
		case <-tick:
			fi, err := os.Stat(d.configPath)
			if err != nil || last != nil && fi.ModTime().Equal(last.ModTime()) && fi.Size() == last.Size() {
				continue
			}
			last, why = fi, "file changed"
		}
		select {
		case reloads <- why:
		default: // a reload is already pending; it reads the newest file
		}
	}
}

// reload applies the config file to the running daemon: a pipeline removed
// drains and stops; one added starts; one changed is changed in place where
// it can be (rate, bucket, timeouts, retries, max_in_flight, HTTP headers
// and the rest of the HTTP sink's settings) and otherwise replaced (drained,
// then started anew: a new source, sink target or dead-letter target). An
// invalid config is refused with its errors logged, and the running one
// stays. Nothing held is lost: a drained pipeline nacks what it did not
// finish, and its successor or the broker delivers it.
func (d *daemon) reload(why string) {
	log := d.log.With("config", d.configPath, "trigger", why)
	cfg, err := shaper.Load(d.configPath)
	if err != nil {
		log.Error("reload refused: the new config is invalid; the running config stays", "err", err)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if cfg.Admin != d.cfg.Admin {
		log.Warn("reload: admin settings change only with a restart; the running ones stay")
		cfg.Admin = d.cfg.Admin
	}
	old := d.cfg
	d.cfg = cfg
	d.order = d.order[:0]
	kept := map[string]bool{}
	for _, pc := range cfg.Pipelines {
		d.order = append(d.order, pc.Name)
		kept[pc.Name] = true
		m, ok := d.members[pc.Name]
		switch {
		case !ok:
			next, err := d.build(pc)
			if err != nil {
				log.Error("reload: pipeline not started", "pipeline", pc.Name, "err", err)
				continue
			}
			d.members[pc.Name] = next
			d.start(next, nil)
			log.Info("reload: pipeline added", "pipeline", pc.Name)
		case reflect.DeepEqual(m.cfg, pc):
		case changeInPlace(m, pc) == nil:
			m.cfg = pc
			log.Info("reload: pipeline changed in place", "pipeline", pc.Name)
		default:
			next, err := d.build(pc)
			if err != nil {
				log.Error("reload: pipeline kept as it was: its new parts failed", "pipeline", pc.Name, "err", err)
				continue
			}
			m.p.Drain()
			d.members[pc.Name] = next
			d.start(next, m)
			log.Info("reload: pipeline replaced: draining the old one, then starting the new", "pipeline", pc.Name)
		}
	}
	for name, m := range d.members {
		if !kept[name] {
			m.p.Drain()
			log.Info("reload: pipeline removed: draining", "pipeline", name)
		}
	}
	if cfg.Shutdown != old.Shutdown {
		log.Info("reload: the new drain_timeout applies to pipelines started from now on")
	}
}

// reconfigurer is a sink that can take new settings in place.
type reconfigurer interface {
	Reconfigure(shaper.HTTPSinkConfig) error
}

// changeInPlace applies pc to the running member if nothing it was built
// from changed but the rate, bucket, delivery and HTTP sink settings.
func changeInPlace(m *member, pc shaper.PipelineConfig) error {
	a, b := m.cfg, pc
	if !reflect.DeepEqual(a.Source, b.Source) || !reflect.DeepEqual(a.DeadLetter, b.DeadLetter) ||
		!reflect.DeepEqual(a.Rate.Shared, b.Rate.Shared) || a.Rate.Mode != b.Rate.Mode {
		return shaper.ErrNeedsRestart
	}
	switch {
	case a.Sink.HTTP != nil && b.Sink.HTTP != nil:
		if !reflect.DeepEqual(withoutDelivery(*a.Sink.HTTP), withoutDelivery(*b.Sink.HTTP)) {
			r, ok := m.parts.Sink.(reconfigurer)
			if !ok {
				return shaper.ErrNeedsRestart
			}
			if err := r.Reconfigure(*b.Sink.HTTP); err != nil {
				return err
			}
		}
	case !reflect.DeepEqual(sinkTarget(a.Sink), sinkTarget(b.Sink)):
		return shaper.ErrNeedsRestart
	}
	return m.p.Reconfigure(pc)
}

func withoutDelivery(h shaper.HTTPSinkConfig) shaper.HTTPSinkConfig {
	h.DeliveryConfig = shaper.DeliveryConfig{}
	return h
}

// sinkTarget is a sink config without the delivery settings the pipeline
// applies itself.
func sinkTarget(s shaper.SinkConfig) any {
	switch {
	case s.Kafka != nil:
		return s.Kafka.KafkaPublisherConfig
	case s.NATS != nil:
		return s.NATS.NATSPublisherConfig
	case s.HTTP != nil:
		return withoutDelivery(*s.HTTP)
	}
	return nil
}
