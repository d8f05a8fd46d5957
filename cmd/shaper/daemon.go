package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/fleet"
	"github.com/shaper-dev/shaper/internal/tuning"
	"github.com/shaper-dev/shaper/shaper"
)

// daemon is the process around a fleet of pipelines: the admin server, and
// the config reloads (SIGHUP, or --watch) that the fleet applies.
type daemon struct {
	registry *prometheus.Registry
	fleet    *fleet.Fleet
	cfg      *config.File // as started: the admin settings and the drain timeout
	log      *slog.Logger
	// configPath is reloaded on SIGHUP; watch also reloads it when it changes.
	configPath string
	watch      bool
	// knobs is the runtime tuning in force (docs/tuning.md); procs sets
	// GOMAXPROCS from the pipelines' total rate.
	knobs tuning.Knobs
	procs *tuning.Procs
}

// newDaemon builds every pipeline's parts from cfg, without starting them.
// On error, whatever was built is closed.
func newDaemon(cfg *config.File, log *slog.Logger) (*daemon, error) {
	k, err := useTuning(cfg, log)
	if err != nil {
		return nil, err
	}
	d := &daemon{cfg: cfg, registry: prometheus.NewRegistry(), log: log, knobs: k, procs: k.NewProcs(log)}
	d.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), currentBuild().collector())
	build := func(pc config.Pipeline) (shaper.Parts, error) { return buildParts(pc, k, log) }
	f, err := fleet.New(cfg, fleet.NewClock(k), build, shaper.NewMetrics(d.registry), log)
	if err != nil {
		return nil, err
	}
	d.fleet = f
	return d, nil
}

// list returns the newest pipeline of each name, in config order.
func (d *daemon) list() []*shaper.Pipeline { return d.fleet.Pipelines() }

// closeAll releases the parts of pipelines that were built but never
// started (startup failed).
func (d *daemon) closeAll() { d.fleet.Close() }

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
	d.procs.Set(totalLimit(d.list()))
	defer d.knobs.StartHeapFloor()()
	admin := shaper.Admin(d.list, d.registry, d.cfg.Admin.Token,
		shaper.AdminHosts{Listen: d.cfg.Admin.Listen, Allowed: d.cfg.Admin.AllowedHosts}, d.log)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			admin.ServeHTTP(w, r)
			if r.Method == http.MethodPut { // a rate set through the API
				d.procs.Set(totalLimit(d.list()))
			}
		}),
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
	d.log.Info("shaper started", "version", currentBuild().version, "admin", ln.Addr().String(), "pipelines", len(d.list()))

	reloads := make(chan fleet.Reload)
	if d.configPath != "" {
		hups := make(chan os.Signal, 1)
		signal.Notify(hups, syscall.SIGHUP)
		defer signal.Stop(hups)
		watchCtx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		wg.Go(func() { d.watchConfig(watchCtx, hups, reloads) })
	}
	d.fleet.Run(ctx, force, reloads) // until ctx ends and every pipeline has drained

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	wg.Wait()
	d.log.Info("shaper stopped")
	return err
}

// watchConfig loads the config file on every SIGHUP and, with d.watch,
// whenever its size or modification time changes (checked every second),
// until ctx ends, and hands each valid one to the fleet. An invalid config
// is refused with its errors logged, and the running one stays.
func (d *daemon) watchConfig(ctx context.Context, hups <-chan os.Signal, reloads chan<- fleet.Reload) {
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
		cfg, err := config.Load(d.configPath)
		if err != nil {
			d.log.Error("reload refused: the new config is invalid; the running config stays",
				"config", d.configPath, "trigger", why, "err", err)
			continue
		}
		if cfg.Tuning != d.cfg.Tuning {
			d.log.Warn("tuning changed in the config; it applies when the daemon restarts",
				"running", d.cfg.Tuning, "config", cfg.Tuning)
		}
		select {
		case reloads <- fleet.Reload{Config: cfg, Why: why}:
			d.procs.Set(configuredLimit(cfg))
		case <-ctx.Done():
			return
		}
	}
}

// useTuning returns the knobs of cfg's tuning key, or of SHAPER_TUNING,
// which wins over it, and logs what each knob does. An invalid
// SHAPER_TUNING is a usage error.
func useTuning(cfg *config.File, log *slog.Logger) (tuning.Knobs, error) {
	k, err := tuning.Resolve(cfg.Tuning)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errUsage, err)
	}
	report := k.Report()
	args := []any{"tuning", k.String()}
	for _, knob := range slices.Sorted(maps.Keys(report)) {
		args = append(args, knob, report[knob])
	}
	log.Info("runtime tuning (docs/tuning.md)", args...)
	return k, nil
}

// configuredLimit is the sum of the limits cfg's pipelines are set to: a
// reload's, before the fleet has applied it.
func configuredLimit(cfg *config.File) float64 {
	var sum float64
	for _, pc := range cfg.Pipelines {
		sum += pc.Rate.Limit
	}
	return sum
}

// totalLimit is the sum of the limits the pipelines are set to now (an
// admin API call may have changed them).
func totalLimit(pipelines []*shaper.Pipeline) float64 {
	var sum float64
	for _, p := range pipelines {
		sum += p.Status().Limit
	}
	return sum
}
