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
// With --skip-env, a value that names an unset ${VAR} is listed as not
// checked instead of failing, so that CI can check configs without their
// secrets.
func validateCmd(args []string, g *globals, stdout, stderr io.Writer) error {
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
		cfg, unchecked, err := config.LoadWith(path, config.Options{SkipEnv: *skipEnv})
		for _, u := range unchecked {
			fmt.Fprintln(stdout, u)
		}
		if err != nil {
			bad = append(bad, fmt.Errorf("%s:\n%v", path, err))
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
