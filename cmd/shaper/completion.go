package main

import (
	"errors"
	"io"
)

// completionCmd prints a shell completion script.
func completionCmd(args []string, g *globals, stdout, stderr io.Writer) error {
	return errors.New("completion: not built yet") // issue 16: being written
}
