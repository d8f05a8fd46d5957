package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// completionCmd prints a completion script for bash or zsh. Its commands
// and flags are read from the same FlagSets as the help (flagsOf), so the
// script offers exactly what shaper accepts.
func completionCmd(args []string, g *globals, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("completion", flag.ContinueOnError)
	if err := parseCommandLine(fs, args, g); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: completion: want one shell, bash or zsh, got %q", errUsage, fs.Args())
	}
	spec := completionSpec()
	switch fs.Arg(0) {
	case "bash":
		fmt.Fprint(stdout, spec.bash())
	case "zsh":
		fmt.Fprint(stdout, spec.zsh())
	default:
		return fmt.Errorf("%w: completion: want bash or zsh, got %q", errUsage, fs.Arg(0))
	}
	return nil
}

// completedCommand is what a completion script knows of a command: its
// flags, and the words it takes as arguments.
type completedCommand struct {
	name, summary string
	flags         []*flag.Flag // the command's own and the global ones
	words         []string     // its arguments: the shells, or the commands for help
}

// completion is what a completion script knows of shaper.
type completion struct {
	global   []*flag.Flag // those before the command, --version among them
	commands []completedCommand
}

// completionSpec reads the commands and their flags. A command whose flags
// cannot be read (the demo of a -tags nodemo build) is completed without
// flags.
func completionSpec() completion {
	var c completion
	top := flag.NewFlagSet("shaper", flag.ContinueOnError)
	newGlobals().register(top)
	top.Bool("version", false, "print the version and exit")
	top.VisitAll(func(f *flag.Flag) { c.global = append(c.global, f) })
	var names []string
	for _, cmd := range commands() {
		names = append(names, cmd.name)
	}
	for _, cmd := range commands() {
		cc := completedCommand{name: cmd.name, summary: cmd.summary}
		if fs, err := flagsOf(cmd); err == nil {
			fs.VisitAll(func(f *flag.Flag) { cc.flags = append(cc.flags, f) })
		}
		switch cmd.name {
		case "completion":
			cc.words = []string{"bash", "zsh"}
		case "help":
			cc.words = names
		}
		c.commands = append(c.commands, cc)
	}
	return c
}

// takesValue reports whether f is given a value (--config FILE), as
// opposed to a switch (--watch).
func takesValue(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}

// valueWords are the values completed for a flag that takes one of a few;
// nil for a flag of free values. "FILE" completes file names.
func valueWords(f *flag.Flag) []string {
	switch f.Name {
	case "config":
		return []string{"FILE"}
	case "log-level":
		return logLevels
	case "log-format":
		return logFormats
	}
	return nil
}

// flagNames returns --name for each flag of fs, and -h --help.
func flagNames(flags []*flag.Flag) []string {
	var names []string
	for _, f := range flags {
		names = append(names, "--"+f.Name)
	}
	return append(names, "-h", "--help")
}

// bash is the bash script: complete -F _shaper shaper. It finds the
// command (the first word that is neither a flag nor a global flag's
// value), then completes a flag's value, the command's flags (after -, or
// where it takes no words), or its words.
func (c completion) bash() string {
	var b strings.Builder
	b.WriteString(`# bash completion for shaper, written by: shaper completion bash
# Load it in ~/.bashrc with: source <(shaper completion bash)
# or save it as /etc/bash_completion.d/shaper.

_shaper() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local cmd= i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in
`)
	var globalValued []string
	for _, f := range c.global {
		if takesValue(f) {
			globalValued = append(globalValued, "-"+f.Name, "--"+f.Name)
		}
	}
	fmt.Fprintf(&b, "        %s) ((i++)) ;;\n", strings.Join(globalValued, "|"))
	b.WriteString(`        -*) ;;
        *) cmd=${COMP_WORDS[i]}; break ;;
        esac
    done

    local flags words valued
    case $cmd in
`)
	var names []string
	for _, cc := range c.commands {
		names = append(names, cc.name)
	}
	writeCase := func(name string, flags []*flag.Flag, words []string) {
		var valued []string
		for _, f := range flags {
			if takesValue(f) {
				valued = append(valued, "-"+f.Name, "--"+f.Name)
			}
		}
		fmt.Fprintf(&b, "    %s)\n        flags='%s'\n        words='%s'\n        valued=' %s ' ;;\n",
			name, strings.Join(flagNames(flags), " "), strings.Join(words, " "), strings.Join(valued, " "))
	}
	writeCase("''", c.global, names)
	for _, cc := range c.commands {
		writeCase(cc.name, cc.flags, cc.words)
	}
	b.WriteString(`    *) return ;;
    esac

    if [[ $valued == *" $prev "* ]]; then
        case ${prev#-} in
`)
	for _, f := range c.allFlags() {
		switch words := valueWords(f); {
		case len(words) == 1 && words[0] == "FILE":
			fmt.Fprintf(&b, "        %s|-%s) compopt -o filenames 2>/dev/null; local IFS=$'\\n'; COMPREPLY=($(compgen -f -- \"$cur\")) ;;\n", f.Name, f.Name)
		case words != nil:
			fmt.Fprintf(&b, "        %s|-%s) COMPREPLY=($(compgen -W '%s' -- \"$cur\")) ;;\n", f.Name, f.Name, strings.Join(words, " "))
		}
	}
	b.WriteString(`        *) COMPREPLY=() ;;
        esac
        return
    fi
    if [[ $cur == -* || -z $words ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    fi
}

complete -F _shaper shaper
`)
	return b.String()
}

