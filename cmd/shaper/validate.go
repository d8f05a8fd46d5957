package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/shaper-dev/shaper/config"
)

// files is a flag that may be given several times.
type files []string

func (f *files) String() string     { return strings.Join(*f, ",") }
func (f *files) Set(v string) error { *f = append(*f, v); return nil }

// validateCmd checks every config given with --config (the flag may be
// repeated) and reports every problem of each; it fails if any has one.
// With --skip-env, a value that names an unset ${VAR} is listed as not
// checked instead of failing, so that CI can check configs without their
// secrets.
func validateCmd(ctx context.Context, args []string, g *globals, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	var paths files
	fs.Var(&paths, "config", "config file (required; repeat to check several)")
	skipEnv := fs.Bool("skip-env", false, "list values with an unset ${VAR} as not checked instead of failing")
	if err := parseFlags(fs, args, g, stderr); err != nil {
		return err
	}
	if len(paths) == 0 {
		return fmt.Errorf("%w: validate: --config is required", errUsage)
	}
	var bad []error
	for _, path := range paths {
		cfg, unchecked, err := loadConfig(ctx, "validate", path, config.Options{SkipEnv: *skipEnv})
		if errors.Is(err, errInterrupted) {
			return err
		}
		for _, u := range unchecked {
			fmt.Fprintln(stdout, u)
		}
		if err != nil {
			bad = append(bad, configError(g.source("config"), path, err))
			continue
		}
		fmt.Fprintf(stdout, "%s: ok (%d pipelines%s)\n", path, len(cfg.Pipelines), notChecked(len(unchecked)))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %w", errUsage, errors.Join(bad...))
	}
	return nil
}

// notChecked is what the ok line of a file adds for n values left unchecked.
func notChecked(n int) string {
	switch n {
	case 0:
		return ""
	case 1:
		return "; 1 value not checked"
	}
	return fmt.Sprintf("; %d values not checked", n)
}

// schemaCmd prints the JSON Schema (draft 2020-12) of the config file, for
// an editor: shaper schema > shaper.schema.json, then the modeline
// "# yaml-language-server: $schema=shaper.schema.json" atop a config.
func schemaCmd(args []string, g *globals, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("schema", flag.ContinueOnError)
	if err := parseFlags(fs, args, g, stderr); err != nil {
		return err
	}
	s, err := config.Schema()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", s)
	return err
}

// errInterrupted is loadConfig's error when SIGINT or SIGTERM came first:
// a runtime failure (exit 1), as for any command a signal stops.
var errInterrupted = errors.New("interrupted while loading")

// loadConfig is config.LoadWith for command cmd, given up when ctx ends
// (SIGINT or SIGTERM) before the file is loaded. The load goes on in its
// goroutine, which main's exit ends: a read stuck on a hung file system
// cannot be called off, and the process should not wait for it.
func loadConfig(ctx context.Context, cmd, path string, opts config.Options) (*config.File, []string, error) {
	type loaded struct {
		cfg       *config.File
		unchecked []string
		err       error
	}
	interrupted := fmt.Errorf("%s: %w %s", cmd, errInterrupted, path)
	if ctx.Err() != nil {
		return nil, nil, interrupted
	}
	done := make(chan loaded, 1) // the goroutine never waits to send
	go func() {
		cfg, unchecked, err := config.LoadWith(path, opts)
		done <- loaded{cfg, unchecked, err}
	}()
	select {
	case l := <-done:
		return l.cfg, l.unchecked, l.err
	case <-ctx.Done():
		return nil, nil, interrupted
	}
}

// configError is how run and validate report err, the error of loading the
// config at path: where the path came from (--config, or SHAPER_CONFIG)
// and the path, when it is not a regular file; else the path, then each
// problem on its own line.
func configError(from, path string, err error) error {
	if errors.Is(err, config.ErrNotRegular) {
		return fmt.Errorf("%s %w", from, err)
	}
	return fmt.Errorf("%s:\n%v", path, err)
}
