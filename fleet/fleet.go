// Package fleet runs the pipelines of one config side by side and applies a
// reloaded config to them: a pipeline added starts, one removed drains and
// stops, one changed is changed in place where its parts allow it and is
// otherwise replaced (the old one drains, then the new one starts, so two
// never share a source).
//
// The fleet knows no concrete part: a Builder (cmd/shaper's wiring) makes
// each pipeline's source, sink, dead-letter target and limiter. Each part
// says itself what it can change in place, by having a Reconfigure method
// for its own config type (sinks.HTTP does; a part without one must find
// its config unchanged), and the pipeline takes its rate, bucket and
// delivery settings (shaper.Pipeline's Reconfigure, which refuses a new
// rate mode). inPlace puts them together.
package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/shaper"
)

// Builder builds the parts of one pipeline: its source, sink, dead-letter
// target and limiter. The fleet sets the metrics, the logger and the drain
// timeout. On error it returns the parts it did build, which the fleet
// closes.
type Builder func(config.Pipeline) (shaper.Parts, error)

// Reload is a new config for Run to apply, and what caused it (for the log).
type Reload struct {
	Config *config.File
	Why    string
}

// Fleet is the set of pipelines of a config. Build it with New, run it with
// Run. Pipelines is safe to call at any time, from any goroutine.
type Fleet struct {
	build   Builder
	metrics *shaper.Metrics
	log     *slog.Logger
	// clock is every pipeline's (in the daemon NewClock's, whose alarms
	// share the one limit on holding a P).
	clock shaper.Clock

	mu      sync.Mutex
	cfg     *config.File       // the config in force
	members map[string]*member // the newest pipeline of each name
	order   []string           // pipeline names in config order, for listing
	running sync.WaitGroup     // every started pipeline's Run
}

// member is one pipeline of the fleet, with what a reload compares.
type member struct {
	p     *shaper.Pipeline
	cfg   config.Pipeline
	parts shaper.Parts
	done  chan struct{} // closed when Run has returned
}

// New builds every pipeline of cfg with build, without starting them,
// each on clock (nil: shaper.SystemClock) unless build gave it one. On
// error, whatever was built is closed.
func New(cfg *config.File, clock shaper.Clock, build Builder, metrics *shaper.Metrics, log *slog.Logger) (*Fleet, error) {
	if clock == nil {
		clock = shaper.SystemClock{}
	}
	f := &Fleet{build: build, metrics: metrics, log: log, clock: clock, cfg: cfg, members: map[string]*member{}}
	for _, pc := range cfg.Pipelines {
		m, err := f.newMember(pc)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("pipeline %s: %w", pc.Name, err)
		}
		f.members[pc.Name] = m
		f.order = append(f.order, pc.Name)
	}
	return f, nil
}

func (f *Fleet) newMember(pc config.Pipeline) (*member, error) {
	parts, err := f.build(pc)
	if err != nil {
		closeParts(parts)
		return nil, err
	}
	parts.Metrics, parts.Logger, parts.DrainTimeout = f.metrics, f.log, f.cfg.Shutdown.DrainTimeout
	if parts.Clock == nil {
		parts.Clock = f.clock
	}
	return &member{p: shaper.New(pc.Core(), parts), cfg: pc, parts: parts, done: make(chan struct{})}, nil
}

// Pipelines returns the newest pipeline of each name, in config order.
func (f *Fleet) Pipelines() []*shaper.Pipeline {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*shaper.Pipeline, 0, len(f.order))
	for _, name := range f.order {
		if m, ok := f.members[name]; ok {
			out = append(out, m.p)
		}
	}
	return out
}

// Close releases the parts of pipelines that were built but never run
// (startup failed before Run).
func (f *Fleet) Close() {
	for _, m := range f.members {
		closeParts(m.parts)
	}
}

// Run runs every pipeline, and applies each config that arrives on reloads,
// until ctx ends; then it drains every pipeline and returns once all have
// stopped. Ending force stops them at once instead (shaper.Pipeline.Run's
// ctx): what is unfinished is nacked.
func (f *Fleet) Run(ctx, force context.Context, reloads <-chan Reload) {
	f.mu.Lock()
	for _, name := range f.order {
		f.start(force, f.members[name], nil)
	}
	f.mu.Unlock()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case r := <-reloads:
			f.apply(force, r)
		}
	}
	f.mu.Lock()
	f.log.Info("draining every pipeline", "timeout", f.cfg.Shutdown.DrainTimeout)
	for _, m := range f.members {
		m.p.Drain()
	}
	f.mu.Unlock()
	f.running.Wait()
}

// start runs m under force once after, if not nil, has finished. It
// requires that f.mu is held.
func (f *Fleet) start(force context.Context, m *member, after *member) {
	f.running.Go(func() {
		if after != nil {
			<-after.done
		}
		if err := m.p.Run(force); err != nil {
			f.log.Warn("closing pipeline parts", "pipeline", m.cfg.Name, "err", err)
		}
		close(m.done)
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.members[m.cfg.Name] == m && !f.inConfig(m.cfg.Name) {
			delete(f.members, m.cfg.Name)
			f.metrics.Forget(m.cfg.Name)
		}
	})
}

// inConfig reports whether the config in force has a pipeline called name.
// It requires that f.mu is held.
func (f *Fleet) inConfig(name string) bool {
	for _, pc := range f.cfg.Pipelines {
		if pc.Name == name {
			return true
		}
	}
	return false
}

