// Command shaper consumes messages from Kafka or NATS into a bounded leaky
// bucket and drains it at a fixed rate to a sink (HTTP, or a Kafka topic or
// NATS subject). See the README and docs/ for the whole story; this package only
// parses the command line, wires config to parts, and puts in force the
// runtime tuning of package internal/tuning (docs/tuning.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
)

// Exit codes (docs/operations.md, Command line).
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks an error of the command line or config: exit code 2.
var errUsage = errors.New("usage")

// command is one subcommand: its name, what follows its flags in its usage
// line, what it does, and the function that runs it. The command's flags
// are the FlagSet that function builds and hands to parseFlags, defined
// once, where they are used; help and completion get that FlagSet by
// calling the function with --help (flagsOf).
type command struct {
	name    string
	args    string // such as "bash|zsh"; "" for a command that takes only flags
	summary string
	run     func(ctx context.Context, args []string, g *globals, stdout, stderr io.Writer) error
}

// commands are the subcommands, in the order help lists them. It is a
// function, not a variable, because help and completion, which some of the
// commands run, read it.
func commands() []command {
	return []command{
		{name: "run", summary: "run the pipelines until SIGTERM/SIGINT (the first drains; SIGQUIT forces)",
			run: runCmd},
		{name: "validate", summary: "check configs (repeat --config); print every problem with file:line:col and key path",
			run: validateCmd},
		{name: "replay", summary: "replay a bounded range of a pipeline's source or dead letters at a smooth rate, with progress",
			run: replayCmd},
		{name: "schema", summary: "print the JSON Schema of the config file",
			run: func(_ context.Context, args []string, g *globals, stdout, stderr io.Writer) error {
				return schemaCmd(args, g, stdout, stderr)
			}},
		{name: "demo", summary: "embedded NATS or Kafka and an embedded sink: watch a burst shaped live",
			run: demoCmd},
		{name: "healthcheck", summary: "exit 0 if a running shaper's /healthz answers 200 (for containers)",
			run: healthcheckCmd},
		{name: "completion", args: "bash|zsh", summary: "print a shell completion script (README: Install)",
			run: func(_ context.Context, args []string, g *globals, stdout, stderr io.Writer) error {
				return completionCmd(args, g, stdout, stderr)
			}},
		{name: "version", summary: "print the version, the commit and the Go version (also: shaper --version)",
			run: func(_ context.Context, args []string, g *globals, stdout, _ io.Writer) error {
				return versionCmd(args, g, stdout)
			}},
		{name: "help", args: "[COMMAND]", summary: "print this help, or a command's with all its flags",
			run: func(_ context.Context, args []string, g *globals, stdout, _ io.Writer) error {
				return helpCmd(args, g, stdout)
			}},
	}
}

// lookupCommand returns the command of that name.
func lookupCommand(name string) (command, bool) {
	i := slices.IndexFunc(commands(), func(c command) bool { return c.name == name })
	if i < 0 {
		return command{}, false
	}
	return commands()[i], true
}

// Log levels and formats: the values of --log-level and --log-format.
var (
	logLevels  = []string{"debug", "info", "warn", "error"}
	logFormats = []string{"json", "text"}
)

// envFallbacks are the environment variables that flags fall back to when
// they are not on the command line: a flag given wins. config applies to
// every command with a --config flag (run, validate, replay).
var envFallbacks = []struct{ flag, env string }{
	{"config", "SHAPER_CONFIG"},
	{"log-level", "SHAPER_LOG_LEVEL"},
	{"log-format", "SHAPER_LOG_FORMAT"},
}

// envFallback returns the environment variable that flag falls back to.
func envFallback(flag string) (string, bool) {
	for _, e := range envFallbacks {
		if e.flag == flag {
			return e.env, true
		}
	}
	return "", false
}

// globals are the flags every subcommand accepts, before or after its name.
type globals struct {
	logLevel  string
	logFormat string
	// given are the flags that were on the command line, before the
	// subcommand or after it: their environment variables are not read.
	given map[string]bool
	// fromEnv names the variable a flag's value came from, for errors.
	fromEnv map[string]string
}

func newGlobals() *globals {
	return &globals{logLevel: "info", logFormat: "text", given: map[string]bool{}, fromEnv: map[string]string{}}
}

// oneOf lists two or more values as a sentence does: "a, b or c".
func oneOf(values []string) string {
	last := len(values) - 1
	return strings.Join(values[:last], ", ") + " or " + values[last]
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.logLevel, "log-level", g.logLevel, oneOf(logLevels))
	fs.StringVar(&g.logFormat, "log-format", g.logFormat, oneOf(logFormats))
}

