package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/shaper-dev/shaper/config"
)

func runCmd(ctx context.Context, args []string, g *globals, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	path := fs.String("config", "", "config file (required)")
	watch := fs.Bool("watch", false, "reload the config when the file changes, as on SIGHUP")
	dry := fs.Bool("dry-run", false, "connect to every broker, Redis and sink host of the config, report each on stdout, and exit (0: all reachable)")
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
	cfg, _, err := loadConfig(ctx, "run", *path, config.Options{})
	switch {
	case errors.Is(err, errInterrupted):
		return err
	case err != nil:
		return fmt.Errorf("%w: %w", errUsage, configError(g.source("config"), *path, err))
	}
	if *dry {
		return preflight(ctx, cfg, stdout)
	}
	warnIfWritableByOthers(*path, cfg, log)

	// The first SIGINT/SIGTERM ends ctx and starts the drain; force ends
	// at SIGQUIT or a later second signal, and stops at once, still
	// acking only what is finished. A forced stop ends ctx too, since
	// the fleet drains only once ctx has ended.
	force, forceStop := forceOnSecondSignal(ctx, log)
	defer forceStop()
	ctx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	defer context.AfterFunc(force, stopRun)()

	d, err := newDaemon(cfg, log)
	if err != nil {
		return err
	}
	d.configPath, d.watch = *path, *watch
	ln, err := d.listen()
	if err != nil {
		d.closeAll()
		return err
	}
	if err := d.serve(ctx, force, ln); err != nil {
		return err
	}
	if force.Err() != nil {
		return errors.New("forced to stop before the drain finished; unfinished messages were nacked")
	}
	return nil
}

// warnIfWritableByOthers warns when a config that holds credentials can be
// written by the file's group or by anyone: whoever can change it can point
// a sink URL elsewhere and receive every credential the daemon sends.
func warnIfWritableByOthers(path string, cfg *config.File, log *slog.Logger) {
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm()&0o022 == 0 {
		return
	}
	keys := cfg.SecretKeys()
	if len(keys) == 0 {
		return
	}
	log.Warn("the config file holds credentials and is writable by its group or by anyone: chmod go-w it",
		"config", path, "mode", info.Mode().Perm().String(), "credentials_at", keys)
}

// forceGap is how long after the first SIGINT/SIGTERM another one must
// come to force a stop. A supervisor may forward one signal twice (GNU
// timeout signals the child, then the child's process group): those two
// arrive together and must not turn a drain into a forced stop.
const forceGap = time.Second

// forceOnSecondSignal returns a context that ends at SIGQUIT, at a
// SIGINT/SIGTERM that comes forceGap or more after the first one (which
// ends ctx, and is logged here), or when stop is called. A signal sooner
// than forceGap after the first is logged and ignored. SIGQUIT does not
// dump the goroutines and exit 2, as Go's default handler would: it is the
// operator's way to stop at once, whatever came before.
func forceOnSecondSignal(ctx context.Context, log *slog.Logger) (force context.Context, stop func()) {
	// Room for a burst of signals while the goroutine logs: signal.Notify
	// drops what does not fit.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT)
	force, forceStop := context.WithCancel(context.WithoutCancel(ctx))
	var first time.Time // of the first SIGINT/SIGTERM; zero: none yet
	if ctx.Err() != nil {
		first = time.Now() // it came before Notify
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			var sig os.Signal
			select {
			case sig = <-sigs:
			case <-force.Done():
				return
			}
			now := time.Now()
			switch {
			case sig == syscall.SIGQUIT:
				log.Warn("SIGQUIT: forcing exit; unfinished messages are nacked")
			case first.IsZero():
				first = now
				log.Info("signal received: draining", "signal", signalName(sig),
					"force_with", fmt.Sprintf("SIGQUIT, or a second SIGINT/SIGTERM %s or more later", forceGap))
				continue
			case now.Sub(first) < forceGap:
				log.Warn("second signal too soon after the first: ignored, the drain goes on (a supervisor forwarding one signal twice?)",
					"signal", signalName(sig), "after", now.Sub(first).Round(time.Millisecond), "force_with", fmt.Sprintf("SIGQUIT, or a signal %s or more after the first", forceGap))
				continue
			default:
				log.Warn("second signal: forcing exit; unfinished messages are nacked", "signal", signalName(sig))
			}
			forceStop()
			return
		}
	}()
	return force, func() {
		signal.Stop(sigs)
		forceStop()
		<-done
	}
}

// signalName is a signal's name as operators write it: SIGTERM, not
// "terminated".
func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	}
	return sig.String()
}

// healthcheckCmd calls /healthz of a running shaper, so a container image
// needs no curl: HEALTHCHECK CMD ["shaper", "healthcheck"].
func healthcheckCmd(ctx context.Context, args []string, g *globals, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	url := fs.String("url", "http://127.0.0.1:9090/healthz", "health endpoint of the running shaper")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	if err := parseFlags(fs, args, g, stderr); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return fmt.Errorf("%w: healthcheck: --url: %v", errUsage, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096)) // let the connection close cleanly
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %s", *url, resp.Status)
	}
	fmt.Fprintln(stdout, "ok")
	return nil
}