// apply makes the running pipelines those of r.Config. Nothing held is
// lost: a drained pipeline nacks what it did not finish, and its successor
// or the broker delivers it. The admin settings change only with a
// restart; the new drain_timeout applies to pipelines started from now on.
func (f *Fleet) apply(force context.Context, r Reload) {
	log := f.log.With("trigger", r.Why)
	cfg := r.Config
	f.mu.Lock()
	defer f.mu.Unlock()
	if !reflect.DeepEqual(cfg.Admin, f.cfg.Admin) {
		log.Warn("reload: admin settings change only with a restart; the running ones stay")
		cfg.Admin = f.cfg.Admin
	}
	if cfg.Shutdown != f.cfg.Shutdown {
		log.Info("reload: the new drain_timeout applies to pipelines started from now on")
	}
	f.cfg = cfg
	f.order = f.order[:0]
	kept := map[string]bool{}
	for _, pc := range cfg.Pipelines {
		f.order = append(f.order, pc.Name)
		kept[pc.Name] = true
		f.applyOne(force, pc, log.With("pipeline", pc.Name))
	}
	for name, m := range f.members {
		if !kept[name] {
			m.p.Drain()
			log.Info("reload: pipeline removed: draining", "pipeline", name)
		}
	}
}

// applyOne adds, changes in place or replaces the pipeline of pc. It
// requires that f.mu is held.
func (f *Fleet) applyOne(force context.Context, pc config.Pipeline, log *slog.Logger) {
	m, ok := f.members[pc.Name]
	switch {
	case ok && reflect.DeepEqual(m.cfg, pc):
		return
	case ok && inPlace(m, pc) == nil:
		m.cfg = pc
		log.Info("reload: pipeline changed in place")
		return
	}
	next, err := f.newMember(pc)
	switch {
	case err != nil && ok:
		log.Error("reload: pipeline kept as it was: its new parts failed", "err", err)
	case err != nil:
		log.Error("reload: pipeline not started", "err", err)
	case ok:
		m.p.Drain()
		f.members[pc.Name] = next
		f.start(force, next, m)
		log.Info("reload: pipeline replaced: draining the old one, then starting the new")
	default:
		f.members[pc.Name] = next
		f.start(force, next, nil)
		log.Info("reload: pipeline added")
	}
}

// reconfigurable is a part that takes a new config of its own, of type C,
// in place: sinks.HTTP takes a sinks.HTTPConfig. A part says what it can
// change by having the method; a part without one is rebuilt for any
// change of its config.
type reconfigurable[C any] interface {
	Reconfigure(C) error
}

// step is one part's share of a change of config: nothing to do (apply
// nil), its Reconfigure, or a rebuild.
type step struct {
	apply   func() error
	rebuild bool
}

// change returns how part takes its config going from old to new: nothing
// when the config is unchanged, its Reconfigure when it has one, and a
// rebuild when it has none.
func change[C any](part any, old, new C) step {
	if reflect.DeepEqual(old, new) {
		return step{}
	}
	r, can := part.(reconfigurable[C])
	if !can {
		return step{rebuild: true}
	}
	return step{apply: func() error { return r.Reconfigure(new) }}
}

// inPlace applies pc to the running member when every part whose config
// changed takes the change itself, and otherwise returns
// shaper.ErrNeedsRestart, having changed nothing. The pipeline takes its
// rate, bucket and delivery settings (shaper.Pipeline.Reconfigure, which
// refuses a new name or rate mode); each part is asked with change. A
// broker sink's config counts without the delivery settings, which are
// the pipeline's; an HTTP sink's counts whole, since its connections
// follow max_in_flight and timeout.
func inPlace(m *member, pc config.Pipeline) error {
	a, b := m.cfg, pc
	sink := change(m.parts.Sink, sinkTarget(a.Sink), sinkTarget(b.Sink))
	if a.Sink.HTTP != nil && b.Sink.HTTP != nil {
		sink = change(m.parts.Sink, *a.Sink.HTTP, *b.Sink.HTTP)
	}
	steps := []step{
		change(m.parts.Source, a.Source, b.Source),
		change(m.parts.Limiter, a.Rate.Shared, b.Rate.Shared),
		change(m.parts.DeadLetter, a.DeadLetter, b.DeadLetter),
		sink,
	}
	for _, s := range steps {
		if s.rebuild {
			return shaper.ErrNeedsRestart
		}
	}
	if err := m.p.Reconfigure(pc.Core()); err != nil {
		return err
	}
	for _, s := range steps {
		if s.apply != nil {
			if err := s.apply(); err != nil {
				return err
			}
		}
	}
	return nil
}

// sinkTarget is a broker sink's config without the delivery settings the
// pipeline applies itself: where messages go.
func sinkTarget(s config.Sink) any {
	switch {
	case s.Kafka != nil:
		return s.Kafka.KafkaPublisherConfig
	case s.NATS != nil:
		return s.NATS.NATSPublisherConfig
	}
	return s.HTTP
}

// closeParts releases the parts of a pipeline that never ran, or that
// failed to be built.
func closeParts(parts shaper.Parts) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = parts.Close(ctx) // the error that matters (why it never ran) is reported already
}

// closeTimeout bounds closing the parts of a pipeline that never ran.
const closeTimeout = 5 * time.Second