// allFlags returns every flag of shaper once, by name.
func (c completion) allFlags() []*flag.Flag {
	seen := map[string]bool{}
	var all []*flag.Flag
	add := func(f *flag.Flag) {
		if !seen[f.Name] {
			seen[f.Name] = true
			all = append(all, f)
		}
	}
	for _, f := range c.global {
		add(f)
	}
	for _, cc := range c.commands {
		for _, f := range cc.flags {
			add(f)
		}
	}
	return all
}

// zsh is the zsh script: a #compdef function on _arguments, with each
// flag's usage as its description.
func (c completion) zsh() string {
	var b strings.Builder
	b.WriteString(`#compdef shaper
# zsh completion for shaper, written by: shaper completion zsh
# Save it as _shaper in a directory of $fpath (before compinit runs), or load
# it in ~/.zshrc after compinit with: source <(shaper completion zsh)

_shaper() {
    local curcontext=$curcontext state line
    typeset -A opt_args
    local -a subcommands
    subcommands=(
`)
	for _, cc := range c.commands {
		fmt.Fprintf(&b, "        %s\n", zshQuote(cc.name+":"+cc.summary))
	}
	b.WriteString("    )\n    _arguments -C \\\n")
	for _, f := range c.global {
		fmt.Fprintf(&b, "        %s \\\n", zshFlagSpec(f))
	}
	b.WriteString(`        '(- *)'{-h,--help}'[print the help]' \
        '1:command:->command' \
        '*::argument:->argument'
    case $state in
    command) _describe -t commands 'shaper command' subcommands ;;
    argument)
        case $words[1] in
`)
	for _, cc := range c.commands {
		fmt.Fprintf(&b, "        %s)\n            _arguments \\\n", cc.name)
		for _, f := range cc.flags {
			fmt.Fprintf(&b, "                %s \\\n", zshFlagSpec(f))
		}
		if len(cc.words) > 0 {
			fmt.Fprintf(&b, "                %s \\\n", zshQuote("1:argument:("+strings.Join(cc.words, " ")+")"))
		}
		b.WriteString("                '(- *)'{-h,--help}'[print the help]' ;;\n")
	}
	b.WriteString(`        esac ;;
    esac
}

if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    _shaper "$@"
else
    compdef _shaper shaper
fi
`)
	return b.String()
}

// zshFlagSpec is the _arguments spec of f: --name[usage] and, for a flag
// that takes a value, :kind:action.
func zshFlagSpec(f *flag.Flag) string {
	kind, text := flag.UnquoteUsage(f)
	desc := strings.NewReplacer(`\`, `\\`, `[`, `\[`, `]`, `\]`).Replace(text)
	spec := "--" + f.Name + "[" + desc + "]"
	if takesValue(f) {
		if kind == "" || kind == "value" {
			kind = "string"
		}
		action := ""
		switch words := valueWords(f); {
		case len(words) == 1 && words[0] == "FILE":
			action = "_files"
		case words != nil:
			action = "(" + strings.Join(words, " ") + ")"
		}
		spec += ":" + kind + ":" + action
	}
	return zshQuote(spec)
}

// zshQuote quotes s for zsh in single quotes.
func zshQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
