// Command shaper consumes messages from NATS into a bounded leaky bucket and
// drains it at a fixed rate to an HTTP sink. See the README for the whole
// story; this package only parses the command line and wires config to parts.
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
	"strings"
	"syscall"
)

// version is stamped at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

// Exit codes (SPEC §3).
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

const usage = `shaper: shape bursts from NATS into a steady rate of HTTP requests.

Usage:
  shaper run      --config FILE      run the pipelines until SIGTERM/SIGINT
  shaper validate --config FILE      check a config; print every problem with its key path
  shaper replay   --config FILE --pipeline NAME [--from T] [--to T] [--rate N]
                  [--dead-letters] [--reason R] [--dry-run]
                                     replay a bounded range of the source (or its dead
                                     letters) at a smooth rate, with progress; exits 0
                                     when every message has a final outcome
  shaper demo     [--rate N] [--messages N] [--mode leaky|token] [--burst N] [--duration D]
                                     embedded NATS + embedded sink, shows shaping live
  shaper healthcheck [--url URL]     exit 0 if a running shaper's /healthz answers 200 (for containers)
  shaper version

Global flags (before or after the subcommand):
  --log-level debug|info|warn|error  (default info)
  --log-format json|text             (default text)

Exit codes: 0 success (including a graceful drain), 1 runtime failure, 2 usage or config error.
`

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks an error of the command line or config: exit code 2.
var errUsage = errors.New("usage")

// globals are the flags every subcommand accepts.
type globals struct {
	logLevel  string
	logFormat string
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.logLevel, "log-level", g.logLevel, "debug, info, warn or error")
	fs.StringVar(&g.logFormat, "log-format", g.logFormat, "json or text")
}

func (g *globals) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, fmt.Errorf("%w: --log-level: want debug, info, warn or error, got %q", errUsage, g.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: logAttr}
	var log *slog.Logger
	switch g.logFormat {
	case "text":
		log = slog.New(slog.NewTextHandler(w, opts))
	case "json":
		log = slog.New(slog.NewJSONHandler(w, opts))
	default:
		return nil, fmt.Errorf("%w: --log-format: want json or text, got %q", errUsage, g.logFormat)
	}
	logRedisTo(log) // go-redis's logger is one per process
	return log, nil
}

// realMain runs the command line args and returns the exit code. Only main exits.
func realMain(args []string, stdout, stderr io.Writer) int {
	g := globals{logLevel: "info", logFormat: "text"}
	top := flag.NewFlagSet("shaper", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	g.register(top)
	if err := top.Parse(args); err != nil {
		fmt.Fprintf(stderr, "shaper: %v\n\n%s", err, usage)
		return exitUsage
	}
	args = top.Args()
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "run":
		err = runCmd(ctx, rest, &g, stdout, stderr)
	case "validate":
		err = validateCmd(rest, &g, stdout, stderr)
	case "replay":
		err = replayCmd(ctx, rest, &g, stdout, stderr)
	case "schema":
		err = schemaCmd(rest, &g, stdout, stderr)
	case "completion":
		err = completionCmd(rest, &g, stdout, stderr)
	case "demo":
		err = demoCmd(ctx, rest, &g, stdout, stderr)
	case "healthcheck":
		err = healthcheckCmd(ctx, rest, &g, stdout, stderr)
	case "version":
		fmt.Fprintf(stdout, "shaper %s\n", version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		err = fmt.Errorf("%w: unknown command %q", errUsage, cmd)
	}
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "shaper: %s\n", strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		return exitUsage
	default:
		fmt.Fprintf(stderr, "shaper: %v\n", err)
		return exitRuntime
	}
}

// parseFlags parses a subcommand's flags, the global ones included.
func parseFlags(fs *flag.FlagSet, args []string, g *globals, stderr io.Writer) error {
	g.register(fs)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: %s: unexpected argument %q", errUsage, fs.Name(), fs.Arg(0))
	}
	return nil
}
