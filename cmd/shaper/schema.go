package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/shaper-dev/shaper/config"
)

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
