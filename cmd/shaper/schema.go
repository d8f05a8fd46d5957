package main

import (
	"errors"
	"io"
)

// schemaCmd prints the JSON Schema of the config file.
func schemaCmd(args []string, g *globals, stdout, stderr io.Writer) error {
	return errors.New("schema: not built yet") // issue 16: being written
}
