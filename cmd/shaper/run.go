package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/shaper-dev/shaper/config"
)

func runCmd(ctx context.Context, args []string, g *globals, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	path := fs.String("config", "", "config file (required)")
	watch := fs.Bool("watch", false, "reload the config when the file changes, as on SIGHUP")
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
	cfg, err := config.Load(*path)
	if err != nil {
		return fmt.Errorf("%w: %s:\n%v", errUsage, *path, err)
	}
	warnIfWritableByOthers(*path, cfg, log)

	// The first SIGINT/SIGTERM ends ctx and starts the drain; the second
	// ends force, which stops at once, still acking only what is finished.
	force, forceStop := forceOnSecondSignal(ctx, log)
	defer forceStop()

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

// forceOnSecondSignal returns a context that ends at the second
// SIGINT/SIGTERM (ctx ends at the first), or when stop is called.
func forceOnSecondSignal(ctx context.Context, log *slog.Logger) (force context.Context, stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	force, forceStop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
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
	return force, func() {
		signal.Stop(sigs)
		forceStop()
		<-done
	}
}
