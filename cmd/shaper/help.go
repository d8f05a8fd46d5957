package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// tagline opens the help.
const tagline = `shaper: shape bursts from Kafka or NATS into a steady rate of requests to an
HTTP endpoint, a Kafka topic or a NATS subject.`

// exitCodes ends the help.
const exitCodes = `Exit codes: 0 success (including a graceful drain), 1 runtime failure or a
forced stop (SIGQUIT, or a second signal 1 s or more after the first),
2 usage or config error.`

// helpCmd prints the help of shaper, or of the command named.
func helpCmd(args []string, g *globals, stdout io.Writer) error {
	fs := flag.NewFlagSet("help", flag.ContinueOnError)
	if err := parseCommandLine(fs, args, g); err != nil {
		return err
	}
	switch fs.NArg() {
	case 0:
		fmt.Fprint(stdout, usage())
		return nil
	case 1:
		cmd, ok := lookupCommand(fs.Arg(0))
		if !ok {
			return fmt.Errorf("%w: help: unknown command %q", errUsage, fs.Arg(0))
		}
		cfs, err := flagsOf(cmd)
		if err != nil {
			return err
		}
		fmt.Fprint(stdout, commandHelp(cmd, cfs))
		return nil
	default:
		return fmt.Errorf("%w: help: want one command, got %q", errUsage, fs.Args())
	}
}

// usage is the help of shaper: every command, and every flag of each.
func usage() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", tagline)
	b.WriteString("Usage:\n")
	b.WriteString("  shaper [global flags] COMMAND [flags]\n")
	b.WriteString("  shaper help COMMAND      a command's help, as shaper COMMAND --help\n")
	b.WriteString("  shaper --version\n\n")

	b.WriteString("Commands:\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	tw.Flush()

	global := flag.NewFlagSet("global", flag.ContinueOnError)
	newGlobals().register(global)
	b.WriteString("\nFlags of each command, besides the global flags:\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, c := range commands() {
		fs, err := flagsOf(c)
		if err != nil {
			fmt.Fprintf(tw, "  %s\n    (%s)\n", usageLine(c), strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
			continue
		}
		var own []*flag.Flag
		fs.VisitAll(func(f *flag.Flag) {
			if global.Lookup(f.Name) == nil {
				own = append(own, f)
			}
		})
		if len(own) == 0 {
			continue
		}
		fmt.Fprintf(tw, "  %s\n", usageLine(c))
		for _, f := range own {
			writeFlag(tw, "    ", f)
		}
	}
	tw.Flush()

	b.WriteString("\nGlobal flags, before or after the command:\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	global.VisitAll(func(f *flag.Flag) { writeFlag(tw, "  ", f) })
	fmt.Fprintf(tw, "  --version\tprint the version and exit (before the command)\n")
	fmt.Fprintf(tw, "  -h, --help\tprint this help, or after a command, its help\n")
	tw.Flush()

	fmt.Fprintf(&b, "\nA flag given wins over its environment variable [$NAME].\n%s\n", exitCodes)
	return b.String()
}

// commandHelp is the help of one command: what it does and all its flags,
// read from fs, its FlagSet.
func commandHelp(cmd command, fs *flag.FlagSet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s\n\n%s.\n\nFlags:\n", usageLine(cmd), upperFirst(cmd.summary))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fs.VisitAll(func(f *flag.Flag) { writeFlag(tw, "  ", f) })
	fmt.Fprintf(tw, "  -h, --help\tprint this help\n")
	tw.Flush()
	fmt.Fprintf(&b, "\nA flag given wins over its environment variable [$NAME].\n%s\n", exitCodes)
	return b.String()
}

// usageLine is how a command is called: shaper run [flags].
func usageLine(cmd command) string {
	line := "shaper " + cmd.name + " [flags]"
	if cmd.args != "" {
		line += " " + cmd.args
	}
	return line
}

// writeFlag writes one line of help for f: its name, the kind of value it
// takes, its usage, its default unless that is the zero value, and the
// environment variable it falls back to.
func writeFlag(w io.Writer, indent string, f *flag.Flag) {
	kind, text := flag.UnquoteUsage(f)
	name := "--" + f.Name
	switch kind {
	case "":
	case "value":
		name += " string" // a repeatable flag such as validate's --config
	default:
		name += " " + kind
	}
	switch f.DefValue {
	case "", "0", "0s", "false":
	default:
		text += fmt.Sprintf(" (default %s)", f.DefValue)
	}
	if env, ok := envFallback(f.Name); ok {
		text += " [$" + env + "]"
	}
	fmt.Fprintf(w, "%s%s\t%s\n", indent, name, text)
}

// upperFirst returns s with its first letter in upper case.
func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