// source names where a flag's value came from: the flag, or its variable.
func (g *globals) source(flag string) string {
	if env, ok := g.fromEnv[flag]; ok {
		return env
	}
	return "--" + flag
}

// check reports a log level or format that is not one of the known values,
// naming the flag or the environment variable it came from.
func (g *globals) check() error {
	if !slices.Contains(logLevels, strings.ToLower(g.logLevel)) {
		return fmt.Errorf("%w: %s: want %s, got %q", errUsage, g.source("log-level"), oneOf(logLevels), g.logLevel)
	}
	if !slices.Contains(logFormats, g.logFormat) {
		return fmt.Errorf("%w: %s: want %s, got %q", errUsage, g.source("log-format"), oneOf(logFormats), g.logFormat)
	}
	return nil
}

// realMain runs the command line args and returns the exit code. Only main exits.
func realMain(args []string, stdout, stderr io.Writer) int {
	g := newGlobals()
	top := flag.NewFlagSet("shaper", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	g.register(top)
	showVersion := top.Bool("version", false, "print the version and exit")
	switch err := top.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage())
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "shaper: %v\nRun 'shaper --help' for the commands and their flags.\n", err)
		return exitUsage
	}
	top.Visit(func(f *flag.Flag) { g.given[f.Name] = true })
	if *showVersion {
		fmt.Fprintln(stdout, currentBuild())
		return exitOK
	}
	if top.NArg() == 0 {
		fmt.Fprint(stderr, usage())
		return exitUsage
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	name, rest := top.Arg(0), top.Args()[1:]
	cmd, ok := lookupCommand(name)
	if !ok {
		fmt.Fprintf(stderr, "shaper: unknown command %q\nRun 'shaper --help' for the commands and their flags.\n", name)
		return exitUsage
	}
	err := cmd.run(ctx, rest, g, stdout, stderr)
	var help *helpRequest
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &help):
		fmt.Fprint(stdout, commandHelp(cmd, help.fs))
		return exitOK
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "shaper: %s\n", strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		return exitUsage
	default:
		fmt.Fprintf(stderr, "shaper: %v\n", err)
		return exitRuntime
	}
}

// helpRequest is parseFlags' answer to -h or --help: the command's flags,
// for realMain to print its help on stdout (and exit 0), and for help and
// completion to list them.
type helpRequest struct{ fs *flag.FlagSet }

func (h *helpRequest) Error() string { return fmt.Sprintf("%s: help requested", h.fs.Name()) }
func (h *helpRequest) Unwrap() error { return flag.ErrHelp }

// flagsOf returns cmd's FlagSet, the global flags included: the command
// builds it and hands it to parseFlags, which returns it for --help. A
// command that fails before it parses its flags (the demo of a -tags nodemo
// build) returns that error.
func flagsOf(cmd command) (*flag.FlagSet, error) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a command that ran on regardless would stop at once
	err := cmd.run(ctx, []string{"--help"}, newGlobals(), io.Discard, io.Discard)
	var help *helpRequest
	if errors.As(err, &help) {
		return help.fs, nil
	}
	if err == nil {
		err = errors.New("it ran instead of returning its flags")
	}
	return nil, fmt.Errorf("%w: %s: %s", errUsage, cmd.name, strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
}

// parseFlags parses a subcommand's flags, the global ones included, fills
// in those not given from their environment variables (envFallbacks), and
// checks the global ones. -h or --help returns a *helpRequest. It writes
// nothing (the last parameter is unused): errors are returned, and realMain
// prints them or the help.
func parseFlags(fs *flag.FlagSet, args []string, g *globals, _ io.Writer) error {
	if err := parseCommandLine(fs, args, g); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: %s: unexpected argument %q", errUsage, fs.Name(), fs.Arg(0))
	}
	return nil
}

// parseCommandLine is parseFlags for a command that also takes arguments
// after its flags (fs.Args()).
func parseCommandLine(fs *flag.FlagSet, args []string, g *globals) error {
	g.register(fs)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return &helpRequest{fs: fs}
		}
		return fmt.Errorf("%w: %s: %v (shaper help %s lists its flags)", errUsage, fs.Name(), err, fs.Name())
	}
	fs.Visit(func(f *flag.Flag) { g.given[f.Name] = true })
	for _, e := range envFallbacks {
		v := os.Getenv(e.env)
		if v == "" || g.given[e.flag] || fs.Lookup(e.flag) == nil {
			continue
		}
		if err := fs.Set(e.flag, v); err != nil {
			return fmt.Errorf("%w: %s: %v", errUsage, e.env, err)
		}
		g.fromEnv[e.flag] = e.env
	}
	return g.check()
}
