package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/shaper-dev/shaper/shaper"
)

func validateCmd(args []string, g *globals, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	path := fs.String("config", "", "config file (required)")
	if err := parseFlags(fs, args, g, stderr); err != nil {
		return err
	}
	if *path == "" {
		return fmt.Errorf("%w: validate: --config is required", errUsage)
	}
	cfg, err := shaper.Load(*path)
	if err != nil {
		return fmt.Errorf("%w: %s:\n%v", errUsage, *path, err)
	}
	fmt.Fprintf(stdout, "%s: ok (%d pipelines)\n", *path, len(cfg.Pipelines))
	return nil
}
