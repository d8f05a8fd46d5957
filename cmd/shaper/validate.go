package main

import (
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
func validateCmd(args []string, g *globals, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	var paths files
	fs.Var(&paths, "config", "config file (required; repeat to check several)")
	if err := parseFlags(fs, args, g, stderr); err != nil {
		return err
	}
	if len(paths) == 0 {
		return fmt.Errorf("%w: validate: --config is required", errUsage)
	}
	var bad []error
	for _, path := range paths {
		cfg, err := config.Load(path)
		if err != nil {
			bad = append(bad, fmt.Errorf("%s:\n%v", path, err))
			continue
		}
		fmt.Fprintf(stdout, "%s: ok (%d pipelines)\n", path, len(cfg.Pipelines))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %w", errUsage, errors.Join(bad...))
	}
	return nil
}
